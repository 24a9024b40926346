"""Local endpoints: a completed local job's model served by its own process over HTTP on 127.0.0.1, with
SageMaker's status words, so `/deploy`, `/predict` and `/undeploy` work the same without AWS.

Each endpoint is a folder `home/local-endpoints/<name>/`: `endpoint.json` (what was asked, the pid),
`server.json` (written by the server once it answers: its port), `server.log`. The server runs detached
in its own session (the local training runner starts it), so a restarted bot finds it through the folder.

Status: process alive and `server.json` there -> InService; alive without it -> Creating (loading the
model); process gone -> Failed with the log's last line. Undeploy stops the process and removes the folder.

A model folder is a job's output, other people's data: before it is served it is checked (job_files.model_files:
folders and regular files only, no link, FIFO or device, at most MODEL_MAX_BYTES) and linked file by file into
the endpoint's own `models/<config>/`, so what is served is what was checked and no other job's folder is
reached. The server runs in the sandbox local jobs run in (sandbox.py: an unprivileged uid in its own user
namespace, no capabilities), with the bot's interpreter and `models/` read-only and only its `run/` folder
(`server.json`) writable; it shares the host's network, since its port is the endpoint.

Updates in place: each config the endpoint may serve is a model folder, kept in `configs.json`; an update
writes the wanted one to `serving.json` (atomically) and sends the server SIGHUP, and the server swaps its
model without dropping a request (see endpoint_server). Until `server.json` names the wanted config the
endpoint is Updating; a model the server could not load leaves it InService on the old config, with why.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import jobs
from jobs.backends.local.environment import base_environment
from jobs.backends.local.interpreter import Interpreter
from jobs.backends.local.job_files import JobFileRefused, model_files, open_job_file, read_job_json
from jobs.backends.local.runner import SIGKILL, SIGTERM, ProcessRunner, SubprocessRunner
from jobs.backends.local.sandbox import JobMounts, Sandbox, hand_over, sandbox_environment, sandbox_identity
from jobs.backends.local.state import tail_lines
from jobs.clock import Clock
from jobs.endpoints.port import DeployRequest, EndpointAccess, RemoteEndpoint, UpdateRequest
from jobs.errors import BackendError, BadInput, NotFound

logger = logging.getLogger(__name__)


SERVER_MODULE = "jobs.backends.local.endpoint_server"
SIGHUP = int(signal.SIGHUP)  # the server reads serving.json and swaps its model
STOP_WAIT_SECONDS = 5.0
INVOKE_TIMEOUT_SECONDS = 60.0
#: The most a served model folder may hold.
MODEL_MAX_BYTES = 50 * 10**9
#: The sandbox's /tmp and /dev/shm for a model server.
SERVER_TMPFS_BYTES = 256 << 20
_SPARE = ("bwrap",)  # the sandbox's own processes: a signal for the server would end them and the sandbox


class LocalEndpoints:
    """`EndpointBackend` on local processes (see the module docstring)."""

    name = "local"

    def __init__(
        self,
        home: Path,
        clock: Clock,
        *,
        runner: ProcessRunner | None = None,
        python: str = sys.executable,
        sandbox: Sandbox | None = None,
        handler_unsandboxed: bool = False,
    ) -> None:
        self._root = Path(home).resolve() / "local-endpoints"
        self._jobs_root = Path(home).resolve() / "local-jobs"
        self._clock = clock
        self._runner = runner or SubprocessRunner()
        self._python = python
        # A team's inference handler is other people's code: it runs in bwrap, as their training does; without a
        # working sandbox only the console (one person on their own machine) may run it.
        self._sandbox = sandbox or Sandbox()
        self._handler_unsandboxed = handler_unsandboxed
        self._spawned: set[int] = set()  # between fork and exec a child still shows our own command line
        self._local = (
            threading.local()
        )  # each thread keeps its own connections (http.client is not thread-safe)

    # -- deploy ------------------------------------------------------------------------------------

    def deploy(self, request: DeployRequest) -> None:
        model = Path(request.model_data)
        folder = self._root / request.name
        if self._pid(folder) is not None and self._alive(folder):
            raise BackendError(
                f"A local endpoint named {request.name} is already running: `/undeploy {request.name}` first."
            )
        shutil.rmtree(folder, ignore_errors=True)
        (folder / "run").mkdir(parents=True)
        try:
            staged = self._stage(model, folder, request.name)
            handler = self._handler_arguments(request, staged)
            isolated = self._isolated(bool(handler))
        except (BackendError, BadInput):
            shutil.rmtree(folder, ignore_errors=True)
            raise
        argv = [self._python, "-m", SERVER_MODULE, "--model", str(staged), "--task", request.task, *handler]
        argv += ["--state", str(folder / "run" / "server.json"), "--config", request.name]
        argv += ["--serving", str(folder / "serving.json")]
        _write_json(folder / "configs.json", {request.name: {"model": str(staged), "task": request.task}})
        env = {  # allowlisted: the model server never sees the bot's tokens or keys
            **base_environment(self._python),
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1",
        }
        if isolated:
            argv, env = self._sandboxed(argv, env, folder, Path(handler[1]) if handler else None)
        try:
            pid = self._runner.spawn(argv, env=env, cwd=folder, log_path=folder / "server.log")
            self._spawned.add(pid)
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise BackendError(f"Could not start the local endpoint {request.name}: {exc}.") from exc
        record = {
            "name": request.name,
            "model": str(model),
            "task": request.task,
            "handler": bool(handler),
            "sandboxed": isolated,
            "pid": pid,
            "created_at": self._clock.now().isoformat(),
        }
        (folder / "endpoint.json").write_text(json.dumps(record, indent=1))
        logger.info("started local endpoint %s (pid %d) for %s", request.name, pid, model)

    def _isolated(self, handler: bool) -> bool:
        """Whether the server runs sandboxed: wherever the sandbox works (a model folder is other people's
        data). A team's handler is other people's code too: without a working sandbox only the console (one
        person on their own machine) may run it, and elsewhere it is refused in one sentence (BadInput)."""
        if self._sandbox.active():
            return True
        if not handler or self._handler_unsandboxed:
            return False
        raise BadInput(
            "A team's inference handler (entry_point=, or code/inference.py in the model) runs on this bot's local "
            f"backend only inside a bubblewrap sandbox, and here {self._sandbox.unsandboxed_reason()}: install "
            "bubblewrap and set TRAINBOT_LOCAL_SANDBOX=auto, or deploy without a handler."
        )

    def _handler_arguments(self, request: DeployRequest, staged: Path) -> list[str]:
        """``--handler DIR``: the team's inference.py (entry_point=, checked out at the job's commit), or the
        model's own code/inference.py (of its checked copy), as the inference toolkit finds one in the archive."""
        if request.handler is not None:
            from jobs.backends.code_sources import handler_folder

            folder = handler_folder(self._root.parent, request.handler)
            return ["--handler", str(folder), "--handler-entry", request.handler.entry_point]
        if (staged / "code" / "inference.py").is_file():
            return ["--handler", str(staged / "code"), "--handler-entry", "inference.py"]
        return []

    # -- reading -----------------------------------------------------------------------------------

    def describe(self, name: str) -> RemoteEndpoint:
        folder = self._folder(name)
        if not self._alive(folder):
            return RemoteEndpoint(name, "Failed", self._failure(folder))
        state = _server_state(folder)
        if state.get("port") is None:
            return RemoteEndpoint(name, "Creating")
        served = str(state.get("config") or name)
        wanted = str(_read_json(folder / "serving.json").get("config") or served)
        if wanted == served:
            return RemoteEndpoint(name, "InService", config_name=served)
        if state.get("failed_config") == wanted:
            reason = f"the new model did not load ({state.get('error', 'no reason given')})"
            return RemoteEndpoint(name, "InService", reason, config_name=served)
        return RemoteEndpoint(name, "Updating", config_name=served)

    # -- update in place ---------------------------------------------------------------------------

    def update(self, request: UpdateRequest) -> None:
        """Name the wanted config's model in `serving.json` and tell the server (SIGHUP): it swaps its model
        atomically (the rollout's canary and alarm are SageMaker's; a local swap is all at once)."""
        folder = self._folder(request.endpoint)
        pid = self._pid(folder)
        if pid is None or not self._alive(folder):
            raise BackendError(f"Local endpoint {request.endpoint} is not running: `/undeploy "
                               f"{request.endpoint}` and deploy again.")
        if _read_json(folder / "endpoint.json").get("handler"):
            raise BackendError(f"Local endpoint {request.endpoint} serves a team's inference handler, which a local "
                               "endpoint does not swap in place: deploy the new job with its entry_point= under "
                               "another name.")
        configs = _read_json(folder / "configs.json")
        if request.model is not None:
            staged = self._stage(Path(request.model.model_data), folder, request.config_name)
            configs[request.config_name] = {"model": str(staged), "task": request.model.task}
            _write_json(folder / "configs.json", configs)
        wanted = configs.get(request.config_name)
        if not isinstance(wanted, dict):
            raise BackendError(f"Local endpoint {request.endpoint} has no config {request.config_name} to go "
                               "back to.")
        _write_json(folder / "serving.json", {"config": request.config_name, **wanted})
        self._runner.signal_group(pid, SIGHUP, spare=_SPARE)
        logger.info("local endpoint %s: swapping to %s (%s)", request.endpoint, request.config_name, wanted["model"])

    def _failure(self, folder: Path) -> str:
        lines = [line for line in tail_lines(folder / "server.log", 40) if line.strip()]
        last = lines[-1].strip() if lines else "no output"
        return f"the local endpoint process exited ({last}); the full log is {folder / 'server.log'}"

    # -- delete ------------------------------------------------------------------------------------

    def delete(self, name: str, *, configs: Sequence[str] = ()) -> None:
        folder = self._root / name  # its configs live in the folder and go with it
        pid = self._pid(folder)
        if pid is not None and self._alive(folder):
            self._runner.signal_group(pid, SIGTERM, spare=_SPARE)
            if not self._group_ended(pid, STOP_WAIT_SECONDS):
                self._runner.signal_group(pid, SIGKILL)
                if not self._group_ended(pid, STOP_WAIT_SECONDS):
                    logger.warning("local endpoint %s: processes of group %d outlived SIGKILL", name, pid)
        shutil.rmtree(folder, ignore_errors=True)
        logger.info("removed local endpoint %s", name)

    # -- invoke ------------------------------------------------------------------------------------

    def invoke(self, name: str, payload: dict[str, Any]) -> Any:
        folder = self._folder(name)
        port = self._port(folder)
        if port is None:
            raise BackendError(
                f"Local endpoint {name} is still loading its model: try again in a few seconds."
            )
        try:
            status, data = self._post(port, json.dumps(payload).encode())
        except (OSError, http.client.HTTPException) as exc:
            raise BackendError(
                f"Local endpoint {name} did not answer on port {port} ({exc}): `/undeploy {name}` and deploy again."
            ) from exc
        answer = json.loads(data or b"null")
        if status == 400:
            raise BadInput(f"Endpoint {name} refused the inputs: {answer.get('error', 'bad request')}.")
        if status != 200:
            raise BackendError(f"Local endpoint {name} failed (HTTP {status}); see {folder / 'server.log'}.")
        return answer

    def _post(self, port: int, body: bytes) -> tuple[int, bytes]:
        """POST /invocations on this thread's kept-alive connection; a connection the server closed in the
        meantime is opened again once (asking a model twice is harmless)."""
        connections: dict[int, http.client.HTTPConnection] = self._local.__dict__.setdefault(
            "connections", {}
        )
        for attempt in (1, 2):
            connection = connections.get(port)
            fresh = connection is None
            if connection is None:
                connection = connections[port] = http.client.HTTPConnection(
                    "127.0.0.1", port, timeout=INVOKE_TIMEOUT_SECONDS
                )
            try:
                connection.request(
                    "POST", "/invocations", body=body, headers={"Content-Type": "application/json"}
                )
                response = connection.getresponse()
                return response.status, response.read()
            except (http.client.HTTPException, OSError):
                connection.close()
                del connections[port]
                if fresh or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    # -- links -------------------------------------------------------------------------------------

    def access(self, name: str) -> EndpointAccess:
        folder = self._root / name
        port = self._port(folder)
        url = f"http://127.0.0.1:{port}/invocations" if port else "http://127.0.0.1:<port>/invocations"
        return EndpointAccess(console_url=str(folder / "server.log"), invocation_url=url)

    # -- the folder --------------------------------------------------------------------------------

    def _folder(self, name: str) -> Path:
        folder = self._root / name
        if not (folder / "endpoint.json").is_file():
            raise NotFound(f"There is no local endpoint named {name!r}: /deploy the job again.")
        return folder

    @staticmethod
    def _pid(folder: Path) -> int | None:
        try:
            return int(json.loads((folder / "endpoint.json").read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return None

    @staticmethod
    def _port(folder: Path) -> int | None:
        try:
            return int(_server_state(folder)["port"])
        except (ValueError, KeyError, TypeError):
            return None

    # -- the model and the sandbox -----------------------------------------------------------------

    def _stage(self, model: Path, folder: Path, config: str) -> Path:
        """``model`` checked and linked into the endpoint's ``models/<config>``, which is what is served."""
        anchor, relative = self._anchor(model)
        try:
            files = model_files(anchor, relative, max_bytes=MODEL_MAX_BYTES)
        except FileNotFoundError:
            files = []
        except OSError as exc:
            reason = exc.strerror if isinstance(exc, JobFileRefused) else str(exc)
            raise BackendError(
                f"The model folder {model} of this job is not served: it {reason}. A model folder holds folders "
                "and regular files only (no links, FIFOs or devices), at most "
                f"{MODEL_MAX_BYTES // 10**9} GB."
            ) from exc
        if PurePosixPath("config.json") not in files:
            raise BackendError(
                f"The model folder {model} of this job is gone or incomplete, so it cannot be served: "
                "train the job again."
            )
        staged = folder / "models" / config
        shutil.rmtree(staged, ignore_errors=True)
        for name in files:
            _link_checked(anchor, f"{relative}/{name}", staged / name)
        return staged

    def _anchor(self, model: Path) -> tuple[Path, str]:
        """(a folder of the bot's, the model's path below it): under local-jobs, the job's folder is the job's
        too where it ran unsandboxed, so nothing below local-jobs is followed."""
        real = model.absolute()
        if self._jobs_root in real.parents:
            return self._jobs_root, real.relative_to(self._jobs_root).as_posix()
        return real.parent, real.name

    def _sandboxed(self, argv: list[str], env: dict[str, str], folder: Path,
                   handler: Path | None) -> tuple[list[str], dict[str, str]]:
        """The server's command in the sandbox: the bot's interpreter, its ``jobs`` package, the endpoint's
        folder (the checked model copies) and a team's handler folder read-only, ``run/`` writable, the host's
        network (the bot reaches it on loopback). Not tied to the bot's life: the server outlives a restart."""
        run = folder / "run"
        readable = (*_server_readable(self._python), *((handler,) if handler is not None else ()))
        mounts = JobMounts(folder, (run,), readable, network=True, cwd=run,
                           identity=sandbox_identity(folder / "sandbox-passwd", folder / "sandbox-group", run),
                           tmpfs_bytes=SERVER_TMPFS_BYTES)
        inside = sandbox_environment(env, run)
        hand_over(mounts, self._sandbox.host_uid())
        return [*self._sandbox.arguments(mounts, die_with_parent=False), "--", *argv], inside

    def _group_ended(self, pgid: int, seconds: float) -> bool:
        """Waits until no process of the server's group is left (the sandbox's inner processes end after its
        first one), at most ``seconds``: "stopped" is said only of a server that holds no memory any more."""
        deadline = time.monotonic() + seconds
        while self._runner.group_alive(pgid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def _alive(self, folder: Path) -> bool:
        pid = self._pid(folder)
        if pid is None or not self._runner.is_alive(pid):
            return False
        return pid in self._spawned or _is_our_server(pid, folder)


def _server_state(folder: Path) -> dict[str, Any]:
    """What the server wrote (run/server.json: its port, the config it serves), read as any job's file is."""
    data = read_job_json(folder, "run/server.json")
    return data if isinstance(data, dict) else {}


def _server_readable(python: str) -> tuple[Path, ...]:
    """What the server reads: the bot's interpreter environment and the `jobs` package it runs from."""
    package = Path(jobs.__file__).resolve().parent
    try:
        return (*Interpreter.of(python).read_only_paths(), package)
    except BackendError:  # not a Python: it fails at start, and the endpoint says so
        return (Path(python).resolve().parent, package)


def _link_checked(anchor: Path, relative: str, dest: Path) -> None:
    """The job's file, opened without following a link and checked to be regular, linked (else copied) to
    ``dest`` without its set-user-ID or set-group-ID bits."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open_job_file(anchor, relative) as job_file:
        os.fchmod(job_file.fd, os.fstat(job_file.fd).st_mode & 0o777 & ~0o022 | 0o444)
        try:
            os.link(f"/proc/self/fd/{job_file.fd}", dest)  # the very inode checked
        except OSError:
            with open(dest, "wb") as out:
                offset = 0
                while chunk := job_file.read(1 << 20, offset=offset):
                    out.write(chunk)
                    offset += len(chunk)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    staging = path.with_suffix(".tmp")
    staging.write_text(json.dumps(data, indent=1))
    os.replace(staging, path)


def _is_our_server(pid: int, folder: Path) -> bool:
    """After a reboot a pid can belong to another program: it is ours only if it serves this folder."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return True  # no /proc (macOS): trust the pid
    return str(folder / "run" / "server.json") in command

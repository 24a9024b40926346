"""Local jobs in a bubblewrap sandbox: a job never runs with the bot's privileges.

A local job is other people's code (a team's repository) or the bot's scripts run with other people's
arguments. In the sandbox (``bwrap``) it has its own PID namespace (no bot process to read
``/proc/<pid>/environ`` from), its own IPC and UTS namespaces, no capabilities, and a file system of its own:
the system's programs and libraries, the interpreter environment it runs on and the data it reads, all
read-only; its job folder read-only except the parts it writes (model, output, code, its own Python
environment, a scratch folder for HOME and temporary files) and its lineage's checkpoint folder. The bot's
home (TRAINBOT_HOME: the store, other jobs, the code cache), the bot's secrets and the rest of the machine are
not there at all. Offline jobs (the default) get a network namespace of their own too (loopback only: no
cloud metadata endpoint, no other job's endpoint server, no database on this host); with the hub on
(TRAINBOT_LOCAL_HUB=1) the job shares the host's network, as it must to download.

``TRAINBOT_LOCAL_SANDBOX``: ``auto`` (bwrap when it works here, probed once), ``bwrap`` (required: a machine
where it does not work refuses local jobs) or ``off``. The job's processes are the sandbox's children, so
stop and take-capacity signal them as before; the wrapper that records the exit code stays outside.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from jobs.backends.local.interpreter import Interpreter
from jobs.backends.local.state import JobFolder
from jobs.errors import BadInput, ConfigError

logger = logging.getLogger(__name__)

SandboxMode = Literal["auto", "bwrap", "off"]
PROBE_TIMEOUT_S = 10
#: The system's programs and libraries (a merged-/usr system has links for all but /usr).
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: What of /etc a Python job needs: the loader, certificates, name lookup, users, time zone. Never shadow.
_ETC = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl", "ca-certificates", "pki",
    "resolv.conf", "hosts", "host.conf", "gai.conf", "nsswitch.conf", "services", "protocols",
    "passwd", "group", "localtime", "timezone", "mime.types", "os-release",
)
_NAMESPACES = ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try")
_HOSTNAME = "trainbot-job"


@dataclass(frozen=True)
class JobMounts:
    """What one sandboxed job sees besides the system."""

    folder: Path  # the job's folder: read-only, but for `writable`
    writable: tuple[Path, ...]  # its parts the job writes, and its lineage's checkpoint folder
    readable: tuple[Path, ...]  # the interpreter environment, the data and model folders it reads
    network: bool  # the host's network (hub downloads); otherwise a network namespace with loopback only
    cwd: Path
    hosts: Path | None = None  # /etc/hosts inside (`hosts_file`); the host's own when None
    # The job's folders again where SageMaker's container has them (source, path inside, writable): a script
    # that names /opt/ml/model or /opt/ml/checkpoints itself (a default, not an argument) finds them there.
    container: tuple[tuple[Path, str, bool], ...] = ()


class Sandbox:
    """Wraps a job's command in bwrap when the mode and this machine allow it."""

    def __init__(self, mode: SandboxMode = "auto", *, executable: str = "bwrap") -> None:
        self.mode = mode
        self._executable = executable

    def active(self) -> bool:
        """Whether jobs run sandboxed here; ``bwrap`` mode on a machine where bwrap does not work refuses."""
        if self.mode == "off":
            return False
        problem = self.problem()
        if problem is None:
            return True
        if self.mode == "bwrap":
            raise ConfigError(
                f"TRAINBOT_LOCAL_SANDBOX=bwrap, but {problem}: install bubblewrap (apt-get install bubblewrap) "
                "or set TRAINBOT_LOCAL_SANDBOX=auto."
            )
        return False

    def problem(self) -> str | None:
        """Why bwrap cannot sandbox a job on this machine; None when it can (probed once per process)."""
        return _probe(self._executable)

    def unsandboxed_reason(self) -> str:
        if self.mode == "off":
            return "TRAINBOT_LOCAL_SANDBOX=off"
        return self.problem() or "the sandbox is off"

    def refuse_own_code(self) -> BadInput:
        """The one sentence for own code that would run unsandboxed where other people's code must not."""
        return BadInput(
            "Own code (code=) runs on this bot's local backend only inside a bubblewrap sandbox, and here "
            f"{self.unsandboxed_reason()}: install bubblewrap (apt-get install bubblewrap) and set "
            "TRAINBOT_LOCAL_SANDBOX=auto (or bwrap), or run it from `trainbot console` on your own machine."
        )

    def describe(self, *, network: bool) -> str:
        """A few words for the plan card on how the job is isolated."""
        if not self.active():
            return f"isolation: none ({self.unsandboxed_reason()}), the job runs with this user's rights"
        net = "host network for the hub" if network else "no network"
        return f"isolation: bwrap sandbox (own PIDs, {net}, writes only its own folders)"

    def command(self, argv: Sequence[str], mounts: JobMounts) -> list[str]:
        """``argv`` (the wrapper, then the job's command) with bwrap between the two: the wrapper, which
        records the exit code, stays outside; everything after its ``--`` runs inside."""
        if len(argv) < 4 or argv[3] != "--":
            raise ValueError("expected WRAPPER_PYTHON WRAPPER EXIT_FILE -- COMMAND ...")
        return [*argv[:4], *self.arguments(mounts), "--", *argv[4:]]

    def arguments(self, mounts: JobMounts, *, die_with_parent: bool = True) -> list[str]:
        """bwrap's arguments for ``mounts``; ``die_with_parent``: gone with the process that started it (a job's
        wrapper), or not (a detached endpoint server that outlives a bot restart)."""
        args = [self._executable, *(["--die-with-parent"] if die_with_parent else []), *_NAMESPACES, "--cap-drop",
                "ALL", "--hostname", _HOSTNAME]
        if not mounts.network:
            args.append("--unshare-net")
        args += _system_mounts()
        if mounts.hosts is not None:
            args += ["--ro-bind", str(mounts.hosts), "/etc/hosts"]  # over the host's, bound just before
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]
        args += ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
        for path in _outermost(mounts.readable):
            args += ["--ro-bind", str(path), str(path)]
        args += ["--ro-bind", str(mounts.folder), str(mounts.folder)]
        for path in _outermost(mounts.writable):
            args += ["--bind", str(path), str(path)]
        for source, inside, writable in mounts.container:
            args += ["--bind" if writable else "--ro-bind", str(source), inside]
        # The root is bwrap's own tmpfs, with the folders it made for the mounts: read-only too.
        args += ["--remount-ro", "/", "--chdir", str(mounts.cwd)]
        return args


def job_mounts(
    folder: JobFolder,
    interpreter: Interpreter,
    *,
    checkpoints: Path,
    data: Iterable[Path],
    home: Path,
    network: bool,
) -> JobMounts:
    """A job's mounts: ``interpreter`` (the environment it runs on) and ``data`` (its channels, the offline
    model, the data folders local jobs may read) read-only, its folder's working parts and ``checkpoints``
    writable. A data folder that holds the bot's home is left out: the store is never a job's to read."""
    readable = [*interpreter.read_only_paths()]
    for path in data:
        real = Path(os.path.realpath(path))
        if real == home or real in home.parents:
            logger.warning("%s holds TRAINBOT_HOME; it is not mounted into local jobs", real)
            continue
        readable.append(real)
    for path in (folder.code_dir, folder.model_dir, folder.output_dir, folder.env_dir, folder.scratch_dir,
                 folder.input_data_dir):
        path.mkdir(parents=True, exist_ok=True)
    writable = (folder.code_dir, folder.model_dir, folder.output_dir.parent, folder.env_dir, folder.scratch_dir,
                folder.input_data_dir, checkpoints)
    hosts = hosts_file(folder.path / "sandbox-hosts")
    return JobMounts(folder.path, writable, tuple(readable), network, cwd=folder.code_dir, hosts=hosts,
                     container=container_tree(folder, checkpoints))


#: SageMaker's training container tree.
CONTAINER_ROOT = "/opt/ml"


def container_tree(folder: JobFolder, checkpoints: Path) -> tuple[tuple[Path, str, bool], ...]:
    """The job's folders at ``/opt/ml`` inside the sandbox, as the training image lays them out: the model, the
    output, the code, the input (its config read-only, its channels' data writable as the job's own copies) and
    the lineage's checkpoint folder (which SageMaker fills from checkpoint_s3_uri)."""
    tree = (
        (folder.model_dir, f"{CONTAINER_ROOT}/model", True),
        (folder.output_dir.parent, f"{CONTAINER_ROOT}/output", True),
        (folder.code_dir, f"{CONTAINER_ROOT}/code", True),
        (folder.config_dir, f"{CONTAINER_ROOT}/input/config", False),
        (folder.input_data_dir, f"{CONTAINER_ROOT}/input/data", True),
        (checkpoints, f"{CONTAINER_ROOT}/checkpoints", True),
    )
    for source, _, _ in tree:
        source.mkdir(parents=True, exist_ok=True)  # bwrap binds only what exists
    return tree


def hosts_file(path: Path) -> Path:
    """The job's /etc/hosts: the host's, with the sandbox's own name on loopback. torchrun --standalone
    advertises its rendezvous under the host name, and gloo binds to what that name resolves to: unresolvable,
    the workers of a job on several processes wait for the rendezvous until they time out."""
    try:
        host = Path("/etc/hosts").read_text(errors="replace")
    except OSError:
        host = "127.0.0.1\tlocalhost\n"
    path.write_text(f"{host.rstrip()}\n127.0.0.1\t{_HOSTNAME}\n")
    return path


def sandbox_environment(env: Mapping[str, str], scratch: Path) -> dict[str, str]:
    """The job's variables inside: HOME, temporary files and caches in its scratch folder (the bot's own
    HOME and Hugging Face cache are not mounted)."""
    inside = dict(env)
    inside.update(
        HOME=str(scratch),
        TMPDIR=str(scratch / "tmp"),
        HF_HOME=str(scratch / "huggingface"),
        XDG_CACHE_HOME=str(scratch / "cache"),
        MPLCONFIGDIR=str(scratch / "matplotlib"),
    )
    for name in ("HF_HUB_CACHE", "HF_DATASETS_CACHE", "TRANSFORMERS_CACHE"):
        inside.pop(name, None)
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    return inside


def _system_mounts() -> list[str]:
    args: list[str] = []
    for path in _SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in _ETC:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """The paths that exist, without those inside another one of them (one bind covers them), parents first."""
    kept: list[Path] = []
    for path in sorted({Path(p) for p in paths if Path(p).exists()}, key=lambda p: (len(p.parts), str(p))):
        if not any(path == k or k in path.parents for k in kept):
            kept.append(path)
    return kept


@lru_cache(maxsize=4)
def _probe(executable: str) -> str | None:
    """Run the sandbox's own namespaces and mounts around ``true``: None when that works."""
    found = shutil.which(executable)
    if found is None:
        return "bwrap is not installed on this machine"
    argv = [found, "--die-with-parent", *_NAMESPACES, "--unshare-net", "--cap-drop", "ALL", *_system_mounts(),
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap could not start ({exc})"
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        logger.warning("bwrap does not work here: %s", reason)
        return f"bwrap does not work on this machine ({reason})"
    return None

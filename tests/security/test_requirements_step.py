"""A job's requirements.txt on the local backend (issue 32): installed in a step of its own before the job, with
the network pip needs, so it must reach the configured package index and nothing else, run no package's code,
and see none of the bot's secrets or home.

Each attack is a team's repository (made here) launched on the real LocalBackend with the bwrap sandbox on and
fake secrets in the bot's environment, on the transformers 4.28.1 runtime:
- a requirements.txt that points pip elsewhere (another index, a URL, a path outside the code): the launch is
  refused with one sentence, nothing of the job is left, and the other "index" (a server on loopback) is never
  asked; a wheel inside the code itself is the code's, and installs into the job's own environment;
- an sdist whose setup.py would run (on the configured index, which the bot's own pip configuration names): the
  step installs wheels only, so it fails naming the package and setup.py never runs;
- whatever runs in the step (here a stand-in for pip, put where the step's Python is): it sees none of the bot's
  variables, no TRAINBOT_HOME, no bot process, and can write only the job's environment and scratch folder.
"""

from __future__ import annotations

import http.server
import io
import os
import sys
import tarfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.backends.local.first_step import FirstStep
from jobs.backends.local.runtime import Runtime
from jobs.backends.local.sandbox import Sandbox
from jobs.backends.local.state import JobFolder
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.errors import BadInput
from jobs.planning.grammar import parse_command
from jobs.planning.plan import LaunchPlan, build_plan
from jobs.records import RemoteJob, RemoteStatus
from tests.security.rigs import wheel
from tests.support.git_repos import make_repo
from tests.support.runtimes import link_runtimes
from tests.support.waiting import wait_for

CANARY = f"canary-{uuid.uuid4().hex[:12]}"
BOT_SECRETS = {"SLACK_BOT_TOKEN": f"xoxb-{CANARY}", "AWS_SECRET_ACCESS_KEY": f"{CANARY}-aws",
               "TRAINBOT_DATABASE_URL": f"postgresql://bot:{CANARY}@db/trainbot", "HF_TOKEN": f"hf_{CANARY}"}
SCRIPT = "print('the job ran')\n"

pytestmark = [pytest.mark.timeout(900),
              pytest.mark.skipif(Sandbox().problem() is not None, reason="bwrap does not work on this machine")]


class _Recorder(http.server.BaseHTTPRequestHandler):
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
        type(self).asked.append(self.path)
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def other_index() -> Iterator[tuple[str, list[str]]]:
    """A package "index" on loopback that records every request: it must never be asked."""
    asked: list[str] = []
    handler = type("Recorder", (_Recorder,), {"asked": asked})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()


@pytest.fixture
def bot_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in BOT_SECRETS.items():
        monkeypatch.setenv(name, value)


def _backend(tmp_path: Path) -> tuple[LocalBackend, Path]:
    home = tmp_path / "home"
    link_runtimes(home)
    return LocalBackend(home, clock=SystemClock()), home  # the sandbox as the bot runs it: required for own code


def _plan(tmp_path: Path, files: dict[str, str | bytes], name: str) -> LaunchPlan:
    repo = make_repo(tmp_path / "git", "team")
    for path, data in files.items():  # binary files (a wheel) written beside; commit() writes the texts
        if isinstance(data, bytes):
            (repo.work / path).parent.mkdir(parents=True, exist_ok=True)
            (repo.work / path).write_bytes(data)
    commit = repo.commit({"train.py": SCRIPT, **{p: d for p, d in files.items() if isinstance(d, str)}})
    spec = parse_command(f"code=git+{repo.url}@main entry=train.py").model_copy(update={"code_commit": commit})
    return build_plan(spec, bucket="", lineage_id=name)


def _launch(tmp_path: Path, files: dict[str, str | bytes], name: str) -> tuple[RemoteJob, Path]:
    backend, home = _backend(tmp_path)
    backend.launch(name, _plan(tmp_path, files, name))
    ended: list[RemoteJob] = []

    def done() -> bool:
        ended[:] = [backend.describe(name)]
        return ended[0].status.is_terminal()

    wait_for(done, f"{name} to end")
    return ended[0], home / "local-jobs" / name


@pytest.mark.parametrize("line, says", [
    ("--extra-index-url {index}/simple\nprobe-pkg==1.0", "names another package source"),
    ("-i {index}/simple\nprobe-pkg==1.0", "names another package source"),
    ("--find-links {index}/wheels\nprobe-pkg==1.0", "names another package source"),
    ("probe-pkg @ {index}/probe_pkg-1.0-py3-none-any.whl", "installs from a URL"),
    ("git+{index}/team/probe.git", "installs from a URL"),
    ("../outside/probe_pkg-1.0-py3-none-any.whl", "names a wheel outside the job's code"),
    ("{outside}/probe_pkg-1.0-py3-none-any.whl", "names a wheel outside the job's code"),
])
def test_a_requirement_naming_another_source_is_refused_at_launch_and_asks_no_one(
    image_runtime: Runtime, tmp_path: Path, other_index: tuple[str, list[str]], bot_env: None, line: str, says: str,
) -> None:
    url, asked = other_index
    outside = tmp_path / "git" / "outside"
    outside.mkdir(parents=True)
    (outside / "probe_pkg-1.0-py3-none-any.whl").write_bytes(b"not a wheel")
    backend, home = _backend(tmp_path)
    plan = _plan(tmp_path, {"requirements.txt": line.format(index=url, outside=outside) + "\n"}, "req-other")
    with pytest.raises(BadInput, match=says) as refused:
        backend.launch("req-other", plan)
    assert "\n" not in refused.value.user_message()
    assert not (home / "local-jobs" / "req-other").exists()  # nothing of a job was left, nothing ran
    assert asked == []


def test_a_wheel_inside_the_code_installs_into_the_jobs_own_environment(
    image_runtime: Runtime, tmp_path: Path, bot_env: None,
) -> None:
    name, data = wheel("probe_code_wheel", "VALUE = 7\n")
    # One word: the toolkit passes the script's output on in pieces, a space may become a line break.
    script = "import probe_code_wheel\nprint(f'probe-value={probe_code_wheel.VALUE}', flush=True)\n"
    remote, folder = _launch(tmp_path, {"train.py": script, f"wheels/{name}": data,
                                        "requirements.txt": f"./wheels/{name}\n"}, "req-wheel")
    log = (folder / "logs" / "train.log").read_text()
    assert remote.status is RemoteStatus.COMPLETED, log[-3000:]
    assert "probe-value=7" in log
    assert list((folder / "env").glob("lib/python*/site-packages/probe_code_wheel"))
    assert not (folder / "prepare.json").exists()  # the step's settings are gone before the job reads its folder


def _sdist(marker: Path) -> bytes:
    """probe-sdist 1.0 as a source distribution whose setup.py writes ``marker`` (and the bot's variables)."""
    setup = (f"import os, pathlib\npathlib.Path({str(marker)!r}).write_text(repr(dict(os.environ)))\n"
             "from setuptools import setup\nsetup(name='probe-sdist', version='1.0', py_modules=[])\n")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in (("setup.py", setup), ("PKG-INFO", "Metadata-Version: 2.1\nName: probe-sdist\n"
                                                              "Version: 1.0\n")):
            data = text.encode()
            info = tarfile.TarInfo(f"probe-sdist-1.0/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_an_sdists_setup_py_never_runs_wheels_only(
    image_runtime: Runtime, tmp_path: Path, bot_env: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    links = tmp_path / "configured-links"  # the bot's own pip configuration names it: the configured index
    links.mkdir()
    marker = tmp_path / "setup-py-ran"
    (links / "probe-sdist-1.0.tar.gz").write_bytes(_sdist(marker))
    monkeypatch.setenv("PIP_FIND_LINKS", f"{os.environ.get('PIP_FIND_LINKS', '')} {links}".strip())
    remote, folder = _launch(tmp_path, {"requirements.txt": "probe-sdist==1.0\n"}, "req-sdist")
    assert remote.status is RemoteStatus.FAILED
    assert remote.failure_reason.startswith("AlgorithmError: requirements.txt could not be installed: "
                                            "probe-sdist==1.0 has no wheel on the package index")
    assert not marker.exists() and not list(folder.rglob("setup-py-ran"))


SPY = """#!/bin/sh
# Stands in for the step's pip: reports what the step can see and do.
out="{out}"
env > "$out/env.txt"
ls /proc | grep -c '^[0-9]' > "$out/pids.txt"
ls -A "{home}" > "$out/home-listing.txt"
for path in "{home}/trainbot.db" "{home}/code" "{bot_home}/.netrc"; do
  [ -e "$path" ] && echo "$path" >> "$out/visible.txt"
done
touch "{home}/written-by-step" "{home}/local-jobs/written-by-step" "{runtime}/written-by-step" 2>/dev/null
touch "$HOME/written-by-step"
echo done > "$out/done.txt"
"""


def test_what_runs_in_the_step_sees_no_secret_no_bot_home_and_writes_only_the_jobs_environment(
    image_runtime: Runtime, tmp_path: Path, bot_env: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jobs.backends.local.requirements import install_requirements

    bot_home = tmp_path / "bot-home"  # the bot user's HOME, with a credential in it
    bot_home.mkdir()
    (bot_home / ".netrc").write_text(f"machine index login bot password {CANARY}\n")
    monkeypatch.setenv("HOME", str(bot_home))
    home = tmp_path / "home"
    link_runtimes(home)
    (home / "trainbot.db").write_text(f"the store {CANARY}")
    folder = JobFolder(home / "local-jobs", "req-spy")
    folder.path.mkdir(parents=True)
    out = folder.scratch_dir / "report"  # the spy's own notes, in what the step may write
    out.mkdir(parents=True)
    # The step as a launch sets it up (the backend's FirstStep), with the sandbox the bot runs jobs in.
    install = FirstStep(home, sys.executable, Sandbox()).install(folder, image_runtime, isolated=True)
    spy = folder.env_dir / "bin" / "python"  # where the step's Python is: the job's own environment
    spy.parent.mkdir(parents=True, exist_ok=True)
    spy.write_text(SPY.format(out=out, home=home.resolve(), runtime=image_runtime.prefix, bot_home=bot_home))
    spy.chmod(0o755)
    requirements = folder.path / "requirements.txt"
    requirements.write_text("tabulate==0.9.0\n")
    install_requirements(requirements, spy, install)
    assert (out / "done.txt").is_file()
    seen = (out / "env.txt").read_text()
    assert CANARY not in seen and "SLACK_" not in seen and "TRAINBOT_" not in seen and "AWS_" not in seen
    assert f"HOME={folder.scratch_dir}" in seen
    assert not (out / "visible.txt").exists(), (out / "visible.txt").read_text()
    # Nothing it wrote outside the job's environment and scratch folder reached the host (a path under /tmp may
    # exist inside as the sandbox's own tmpfs, which goes with it); its HOME is the scratch folder.
    written = {p.parent for p in tmp_path.rglob("written-by-step")} | \
        {p.parent for p in image_runtime.prefix.rglob("written-by-step")}
    assert written == {folder.scratch_dir}
    # Of TRAINBOT_HOME only the path to the job's own folder (and the runtimes' link) exists inside.
    assert set((out / "home-listing.txt").read_text().split()) <= {"local-jobs", "runtimes"}
    assert int((out / "pids.txt").read_text()) <= 5  # its own PID namespace: bwrap's, the shell's, ls and grep

"""Item 1: a job never runs with the bot's privileges.

A team's script, from a git repository the test makes, is launched through the real surface (`/train` and the
Launch button as signed Slack requests into the app `trainbot serve --http` builds on bot.wiring) onto the
local backend, with the bot's secrets in the bot's environment. The script does what a careful attacker's
would: it reads every `/proc/*/environ` it can see, reads the store and the bot's files, writes outside its
folder (the bot's home, the interpreter's site-packages, the host's /tmp, its own state file), connects to a
service on the host's loopback, and asks its requirements.txt for a package. The job runs in a real bwrap
sandbox; `/logs` then posts what it printed. Nothing of the bot may show up anywhere, and nothing outside the
job's folders may change.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import sysconfig
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.wiring import build_runtime
from jobs.backend import TrainingBackend
from jobs.backends.local.runtime import Runtime
from jobs.errors import NotFound
from jobs.records import RemoteStatus
from jobs.settings import Settings
from tests.security.rigs import ServedBot, launch_value, wait_until, wheel
from tests.support.environment import outside_env
from tests.support.git_repos import GitRepo, make_repo
from tests.support.runtimes import link_runtimes
from tests.support.slack_api import SlackApiServer

CANARY = f"canary-{uuid.uuid4().hex[:12]}"  # in the bot's secrets only
MARK = uuid.uuid4().hex[:12]  # in the names of files the job must not be able to write
BOT_SECRETS = {
    "SLACK_BOT_TOKEN": f"xoxb-{CANARY}-token",
    "SLACK_SIGNING_SECRET": f"{CANARY}-signing",
    "AWS_ACCESS_KEY_ID": f"AKIA{CANARY.upper().replace('-', '')}",
    "AWS_SECRET_ACCESS_KEY": f"{CANARY}-aws-secret",
}
JOB_TIMEOUT_S = 300
TRAINBOT = Path(sys.executable).with_name("trainbot")
DEPENDENCY = "trainbot_security_probe_dep"

PROBE = '''\
"""What an attacker's training script tries; every line it prints starts with [probe]."""
import glob, os, socket

def say(what, detail):
    print(f"[probe] {{what}}: {{detail}}", flush=True)

readable = 0
for path in sorted(glob.glob("/proc/[0-9]*/environ")):
    try:
        text = open(path, "rb").read().decode(errors="replace").replace("\\0", " ")
    except OSError:
        continue
    readable += 1
    say("environ", f"{{path}} {{text}}")
say("processes", len(glob.glob("/proc/[0-9]*")))
for path in {reads!r}:
    try:
        if os.path.isdir(path):
            say("listed", f"{{path}} {{sorted(os.listdir(path))}}")
        else:
            say("read", f"{{path}} {{open(path, 'rb').read(200)!r}}")
    except OSError as exc:
        say("hidden", f"{{path}} {{type(exc).__name__}}")
def attempt(path, mode, text, done):
    try:
        with open(path, mode) as out:
            out.write(text)
        say(done, path)
    except OSError as exc:
        say("refused", f"{{path}} {{type(exc).__name__}}")
own = os.environ.get("SAGEMAKER_BASE_DIR", ".")  # the job's own folder: the bot's files in it are not its own
for path in [*{writes!r}, os.path.join(own, "state.json"), os.path.join(own, "logs", "train.log")]:
    attempt(path, "w", "pwned", "wrote")
for path in {appends!r}:  # files it runs on: the image runtime's, and the bot's venv it shares them with
    attempt(path, "a", "\\n# pwned\\n", "appended")
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
    say("connected", {port})
except OSError as exc:
    say("unreachable", f"{port} {{type(exc).__name__}}")
import {dependency}
say("dependency", {dependency}.__file__)
'''


@dataclass
class Probe:
    served: ServedBot
    home: Path
    log: str
    job_folder: Path
    outside: dict[str, Path]
    listener_hits: list[int]
    logs_posted: str
    shared: dict[Path, bytes]  # the runtime's file and the bot's it may share, with their bytes before the job


class Listener:
    """A service on the host's loopback (the cloud's metadata endpoint, another job's model server)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = int(self.sock.getsockname()[1])
        self.hits: list[int] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits.append(1)
            conn.close()


def probe_repo(root: Path, *, reads: list[str], writes: list[str], appends: list[str],
               port: int) -> tuple[GitRepo, str]:
    repo = make_repo(root, "team")
    name, data = wheel(DEPENDENCY, "VALUE = 1\n")
    (repo.work / "probe").mkdir(parents=True)
    (repo.work / "probe" / name).write_bytes(data)
    commit = repo.commit({
        "probe/evil.py": PROBE.format(reads=reads, writes=writes, appends=appends, port=port,
                                      dependency=DEPENDENCY),
        "probe/requirements.txt": f"./{name}\n",
    })
    return repo, commit


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory, image_runtime: Runtime) -> Iterator[Probe]:
    tmp = tmp_path_factory.mktemp("sandbox")
    home, user_home = tmp / "trainbot-home", tmp / "bot-user-home"
    link_runtimes(home)  # own code runs on its image's runtime: the session's, built once
    (user_home / ".aws").mkdir(parents=True)
    (user_home / ".aws" / "credentials").write_text(f"[default]\naws_secret_access_key = {CANARY}-file\n")
    site_packages = Path(sysconfig.get_path("purelib"))
    outside = {
        "home": home / "pwned-by-job",
        "site-packages": site_packages / f"pwned_{MARK}.py",
        "host-tmp": Path("/tmp") / f"pwned-{MARK}",
    }
    shared = shared_files(image_runtime)
    listener = Listener()
    reads = [str(home / "trainbot.db"), str(home), str(user_home / ".aws" / "credentials"), str(user_home)]
    repo, commit = probe_repo(tmp / "git", reads=reads, writes=[str(path) for path in outside.values()],
                              appends=[str(path) for path in shared], port=listener.port)
    slack = SlackApiServer(token=BOT_SECRETS["SLACK_BOT_TOKEN"]).start()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**BOT_SECRETS, "HOME": str(user_home), "TRAINBOT_HOME": str(home),
                            "TRAINBOT_BACKEND": "local", "TRAINBOT_CODE_SOURCES": f"file://{tmp / 'git'}/",
                            "SLACK_API_URL": slack.base_url}.items():
            patch.setenv(name, value)
        settings = Settings()  # read from the environment, as `trainbot serve` does
        served = ServedBot.start(build_runtime(settings), slack, secret=BOT_SECRETS["SLACK_SIGNING_SECRET"])
        try:
            # No preset: its model= is a hub id, which a local job (offline) refuses rather than swap for another.
            blocks = served.launch_card(f"code=git+{repo.url}@{commit} entry=probe/evil.py spot=yes")
            assert "isolation: bwrap sandbox" in json.dumps(blocks)  # the card says how the job is isolated
            value = launch_value(blocks)
            served.press("train.launch", value)
            runtime = served.runtime
            lineage = wait_until(lambda: runtime.store.find_by_request(json.loads(value)["r"]), timeout=60,
                                 what="the launch")
            job = f"{lineage.id}-1"
            wait_until(lambda: ended(runtime.backend, job), timeout=JOB_TIMEOUT_S, every=1, what=f"the end of {job}")
            before = len(slack.calls)
            served.command("/logs", f"{lineage.id} 200")
            served.wait_posted("[probe] processes")  # a message, or a snippet when it does not fit in one
            posted = json.dumps([call.params for call in slack.calls[before:]], default=str)
            folder = home / "local-jobs" / job
            yield Probe(served, home, (folder / "logs" / "train.log").read_text(), folder, outside, listener.hits,
                        posted, shared)
        finally:
            served.stop()
            slack.stop()
            listener.sock.close()
            for path in outside.values():
                path.unlink(missing_ok=True)


def shared_files(runtime: Runtime) -> dict[Path, bytes]:
    """torch's version file in the image runtime and in the bot's venv: one file where the runtime was built
    beside this venv (jobs/backends/local/shared_files.py), two otherwise; the job tries to append to both."""
    relative = Path("torch") / "version.py"
    runtime_site = next((runtime.prefix / "lib").glob("python*/site-packages"))
    paths = [runtime_site / relative, Path(sysconfig.get_path("purelib")) / relative]
    return {path: path.read_bytes() for path in paths}


def ended(backend: TrainingBackend, job: str) -> bool:
    try:
        return backend.describe(job).status.is_terminal()
    except NotFound:  # its folder is not there yet: the launch is still fetching the code
        return False


def probe_lines(probe: Probe, what: str) -> list[str]:
    return [line.split(": ", 1)[1] for line in probe.log.splitlines() if line.startswith(f"[probe] {what}: ")]


def test_the_job_ran_and_logs_posted_what_it_printed(probe: Probe) -> None:
    assert probe.served.runtime.backend.describe(probe.job_folder.name).status is RemoteStatus.COMPLETED, probe.log[-3000:]
    assert "[probe] processes:" in probe.logs_posted  # /logs really carried the script's report


def test_no_process_of_the_bot_is_visible_and_no_secret_reaches_the_log_or_slack(probe: Probe) -> None:
    seen = probe_lines(probe, "environ")
    assert seen  # it read its own processes' environments, and nothing else
    for line in seen:
        names = set(re.findall(r"(?:^| )([A-Z_][A-Z0-9_]*)=", line.split(" ", 1)[1]))
        assert not {n for n in names if n.startswith(("SLACK_", "AWS_"))}, line
        # The plan's own (the spot entry's) and the CPU stand-in's switch, never a setting of the bot's.
        assert {n for n in names if n.startswith("TRAINBOT_")} <= {"TRAINBOT_USER_ENTRY", "TRAINBOT_CPU_STANDIN"}, line
    assert int(probe_lines(probe, "processes")[0]) <= 8  # bwrap's init, the toolkit, the script: not the bot
    assert CANARY not in probe.log
    assert CANARY not in probe.served.calls_text()


def test_the_store_and_the_bots_files_are_not_there(probe: Probe) -> None:
    assert not probe_lines(probe, "read"), probe.log[-3000:]
    hidden = probe_lines(probe, "hidden")
    assert any(line.startswith(str(probe.home / "trainbot.db")) for line in hidden)
    assert sum("bot-user-home" in line for line in hidden) == 2  # the bot's HOME and its credentials
    # TRAINBOT_HOME shows only the folders the job's own mounts hang from, never the store or other jobs.
    (listed,) = probe_lines(probe, "listed")
    # The image runtime (which holds the assets) is bound where it really is: the suite's kept runtimes, which
    # this home reaches by a link; the link itself is not there.
    assert listed == f"{probe.home} ['checkpoints', 'local-jobs']"
    assert "SQLite format 3" not in probe.log


def test_nothing_outside_the_jobs_folders_was_written(probe: Probe) -> None:
    # What it could write went to the sandbox's own /tmp (a tmpfs, gone with the job), never to the host.
    assert all(Path(path).is_relative_to("/tmp") for path in probe_lines(probe, "wrote")), probe.log[-2000:]
    assert any(line.startswith(str(probe.outside["site-packages"])) for line in probe_lines(probe, "refused"))
    for where, path in probe.outside.items():
        assert not path.exists(), f"the job wrote {where}: {path}"
    state = json.loads((probe.job_folder / "state.json").read_text())  # the bot's own record is intact
    assert state["isolation"] == "bwrap"


def test_the_runtime_it_runs_on_and_the_bots_venv_it_shares_files_with_are_not_written(probe: Probe) -> None:
    refused = probe_lines(probe, "refused")
    for path, before in probe.shared.items():
        assert any(line.startswith(str(path)) for line in refused), probe.log[-2000:]
        assert path.read_bytes() == before, f"the job changed {path}"
    assert not probe_lines(probe, "appended")


def test_the_hosts_loopback_services_are_out_of_reach_offline(probe: Probe) -> None:
    assert probe_lines(probe, "unreachable") and not probe.listener_hits


def test_requirements_install_into_the_jobs_own_environment_never_the_bots(probe: Probe) -> None:
    (installed,) = probe_lines(probe, "dependency")
    assert Path(installed).is_relative_to(probe.job_folder / "env"), installed
    bot_site = Path(sysconfig.get_path("purelib"))
    assert not list(bot_site.glob(f"{DEPENDENCY}*")), "requirements.txt reached the bot's venv"
    assert str(Path(sys.executable).parent) not in installed


def trainbot(env: dict[str, str], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINBOT), *args], env=env, input=stdin, capture_output=True, text=True, timeout=180,
                          check=False)


@pytest.fixture
def unsandboxed(tmp_path: Path) -> tuple[dict[str, str], str]:
    """The CLI's environment with TRAINBOT_LOCAL_SANDBOX=off, and a /train line for own code."""
    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"probe/evil.py": "print('never runs')\n"})
    env = outside_env()
    link_runtimes(tmp_path / "home")
    env.update(TRAINBOT_HOME=str(tmp_path / "home"), TRAINBOT_BACKEND="local", TRAINBOT_LOCAL_SANDBOX="off",
               TRAINBOT_CODE_SOURCES=f"file://{tmp_path / 'git'}/")
    return env, f"distilbert-spot code=git+{repo.url}@{commit} entry=probe/evil.py"


def test_off_the_sandbox_own_code_is_refused_in_one_sentence_exit_2(unsandboxed: tuple[dict[str, str], str],
                                                                      tmp_path: Path) -> None:
    env, text = unsandboxed
    for command in ("plan", "launch"):
        done = trainbot(env, command, text)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()  # one line, no traceback
        assert "sandbox" in line and "TRAINBOT_LOCAL_SANDBOX=off" in line  # why
        assert "bubblewrap" in line and "TRAINBOT_LOCAL_SANDBOX=auto" in line  # how
        # A root bot says that it is root (tests/security/test_job_privileges.py has the console's refusal).
        assert ("this bot runs as root" in line) == (os.geteuid() == 0), line
    listed = trainbot(env, "jobs")
    assert listed.returncode == 0 and listed.stdout.startswith("No jobs yet")  # no lineage was recorded
    assert not list((tmp_path / "home").glob("local-jobs/*"))
    assert not (tmp_path / "home" / "code").exists()  # refused before anything was fetched


def test_the_console_may_run_it_unsandboxed_and_its_card_says_so(unsandboxed: tuple[dict[str, str], str],
                                                                  tmp_path: Path) -> None:
    env, text = unsandboxed
    script = tmp_path / "session.txt"
    script.write_text(f"/train {text}\n")
    done = trainbot(env, "console", "--script", str(script))
    assert done.returncode == 0, done.stderr
    if os.geteuid() == 0:  # never as root: the job would run as root (test_job_privileges.py)
        assert "this bot runs as root" in done.stdout, done.stdout
        assert "isolation: none" not in done.stdout
    else:
        assert "isolation: none (TRAINBOT_LOCAL_SANDBOX=off)" in done.stdout, done.stdout

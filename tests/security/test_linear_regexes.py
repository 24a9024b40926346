"""Issue 22, item 4: user regexes run in linear time and never freeze the bot.

``metrics=x:(?:[a-z_]+[ ]?)*Q([0-9])`` and ``(a+)+$`` backtrack exponentially in Python's ``re`` on lines such
as ``ab ab ab ...``: the local backend's scan of the log held the GIL for ever, so ``/healthz`` and every
Slack request timed out, and a bot restarted on the same home never listened. Here a team's job prints those
lines (and a line that made the default ``step`` pattern quadratic), then ``trainbot serve --http`` starts on
that home as a process: it listens, its watcher reads the whole log, and it keeps answering ``/healthz`` and
a signed ``/train``. Patterns RE2 cannot run are refused with one sentence; the log is read incrementally,
with a line-length cap. Speed is measured by bench/regex_scan.py, not asserted here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from jobs.backends.local.log_scan import MAX_LINE_BYTES, SCAN_FILE
from jobs.backends.local.runtime import Runtime
from jobs.planning.metrics import MetricScanner
from tests.security.bot_rig import SECRET, RealBot, real_bot
from tests.security.cli import clean_env, one_sentence, trainbot
from tests.support.git_repos import make_repo
from tests.support.moto_server import free_port
from tests.support.runtimes import link_runtimes
from tests.support.slack_api import BOT_TOKEN, SlackApiServer
from tests.support.slack_bot import signed_headers, slash_command

HOSTILE_METRICS = "metrics=x:(?:[a-z_]+[ ]?)*Q([0-9]),y:(a+)+$"
HOSTILE_LINES = ["ab " * 20_000, "a" * 60 + "!", "[metric] " + "=" * 16_000, "[metric] loss=0.25 step=3"]
SCRIPT = f"""
import sys, time
for line in {HOSTILE_LINES!r}:
    print(line, flush=True)
print("[trainbot-test] printed", flush=True)
time.sleep(300)
"""


def wait_for(check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.2)


def get(url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    with urllib.request.urlopen(request, timeout=20) as answer:  # a generous cap, not a speed check
        return answer.status, answer.read().decode()


@pytest.fixture
def hostile_job(tmp_path: Path, image_runtime: Runtime) -> Iterator[tuple[dict[str, str], Path]]:
    """A team's job, launched with the installed CLI, whose log holds the hostile lines; (env, job folder)."""
    repo = make_repo(tmp_path / "git", "team")
    repo.commit({"hostile.py": SCRIPT})
    home = tmp_path / "home"
    link_runtimes(home)  # own code runs on its image's runtime: the session's, built once
    env = clean_env(home, TRAINBOT_CODE_SOURCES=repo.url)
    launched = trainbot(env, "launch", f"code=git+{repo.url}@main", "entry=hostile.py", HOSTILE_METRICS)
    assert launched.returncode == 0, launched.stderr
    folder = home / "local-jobs" / f"{launched.stdout.strip().splitlines()[-1]}-1"
    log = folder / "logs" / "train.log"
    wait_for(lambda: log.is_file() and "[trainbot-test] printed" in log.read_text(errors="replace"),
             "the job printed its lines")
    try:
        yield env, folder
    finally:
        pid = json.loads((folder / "state.json").read_text()).get("pid")
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def test_a_bot_started_on_a_home_with_a_hostile_log_listens_and_keeps_answering(
    hostile_job: tuple[dict[str, str], Path],
) -> None:
    env, folder = hostile_job
    with SlackApiServer() as slack:
        port = free_port()
        serve_env = {**env, "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_SIGNING_SECRET": SECRET,
                     "SLACK_API_URL": slack.base_url, "TRAINBOT_POLL_SECONDS": "0.5"}
        process = subprocess.Popen([str(Path(sys.executable).with_name("trainbot")), "serve", "--http", "--port",
                                    str(port)], env=serve_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            def listening() -> bool:
                assert process.poll() is None, process.communicate()[1].decode()[-2000:]
                try:
                    return get(f"http://127.0.0.1:{port}/healthz")[0] == 200
                except OSError:
                    return False

            wait_for(listening, "the bot listens")
            log_size = (folder / "logs" / "train.log").stat().st_size

            def scanned() -> bool:
                try:
                    return json.loads((folder / SCAN_FILE).read_text())["offset"] >= log_size
                except (OSError, ValueError, KeyError):
                    return False

            wait_for(scanned, "the watcher read the whole log")
            assert get(f"http://127.0.0.1:{port}/healthz") == (200, '{"ok": true}')
            body = urlencode(slash_command("/train", "distilbert-spot"))
            status, answer = get(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                                 headers=signed_headers(SECRET, body))
            assert status == 200 and "distilbert" in json.loads(answer)["text"]
            stored = json.loads((folder / SCAN_FILE).read_text())
            assert stored["last"]["loss"] == 0.25 and "x" not in stored["last"]  # read, and nothing matched x
        finally:
            process.kill()
            process.wait(timeout=30)


# ---------------------------------------------------------------- refusing what RE2 cannot run


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[RealBot]:
    with real_bot(tmp_path) as rig:
        yield rig


@pytest.mark.parametrize("pattern", [r"(a)\1([0-9]+)", r"(?=loss)loss=([0-9.]+)", r"(?<!eval_)loss=([0-9.]+)",
                                     r"(?P<v>[0-9]+)(?P=v)"])
def test_a_pattern_that_needs_backtracking_is_refused_with_one_sentence(bot: RealBot, pattern: str) -> None:
    said = bot.command("/train", f"distilbert-spot metrics='x:{pattern}'")["text"]
    assert "linear-time matching (RE2) cannot do" in said and "blocks" not in said, said


def test_the_exponential_patterns_of_the_attack_are_accepted_and_harmless(bot: RealBot) -> None:
    card = bot.command("/train", f"distilbert-spot {shlex.quote(HOSTILE_METRICS)}")
    assert "blocks" in card, card["text"]
    scanner = MetricScanner.of([{"Name": "x", "Regex": "(?:[a-z_]+[ ]?)*Q([0-9])"}, {"Name": "y", "Regex": "(a+)+$"}])
    assert [scanner.scan(line) for line in HOSTILE_LINES[:2]] == [[], []]


def test_the_cli_refuses_with_exit_2(tmp_path: Path) -> None:
    done = trainbot(clean_env(tmp_path / "home"), "parse", "distilbert-spot", r"metrics=x:(a)\1([0-9])")
    assert done.returncode == 2 and "backreferences" in one_sentence(done)


def test_the_default_step_pattern_reads_the_lines_it_always_did() -> None:
    scanner = MetricScanner.of()
    assert scanner.scan("[metric] loss=0.5 step=12") == [("loss", 0.5, 12)]
    assert scanner.scan("[metric] eval_f1=88.1 step=9\n") == [("eval_f1", 88.1, 9)]
    assert scanner.scan("[metric] loss=0.5 step=12x") == [("loss", 0.5, None)]


# ---------------------------------------------------------------- reading only what the log grew by


def test_the_log_is_read_once_and_a_line_past_the_cap_is_cut(tmp_path: Path) -> None:
    """The real LocalBackend's scan over a job folder: each look reads from where the last one stopped (a new
    backend, as after a restart, too), and a line with no end in sight is read only up to the cap."""
    from jobs.backends.local import log_scan
    from jobs.backends.local.state import JobFolder

    folder = JobFolder(tmp_path / "local-jobs", "job-1")
    folder.log_path.parent.mkdir(parents=True)
    folder.log_path.write_text("[metric] loss=1.0 step=1\n[metric] loss=0.9 st")
    first = log_scan.scan(folder)
    assert first.last == {"loss": 1.0} and first.offset == len("[metric] loss=1.0 step=1\n")
    with folder.log_path.open("a") as fh:
        fh.write("ep=2\n" + "x" * (3 * MAX_LINE_BYTES) + " [metric] loss=0.1 step=9\n[metric] loss=0.8 step=3\n")
    again = log_scan.scan(folder)
    assert again.last == {"loss": 0.8}  # the metric past the cap of the long line was not read
    assert again.offset == folder.log_path.stat().st_size and again.lines == 4
    assert {int(k) for k in again.points["loss"]} == {1, 2, 3}
    folder.log_path.write_text("")  # replaced (a relaunch into the same folder): read from the start
    assert log_scan.scan(folder).last == {}

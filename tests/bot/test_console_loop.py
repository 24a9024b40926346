"""The console loop in-process, on a scripted backend peer: fast checks of what the end-to-end run can't
cheaply show (a failed job makes a script exit 1; piped input; tuning; console-only commands)."""

from __future__ import annotations

import io
import re
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from bot.console import run_console, tune_for_terminal
from bot.wiring import Runtime, build_runtime
from jobs.clock import SystemClock
from jobs.records import RemoteStatus
from jobs.settings import Settings
from jobs.store.card_redraws import CardRedraws
from tests.jobs.fakes import ScriptedBackend


def runtime_on(backend: ScriptedBackend, home: Path, **settings: object) -> Runtime:
    return build_runtime(Settings(trainbot_home=home, **settings), clock=backend.clock, backend=backend)  # type: ignore[arg-type]


def fail_soon(backend: ScriptedBackend, reason: str) -> None:
    """Every job the backend launches fails a moment later, as a crashing training script would."""

    def later(job_name: str) -> None:
        def fail() -> None:
            now = backend.clock.now()
            backend.set_logs(job_name, ["loading data", "ValueError: the train channel is empty"])
            backend.set_remote(job_name, RemoteStatus.FAILED, failure_reason=reason, created_at=now,
                               last_modified=now + timedelta(seconds=1), ended_at=now)

        threading.Timer(0.5, fail).start()

    backend.on_launch = later


def run_a_failing_script(tmp_path: Path) -> tuple[int, str]:
    """(exit code, transcript) of a console script whose one job fails."""
    backend = ScriptedBackend(clock=SystemClock())
    fail_soon(backend, "AlgorithmError: ValueError: the train channel is empty")
    script = tmp_path / "fails.txt"
    script.write_text("/train bert-squad\nlaunch\n")
    out = io.StringIO()
    code = run_console(runtime_on(backend, tmp_path / "home"), script, stdout=out)
    return code, out.getvalue()


@pytest.mark.timeout(60)
def test_a_script_whose_job_fails_exits_one_and_shows_why(tmp_path: Path) -> None:
    code, transcript = run_a_failing_script(tmp_path)

    assert code == 1, transcript
    assert "AlgorithmError: ValueError: the train channel is empty" in transcript
    assert "\n        loading data\n" in transcript  # the log tail, as code in the job's thread
    assert "✉ direct message to console:" in transcript
    assert transcript.rstrip().splitlines()[-1].startswith("failed: bert-squad-")


@pytest.mark.timeout(60)
def test_piped_lines_are_echoed_and_end_at_eof(tmp_path: Path) -> None:
    backend = ScriptedBackend(clock=SystemClock())
    out = io.StringIO()
    lines = io.StringIO("help\n/train distilbert-spot\ncancel\nlaunch\n/capacity\n/capacity nope-1\n")

    code = run_console(runtime_on(backend, tmp_path / "home"), stdin=lines, stdout=out)

    transcript = out.getvalue()
    assert code == 0
    assert transcript.startswith("trainbot console on the fake backend; type help, or quit to leave\ntrainbot> help\n")
    assert "Buttons you can press now: none yet" in transcript
    assert "trainbot> cancel\nCancelled: nothing was launched." in transcript
    # Cancel answered the plan card, so its Launch button is gone, as in Slack.
    assert "trainbot> launch\nThe newest card (Plan: distilbert-base-uncased on 1 x ml.p3.2xlarge, c1) was answered " \
           "with Cancel, so its buttons are gone: nothing was pressed.\n" in transcript
    assert "trainbot> /capacity\nUsage: /capacity JOB" in transcript
    assert "trainbot> /capacity nope-1\n" in transcript and backend.created == []


@pytest.mark.timeout(60)
def test_stop_button_takes_its_answer_from_the_next_line_and_quit_ends_it(tmp_path: Path) -> None:
    backend = ScriptedBackend(clock=SystemClock())
    script = tmp_path / "stop.txt"
    script.write_text("/train bert-squad\nlaunch\nstop $last\nyes\nquit\n/jobs\n")
    out = io.StringIO()

    code = run_console(runtime_on(backend, tmp_path / "home"), script, stdout=out)

    transcript = out.getvalue()
    assert code == 0, transcript
    assert re.search(r"\nStop bert-squad-[0-9a-f]+\? The container gets SIGTERM.*\[y/N\]\n\[y/N\] yes\n", transcript)
    assert len(backend.stopped) == 1
    assert "trainbot> /jobs" not in transcript  # nothing after quit is read
    assert transcript.rstrip().endswith("stopped")


def test_missing_script_is_one_line_and_exit_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    backend = ScriptedBackend(clock=SystemClock())
    assert run_console(runtime_on(backend, tmp_path / "home"), tmp_path / "nope.txt") == 2
    assert capsys.readouterr().err.strip() == (
        f"trainbot: script {tmp_path / 'nope.txt'} does not exist; give the path of a text file of commands."
    )


def test_terminal_tuning_keeps_what_the_environment_set(tmp_path: Path) -> None:
    backend = ScriptedBackend(clock=SystemClock())
    default = runtime_on(backend, tmp_path / "a")
    tune_for_terminal(default)
    chosen = runtime_on(backend, tmp_path / "b", trainbot_poll_seconds=7, trainbot_relaunch_backoff_seconds=0)
    tune_for_terminal(chosen)
    assert (default.settings.trainbot_poll_seconds, default.settings.trainbot_relaunch_backoff_seconds) == (1.0, 2.0)
    assert (chosen.settings.trainbot_poll_seconds, chosen.settings.trainbot_relaunch_backoff_seconds) == (7, 0)


@pytest.mark.timeout(90)
def test_notify_logs_and_home_in_the_console(tmp_path: Path) -> None:
    backend = ScriptedBackend(clock=SystemClock())
    fail_soon(backend, "AlgorithmError: ValueError: the train channel is empty")
    script = tmp_path / "notify.txt"
    script.write_text("\n".join([
        "/notify on failed completed",
        "/notify dm off",
        "/notify on explode",
        "/train bert-squad",
        "launch",
        "/wait $last",
        "/logs $last 1",
        "logs",
        "/logs",
        "/home",
    ]) + "\n")
    out = io.StringIO()

    code = run_console(runtime_on(backend, tmp_path / "home"), script, stdout=out)

    transcript = out.getvalue()
    assert code == 1, transcript
    lineage = re.findall(r"^┌ (bert-squad-[0-9a-f]+)$", transcript, re.MULTILINE)[0]
    assert "trainbot> /notify on failed completed\nThis channel now gets failed, completed for every job." in transcript
    assert "Unknown event 'explode'" in transcript
    # The routed line: top level in the subscribed channel (here the console), not in the job's thread.
    routed = f"\n✖ {lineage} failed: AlgorithmError: ValueError: the train channel is empty (console:"
    assert routed in transcript and "#CONSOLE" in transcript.split(routed, 1)[1].splitlines()[0]
    assert "✉ direct message" not in transcript  # /notify dm off
    logs = transcript.split("trainbot> /logs $last 1\n", 1)[1].split("trainbot> ", 1)[0]
    assert f"Reading the last 1 line of {lineage}-1's log…" in logs
    assert f"{lineage}-1 (1 line)" in logs and "ValueError: the train channel is empty" in logs
    assert "loading data" not in logs
    pressed = transcript.split("trainbot> logs\n", 1)[1].split("trainbot> ", 1)[0]
    assert "loading data" in pressed  # the failed card's Logs button: the default 40 lines
    assert "trainbot> /logs\nUsage: /logs JOB [N]" in transcript
    home = transcript.split("trainbot> /home\n", 1)[1]
    assert "Your running jobs" in home and "Nothing of yours is running." in home
    assert f"{lineage} ✖ failed" in home and "Team spend" in home and "Schedules" in home


@pytest.mark.timeout(60)
def test_the_script_ends_with_its_summary_after_the_failed_cards_redraw(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # A loaded CI run printed the failed job's card after "failed: ...": the console waited for the outbox's
    # messages, not for the card redraw their delivery asks for, which follows in the same pass. Here that
    # redraw is held until the console says its summary (or 5 s): the summary must still come last.
    import bot.console
    import handlers.pacing

    summarised = threading.Event()
    redraw_cards, exit_code = handlers.pacing.redraw_cards, bot.console.Console.exit_code

    def held_redraw(services, chat, **kwargs):  # type: ignore[no-untyped-def]
        if CardRedraws(services.store, services.clock).due():
            summarised.wait(5.0)
        return redraw_cards(services, chat, **kwargs)

    def summary(self):  # type: ignore[no-untyped-def]
        summarised.set()
        return exit_code(self)

    monkeypatch.setattr(handlers.pacing, "redraw_cards", held_redraw)
    monkeypatch.setattr(bot.console.Console, "exit_code", summary)

    code, transcript = run_a_failing_script(tmp_path)

    lines = transcript.rstrip().splitlines()
    assert code == 1
    assert lines[-2].startswith("script done: bert-squad-") and lines[-1].startswith("failed: bert-squad-"), lines[-8:]

"""Issue 35, item 1: a typed button word presses what the person sees, through the console's own loop
(`trainbot console --script FILE` and piped lines, on a scripted backend peer whose jobs run until stopped).

A bare word presses only the newest card; a card that no longer has the button says so and presses nothing;
an older card is pressed by naming it (the handle its button line shows, or its job); `stop` asks a question
that names the job, and a command typed at the question is refused as an answer and carried out.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from bot.console import run_console
from bot.wiring import Runtime, build_runtime
from jobs.clock import SystemClock
from jobs.settings import Settings
from tests.jobs.fakes import ScriptedBackend

SCRIPT = """\
/train bert-squad
/train distilbert-spot
cancel
launch
launch c1
stop
/jobs
stop
y
"""


def runtime_on(backend: ScriptedBackend, home: Path) -> Runtime:
    return build_runtime(Settings(trainbot_home=home), clock=backend.clock, backend=backend)  # type: ignore[arg-type]


def answer_to(transcript: str, typed: str, *, nth: int = 0) -> str:
    """What the console wrote after the ``nth`` echo of ``typed`` (at either prompt), up to the next echo."""
    parts = re.split(rf"^(?:trainbot> |\[y/N\] ){re.escape(typed)}\n", transcript, flags=re.MULTILINE)
    return re.split(r"^(?:trainbot> |\[y/N\] )", parts[nth + 1], maxsplit=1, flags=re.MULTILINE)[0]


@pytest.mark.timeout(60)
def test_launch_after_cancel_presses_nothing_and_an_older_card_is_pressed_by_name(tmp_path: Path) -> None:
    backend = ScriptedBackend(clock=SystemClock())
    script = tmp_path / "buttons.txt"
    script.write_text(SCRIPT)
    out = io.StringIO()

    code = run_console(runtime_on(backend, tmp_path / "home"), script, stdout=out)

    transcript = out.getvalue()
    assert code == 0, transcript
    assert "└ [Launch] [Edit] [Cancel]  · card c1" in transcript  # the handle each card shows
    # `launch` after `cancel`: the newest card was cancelled; the older, dearer plan is not launched by it.
    refused = answer_to(transcript, "launch")
    assert refused.startswith("The newest card (Plan: distilbert-base-uncased on 1 x ml.p3.2xlarge, c2) was "
                              "answered with Cancel, so its buttons are gone: nothing was pressed. An older card "
                              "has one: name it to press it, e.g. `launch c1` (Plan: bert-large-uncased-whole-word-"
                              "masking on 2 x ml.p3.16xlarge)."), refused
    [job] = backend.created
    assert job.startswith("bert-squad-")  # launched once, by `launch c1`


@pytest.mark.timeout(60)
def test_stop_names_the_job_and_a_command_typed_at_the_question_is_carried_out(tmp_path: Path) -> None:
    backend = ScriptedBackend(clock=SystemClock())
    script = tmp_path / "buttons.txt"
    script.write_text(SCRIPT)
    out = io.StringIO()

    code = run_console(runtime_on(backend, tmp_path / "home"), script, stdout=out)

    transcript = out.getvalue()
    assert code == 0, transcript
    [job] = backend.created
    lineage = job.rsplit("-", 1)[0]
    question = f"Stop {lineage}? The container gets SIGTERM and 120 s to save a checkpoint; billing stops when it ends. [y/N]"
    assert answer_to(transcript, "stop").strip() == question
    # `/jobs` at the question: not an answer, so nothing is stopped, and /jobs is carried out, not lost.
    not_an_answer = answer_to(transcript, "/jobs")
    assert not_an_answer.startswith(f"`/jobs` is not a yes or no, so Stop on {lineage} was not pressed; carrying "
                                    "out `/jobs` instead.\n"), not_an_answer
    assert "Jobs (1)" in not_an_answer and lineage in not_an_answer
    assert answer_to(transcript, "stop", nth=1).strip() == question
    assert f"Stopping {lineage}" in answer_to(transcript, "y")
    assert backend.stopped == [job]


@pytest.mark.timeout(60)
def test_piped_lines_answer_a_question_the_same_way(tmp_path: Path) -> None:
    backend = ScriptedBackend(clock=SystemClock())
    out = io.StringIO()
    lines = io.StringIO("/train bert-squad\nlaunch\nstop\nn\nstop\nhelp\nstop\nyes\n")

    code = run_console(runtime_on(backend, tmp_path / "home"), stdin=lines, stdout=out)

    transcript = out.getvalue()
    assert code == 0, transcript
    [job] = backend.created
    lineage = job.rsplit("-", 1)[0]
    assert f"[y/N] n\nNot pressed: Stop on {lineage}.\n" in transcript
    assert f"`help` is not a yes or no, so Stop on {lineage} was not pressed; carrying out `help` instead.\n" \
           "Commands (the same as in Slack):" in transcript
    assert backend.stopped == [job]

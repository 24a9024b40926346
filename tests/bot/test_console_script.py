"""`trainbot console --script` end to end: the installed command, the local backend, the tiny model.

One console run covers the issue's scenario (one run, because every local job pays a torch start-up):
a QA job (data parallel as 2 processes), a sentence-pair classification job, a spot job that loses its
capacity and is relaunched from its checkpoints, /jobs, /stop of a running job, and bad input named back;
then the console's share of Slack's extras: /notify lines, /logs of a job's log file, and /home.
The transcript is what a person would read; the job folders are what really ran.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.backends.local.offline_assets import LocalAssets
from tests.support.assets import seed_assets

SCRIPT = """\
# the three recipes, a job stopped, and mistakes; then logs and the home page
/notify on completed failed
/train bert-squad hp.max_steps=30
launch
/train roberta-mnli hp.max_steps=30
launch
/train distilbert-spot hp.max_steps=40
launch
/train bert-squad instances=1 hp.max_steps=20
launch
/stop $last
/jobs
/trian bert-squad
/train bert-squad instances=zero
lunch
/job $9
/wait
/logs $1 3
/home
"""


def trainbot_command() -> Path:
    """The `trainbot` the package installed next to this interpreter (the README's .venv/bin/trainbot)."""
    command = Path(sys.executable).parent / "trainbot"
    if not command.is_file():
        pytest.fail(f"{command} is missing: install the project (pip install -e '.[test]') first")
    return command


def run_script(home: Path, script: str, timeout: float) -> subprocess.CompletedProcess[str]:
    path = home.parent / "script.txt"
    path.write_text(script)
    env = {**os.environ, "TRAINBOT_HOME": str(home), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run([str(trainbot_command()), "console", "--script", str(path)], env=env, cwd=home.parent,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory,
            local_assets: LocalAssets) -> tuple[subprocess.CompletedProcess[str], Path]:
    home = seed_assets(tmp_path_factory.mktemp("console") / "home", local_assets)
    return run_script(home, SCRIPT, timeout=420), home


def answer_to(transcript: str, typed: str) -> str:
    """What the console wrote between a typed line and the next one: its answer, and any background line
    (a job's progress, a routed notification) that happened to be written while it was answered."""
    return transcript.split(f"trainbot> {typed}\n", 1)[1].split("trainbot> ", 1)[0]


def lineage_ids(transcript: str, preset: str) -> list[str]:
    return list(dict.fromkeys(re.findall(rf"^┌ ({preset}-[0-9a-f]+)$", transcript, re.MULTILINE)))


@pytest.mark.timeout(480)
def test_script_exits_zero_when_its_jobs_have_ended(session: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result, _ = session
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stdout + result.stderr
    done = result.stdout.strip().splitlines()[-1]
    assert done.startswith("script done:")
    assert done.count(" completed") == 3 and done.count(" stopped") == 1


@pytest.mark.timeout(480)
def test_lines_are_echoed_and_plan_cards_show_the_scale_down(
    session: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    out = session[0].stdout
    assert "trainbot> /train bert-squad hp.max_steps=30\n┌ Plan: bert-large-uncased-whole-word-masking" in out
    assert "└ [Launch] [Edit] [Cancel]" in out
    assert re.search(r"│ ℹ local: tiny BERT, 200 generated examples, 30 steps, 2 processes", out)
    assert re.search(r"step \d+/30 · loss \d\.\d{4} · ETA \d+ s", out)  # live progress of a local job


@pytest.mark.timeout(480)
def test_qa_and_classification_end_with_their_metrics(session: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    out, home = session[0].stdout, session[1]
    qa = lineage_ids(out, "bert-squad")[0]
    mnli = lineage_ids(out, "roberta-mnli")[0]
    assert re.search(rf"↳ {qa} › Final report: {qa}\n(.*\n)*?\s+exact_match: [\d.]+\s+f1: [\d.]+", out)
    assert re.search(rf"↳ {mnli} › Final report: {mnli}\n(.*\n)*?\s+accuracy: [\d.]+", out)
    plot = re.search(rf"↳ {qa} › Loss curve of {qa}: saved (\S+\.png)", out)
    assert plot is not None and Path(plot.group(1)).is_file() and home.resolve() in Path(plot.group(1)).parents


@pytest.mark.timeout(480)
def test_spot_job_is_interrupted_and_resumed_from_its_checkpoint(
    session: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    out, home = session[0].stdout, session[1]
    spot = lineage_ids(out, "distilbert-spot")[0]
    taken = out.index(f"⚡ console: spot capacity taken from {spot}-1")
    reclaimed = out.index(f"↳ {spot} › ⏸ {spot}-1: spot capacity for ml.p3.2xlarge was reclaimed")
    relaunched = out.index(f"↳ {spot} › ♻ Relaunched as {spot}-2 (attempt 2")
    report = out.index(f"↳ {spot} › Final report: {spot}")
    assert taken < reclaimed < relaunched < report
    # A local run's cost is what SageMaker would bill for it.
    assert re.search(rf"{spot} completed, cost \$[\d.]+ on SageMaker \(free here\), spot savings \d+%", out)
    second_log = (home / "local-jobs" / f"{spot}-2" / "logs" / "train.log").read_text()
    assert re.search(r"\[checkpoint\] resuming from .*checkpoint-\d+", second_log)


@pytest.mark.timeout(480)
def test_jobs_lists_them_and_stop_stops_a_running_job(session: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    out = session[0].stdout
    stopped = lineage_ids(out, "bert-squad")[1]
    assert "trainbot> /stop $last\n" in out
    assert f"Stopping {stopped}: the card and its thread say when it has ended." in out
    assert f"↳ {stopped} › ■ {stopped}-1 was stopped." in out
    listing = answer_to(out, "/jobs")
    assert "┌ Jobs (4)" in listing
    assert all(name in listing for name in (stopped, *lineage_ids(out, "roberta-mnli")))


@pytest.mark.timeout(480)
def test_bad_lines_are_named_back_and_the_script_goes_on(
    session: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    out = session[0].stdout
    assert "Unknown command trian: try /train help." in answer_to(out, "/trian bert-squad")
    bad_count = answer_to(out, "/train bert-squad instances=zero")
    assert "instance_count takes a whole number" in bad_count and "zero" in bad_count and "Traceback" not in bad_count
    assert "Unknown input `lunch`: type a /command, a button label, or help." in answer_to(out, "lunch")
    assert "$9 names no job: this session has launched 4 so far." in answer_to(out, "/job $9")


@pytest.mark.timeout(480)
def test_notify_logs_and_home_work_on_the_local_backend(session: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    out, home = session[0].stdout, session[1]
    qa = lineage_ids(out, "bert-squad")[0]
    assert "trainbot> /notify on completed failed\nThis channel now gets completed, failed for every job." in out
    routed = re.findall(r"^✔ (\S+) completed: .*\(console:\S+\)\. #CONSOLE$", out, re.MULTILINE)
    assert sorted(routed) == sorted([qa, *lineage_ids(out, "roberta-mnli"), *lineage_ids(out, "distilbert-spot")])
    logs = answer_to(out, "/logs $1 3")
    log_file = home.resolve() / "local-jobs" / f"{qa}-1" / "logs" / "train.log"
    assert f"{log_file} (3 lines)" in logs
    assert "[trainbot] training process exited with code 0" in logs
    page = out.split("trainbot> /home\n", 1)[1]
    assert "Your running jobs" in page and "Nothing of yours is running." in page
    assert all(name in page for name in lineage_ids(out, "bert-squad")) and "Team spend" in page

"""Issue 35, item 11: the words a console session shows (`trainbot console --script`, on a scripted training peer).

Real plurals ("1 attempt", "1 host", "2 versions"), never "is gave up"; the two losses of a report named apart
(eval loss, train loss); a local run's costs said to be free here once a message, not on every amount; the
plan card's money one thing a line; and the loss curve labelled, with the eval loss, titled with what trained.
"""

from __future__ import annotations

import io
import re
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from bot.console import run_console
from bot.wiring import build_runtime
from jobs.clock import SystemClock
from jobs.lifecycle.cycle import CountedBackend
from jobs.records import Actor, MetricPoint, RemoteStatus
from jobs.reporting.plots import curves_figure, plot_title
from jobs.settings import Settings
from tests.jobs.fakes import ScriptedBackend

METRICS = {"eval_accuracy": 0.91, "eval_loss": 0.42, "train_loss": 0.61, "loss": 0.55, "epoch": 1.0}


class LocalPeer(ScriptedBackend):
    """A scripted peer that says it is the local backend and trained the tiny stand-in (jobs.backend.StandIn)."""

    def trained_model(self, job_name: str) -> str | None:
        return "tiny BERT"


def script_jobs(backend: ScriptedBackend) -> None:
    """distilbert-spot jobs complete with METRICS; bert-squad jobs lose their capacity for good."""

    def later(job_name: str) -> None:
        def complete() -> None:
            now = backend.clock.now()
            if job_name.startswith("bert-squad"):
                backend.set_remote(job_name, RemoteStatus.FAILED, created_at=now, ended_at=now,
                                   last_modified=now + timedelta(seconds=1),
                                   failure_reason="CapacityError: Unable to provision requested ML compute capacity")
                return
            backend.set_logs(job_name, ["loading data", "training <tiny> & co", "done"])
            backend.set_remote(job_name, RemoteStatus.COMPLETED, created_at=now, ended_at=now,
                               last_modified=now + timedelta(seconds=1), training_seconds=100,
                               billable_seconds=30, spot=True, final_metrics=METRICS, model_artifacts="/tmp/model")

        threading.Timer(0.2, complete).start()

    backend.on_launch = later


@pytest.mark.timeout(120)
def test_a_sessions_words(tmp_path: Path) -> None:
    backend = LocalPeer(clock=SystemClock(), name="local")
    script_jobs(backend)
    script = tmp_path / "words.txt"
    script.write_text("\n".join([
        "/notify dm on", "/train bert-squad instances=1", "launch", "/wait $last", "/deploy $last",
        "/train distilbert-spot", "launch", "/wait $last", "/train distilbert-spot", "launch", "/wait $last",
        "/logs $last 2", "/models",
    ]) + "\n")
    out = io.StringIO()
    settings = Settings(trainbot_home=tmp_path / "home", trainbot_max_restarts=0, trainbot_relaunch_backoff_seconds=0)

    run_console(build_runtime(settings, clock=backend.clock, backend=backend), script, stdout=out)  # type: ignore[arg-type]

    transcript = out.getvalue()
    gave_up = re.findall(r"^┌ (bert-squad-[0-9a-f]+)$", transcript, re.MULTILINE)[0]
    assert f"gave up on your job {gave_up} after 1 attempt:" in transcript
    assert f"{gave_up} was given up on, not completed" in transcript  # not "is gave up"
    assert "Logs of distilbert-spot-" in transcript and "last 2 lines of 1 host\n" in transcript
    assert "\n  training <tiny> & co\n" in transcript  # what the job printed, not Slack's &lt; (item 10)
    assert "• trainbot-text-classification: 2 versions" in transcript
    for wrong in ("(s)", "1 attempts", "1 lines", "is gave up", "<TRAINBOT_BUCKET>", "&lt;", "&amp;"):
        assert wrong not in transcript, wrong
    # The final report: the two losses named apart, the local price said once, not on each amount.
    report = transcript.split("› Final report: distilbert-spot-", 1)[1].split("Links", 1)[0]
    assert "eval loss: 0.42" in report and "train loss: 0.61" in report
    assert not re.search(r"(?<!eval )(?<!train )\bloss\b", report.replace("Trainer details", "")), report
    assert report.count("free here") == 1
    # The job card says a local run is free here once, and its amounts plainly.
    card = transcript.split("trainbot> /train distilbert-spot\n", 1)[1]
    plan = card.split("└ ", 1)[0]
    assert "Price: about $1.15/h at spot for 1 x ml.p3.2xlarge ($3.83/h on demand)." in plan
    assert "Worst case $1.06: 1 attempt of max_run on 1 x ml.p3.2xlarge at on-demand prices." in plan
    assert "for all instances now" not in plan
    assert "A local run: its costs are what SageMaker would bill, free here." in card
    assert "on SageMaker (free here)" not in card.split("Final report")[0]


def test_the_loss_curve_is_labelled_and_titled_with_what_trained(tmp_path: Path) -> None:
    backend = LocalPeer(clock=SystemClock(), name="local")
    runtime = build_runtime(Settings(trainbot_home=tmp_path / "home"), clock=backend.clock, backend=backend)  # type: ignore[arg-type]
    lineage = runtime.jobs.launch("distilbert-spot", actor=Actor("U1"))
    series = {"loss": [MetricPoint(10, 0.7), MetricPoint(20, 0.6)], "eval_loss": [MetricPoint(20, 0.65)],
              "eval_accuracy": [MetricPoint(20, 0.8)]}
    figure = curves_figure([(f"{lineage.id}-1", series)], title=plot_title(lineage, CountedBackend(backend)))
    loss, scores = figure.axes
    assert (loss.get_ylabel(), scores.get_ylabel()) == ("loss", "score")
    assert [t.get_text() for t in loss.get_legend().get_texts()] == ["train loss", "eval loss"]
    assert figure._suptitle.get_text() == f"{lineage.id}: tiny BERT, standing in for distilbert-base-uncased"

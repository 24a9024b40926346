"""Reports, curves and event payloads: what `trainbot status` prints and the chat surfaces render."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from jobs.lifecycle import events
from jobs.lineage import Attempt, AttemptStatus, Lineage, LineageStatus
from jobs.planning import prices
from jobs.planning.forecast import Forecast
from jobs.planning.grammar import parse_command
from jobs.records import MetricPoint
from jobs.reporting.plots import plot_lineage, plot_series
from jobs.reporting.reports import build_report, spot_savings, with_forecast
from tests.jobs.fakes import ScriptedBackend

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


def attempt(number: int, **fields: Any) -> Attempt:
    base = Attempt(
        lineage_id="qa-1", number=number, job_name=f"qa-1-{number}", instance_type="ml.p3.2xlarge", spot=True,
        status=AttemptStatus.COMPLETED, remote_status="Completed", secondary_status="Completed", failure_reason="",
        billable_seconds=None, training_seconds=None, metrics={}, model_artifacts=None, resumed_from_step=None,
        created_at=T0, updated_at=T0, ended_at=None,
    )
    return replace(base, **fields)


def lineage(*attempts: Attempt, status: LineageStatus = LineageStatus.COMPLETED, text: str = "distilbert-spot task=question-answering dataset=squad") -> Lineage:
    return Lineage(
        id="qa-1", spec=parse_command(text, max_instances=16), backend="sagemaker",
        checkpoint_uri="s3://bkt/qa-1/checkpoints", status=status, launched_by="U1", origin="slack", channel="C1",
        message_ts=None, schedule=None, request_id=None, estimated_usd=2.0, restarts=len(attempts) - 1,
        next_relaunch_at=None, next_instance_type=None, next_spot=None, created_at=T0, updated_at=T0,
        attempts=attempts,
    )


def two_attempts() -> Lineage:
    first = attempt(1, status=AttemptStatus.STOPPED, remote_status="Stopped", secondary_status="MaxWaitTimeExceeded",
                    billable_seconds=600, training_seconds=1800, ended_at=T0 + timedelta(minutes=40))
    second = attempt(2, instance_type="ml.p3.8xlarge", billable_seconds=300, training_seconds=1200,
                     metrics={"eval_exact_match": 81.2, "eval_f1": 88.5, "eval_loss": 1.1}, resumed_from_step=400,
                     steps_redone=25,
                     ended_at=T0 + timedelta(minutes=90))
    return lineage(first, second)


def test_the_final_report_sums_the_attempts() -> None:
    report = build_report(two_attempts(), ScriptedBackend())
    assert report.headline == {"exact_match": 81.2, "f1": 88.5, "eval loss": 1.1}
    assert (report.billable_seconds, report.training_seconds) == (900, 3000)
    assert report.spot_savings_pct == "70%"
    expected = prices.cost_of("ml.p3.2xlarge", 1, 600, True) + prices.cost_of("ml.p3.8xlarge", 1, 300, True)
    assert report.cost_usd == pytest.approx(expected)
    assert report.on_demand_usd > report.cost_usd
    assert report.duration_seconds == 90 * 60
    assert report.steps_saved == 400
    assert report.links["job"] == "fake://jobs/qa-1-2"
    assert not report.partial


def test_the_json_is_plain_and_rounded() -> None:
    data = json.loads(json.dumps(build_report(two_attempts(), ScriptedBackend()).to_json()))
    assert data["spot_savings"] == "70%" and data["spot_savings_fraction"] == 0.7
    assert [a["reason"] for a in data["attempts"]] == ["MaxWaitTimeExceeded", ""]
    assert data["cost_usd"] == round(data["cost_usd"], 2)
    assert data["steps_saved"] == 400


def test_the_terminal_text_names_what_a_person_looks_for() -> None:
    text = build_report(two_attempts(), ScriptedBackend()).to_text()
    assert text.splitlines()[0] == "Job qa-1: completed"
    for part in ("exact_match 81.2", "f1 88.5", "spot savings 70%", "1 h 30 min", "qa-1-2  ml.p3.8xlarge spot",
                 "(MaxWaitTimeExceeded)", "resumed at step 400 (25 steps redone)", "fake://jobs/qa-1-2"):
        assert part in text, part


def test_a_running_lineage_gets_a_partial_report() -> None:
    running = lineage(attempt(1, status=AttemptStatus.RUNNING, remote_status="InProgress",
                              secondary_status="Training"), status=LineageStatus.RUNNING)
    report = build_report(running, ScriptedBackend(), now=T0 + timedelta(minutes=5))
    assert report.partial and report.duration_seconds == 300
    assert report.spot_savings is None and report.cost_usd == 0
    assert "(so far)" in report.to_text()


def test_a_local_run_says_why_it_ended_where_its_checkpoints_are_and_what_sagemaker_would_bill() -> None:
    class LocalLinks(ScriptedBackend):
        def console_links(self, job_name: str, model_artifacts: str | None = None) -> dict[str, str]:
            return {"log": f"/home/local-jobs/{job_name}/logs/train.log", "checkpoints": "/home/checkpoints/qa-1"}

    failed = replace(two_attempts(), backend="local", status=LineageStatus.GAVE_UP)
    report = build_report(failed, LocalLinks(), reason="no spot capacity, and the restart cap of 1 is reached")
    lines = report.to_text().splitlines()
    assert lines[:2] == ["Job qa-1: gave_up", "  ended: no spot capacity, and the restart cap of 1 is reached"]
    assert "  checkpoints /home/checkpoints/qa-1" in lines
    assert not any(line.startswith("  checkpoints:") for line in lines)  # said once, as the real folder
    [cost] = [line for line in lines if line.startswith("  cost $")]
    assert cost.endswith(", what SageMaker would bill for this run (a local run is free)")
    data = report.to_json()
    assert data["reason"].startswith("no spot capacity") and data["checkpoints"] == "/home/checkpoints/qa-1"
    assert data["checkpoint_uri"] == "s3://bkt/qa-1/checkpoints" and data["backend"] == "local"
    assert "on SageMaker (free here)" in events.completed("qa-1", "qa-1-2", data, None)["text"]
    assert "on SageMaker" not in build_report(two_attempts(), ScriptedBackend()).to_text()


def test_savings_need_spot_and_training_time() -> None:
    on_demand = attempt(1, spot=False, billable_seconds=100, training_seconds=100)
    assert spot_savings((on_demand,)) is None
    assert spot_savings((attempt(1),)) is None
    assert spot_savings((attempt(1, billable_seconds=10, training_seconds=40),)) == pytest.approx(0.75)


def test_an_llm_fine_tune_reports_its_losses_and_tokens_a_second_beside_its_forecast() -> None:
    metrics = {"eval_loss": 1.12, "train_loss": 1.31, "train_tokens_per_second": 2876.4, "train_samples_per_second": 2.8}
    done = lineage(attempt(1, metrics=metrics), text="llm-lora")
    planned = Forecast(seconds=3600, usd=1.0, basis="physics", tokens_per_second=3135)
    report = with_forecast(build_report(done, ScriptedBackend()), planned)
    assert report.headline == {"eval loss": 1.12, "train loss": 1.31, "tokens/s": 2876.4}
    text = report.to_text()
    assert "  eval loss 1.12, train loss 1.31, tokens/s 2876" in text
    assert "; 3,135 tokens/s forecast, 2,876 trained" in text


def test_accuracy_is_the_headline_of_classification() -> None:
    done = lineage(attempt(1, metrics={"eval_accuracy": 0.9}), text="distilbert-spot")
    assert build_report(done, ScriptedBackend()).headline == {"accuracy": 0.9}


def test_curves_are_drawn_per_attempt(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    backend.set_metrics("qa-1-1", {"loss": [MetricPoint(10, 2.0), MetricPoint(20, 1.5)]})
    backend.set_metrics("qa-1-2", {"loss": [MetricPoint(20, 1.4), MetricPoint(30, 1.0)],
                                   "eval_f1": [MetricPoint(30, 88.5)]})
    path = plot_lineage(two_attempts(), backend, tmp_path / "plots" / "qa-1.png")
    assert path is not None and path.read_bytes()[:4] == b"\x89PNG"
    assert [c.job_name for c in backend.calls_of("metric_series")] == ["qa-1-1", "qa-1-2"]


def test_no_series_means_no_plot(tmp_path: Path) -> None:
    target = tmp_path / "none.png"
    assert plot_series([("j-1", {}), ("j-2", {"learning_rate": [MetricPoint(1, 0.1)]})], target, title="t") is None
    assert not target.exists()
    assert plot_lineage(two_attempts(), ScriptedBackend(), target) is None


def test_event_payloads_are_json_with_a_sentence() -> None:
    payloads = [
        events.state_line("l", "l-1", "InProgress", "Training"),
        events.interrupted("l", "l-1", "ml.p3.2xlarge"),
        events.relaunched("l", "l-2", attempt=2, instance_type="ml.p3.8xlarge", spot=True, backoff_seconds=30,
                          checkpoint_uri="s3://b/l/checkpoints", resumed_from_step=None),
        events.failed("l", "l-1", "AlgorithmError: boom", ["a"] * 100),
        events.gave_up("l", "l-3", "no capacity", 3),
        events.completed("l", "l-2", {"cost_usd": 1.5, "spot_savings": "70%"}, None),
        events.stopped("l", "l-1"),
        events.curves("l", "l-2", "/tmp/l.png"),
    ]
    assert [p["kind"] for p in payloads] == list(events.KINDS)
    for payload in payloads:
        assert json.loads(json.dumps(payload)) == payload
        assert payload["text"].endswith(".") or payload["kind"] == events.STATE
    assert payloads[0]["text"] == "l-1: InProgress (Training)"
    assert len(payloads[3]["log_tail"]) == events.LOG_TAIL_LINES
    assert payloads[5]["text"] == "l completed, cost $1.50, spot savings 70%."

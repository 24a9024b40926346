"""Live progress of SageMaker jobs from their CloudWatch series (moto): few GetMetricData calls for many
jobs, and what they say showing up on the job's card."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest

from handlers.context import Services
from handlers.notify import deliver_due
from jobs.backends.sagemaker.progress import MAX_QUERIES_PER_CALL
from jobs.backends.sagemaker.training_jobs import METRIC_NAMESPACE, SageMakerBackend
from jobs.clock import SystemClock
from jobs.lifecycle.progress import ProgressTracker
from jobs.lifecycle.service import JobService
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import Store
from tests.handlers.fakes import RecordingChat
from tests.support.moto_server import MotoAws, sagemaker_backend, set_training_job_state


class Requests:
    """GetMetricData requests the backend's session sends (each retry counted)."""

    def __init__(self) -> None:
        self.sent = 0

    def attach(self, session: boto3.Session) -> boto3.Session:
        session.events.register("before-send.cloudwatch.GetMetricData", self._count)
        return session

    def _count(self, **_: Any) -> None:
        self.sent += 1


def put_series(aws: MotoAws, series: Iterable[tuple[str, str, float, datetime]]) -> None:
    """(job, metric, value, when) points, as SageMaker publishes them from the metric definitions."""
    rows = [
        {"MetricName": metric, "Dimensions": [{"Name": "TrainingJobName", "Value": job}], "Timestamp": at,
         "Value": value}
        for job, metric, value, at in series
    ]
    client = aws.client("cloudwatch")
    for offset in range(0, len(rows), 1000):
        client.put_metric_data(Namespace=METRIC_NAMESPACE, MetricData=rows[offset : offset + 1000])


def ago(seconds: float) -> datetime:
    return datetime.now(timezone.utc) - timedelta(seconds=seconds)


def names(count: int) -> list[str]:
    stem = secrets.token_hex(3)
    return [f"p{stem}-{n}-1" for n in range(count)]


def counted(aws: MotoAws) -> tuple[SageMakerBackend, Requests]:
    requests = Requests()
    session = requests.attach(aws.boto_session())
    return sagemaker_backend(aws, session), requests


def test_one_call_reads_step_pace_and_loss_of_several_jobs(moto_aws: MotoAws) -> None:
    jobs = names(3)
    put_series(moto_aws, [
        *((job, "step", 40.0 + n, ago(150)) for n, job in enumerate(jobs)),
        *((job, "step", 60.0 + n, ago(30)) for n, job in enumerate(jobs)),
        *((job, "loss", 0.8, ago(30)) for job in jobs[:2]),
    ])
    backend, requests = counted(moto_aws)
    found = backend.progress([*jobs, "never-logged-1"])
    assert requests.sent == 1
    assert sorted(found) == sorted(jobs)  # a job with no series yet is left out
    first = found[jobs[0]]
    assert (first.step, first.loss) == (60, pytest.approx(0.8))
    assert first.steps_per_second is not None and 0.1 < first.steps_per_second < 0.5
    assert found[jobs[2]].loss is None and found[jobs[2]].step == 62


def test_many_jobs_take_few_calls_and_every_loss_is_read_within_two_updates(moto_aws: MotoAws) -> None:
    jobs = names(300)  # 300 step + 150 loss queries: one call of up to 500
    put_series(moto_aws, [
        *((job, "step", 10.0, ago(60)) for job in jobs),
        *((job, "loss", 1.0 + n / 1000, ago(60)) for n, job in enumerate(jobs)),
    ])
    backend, requests = counted(moto_aws)
    first = backend.progress(jobs)
    assert requests.sent == 1
    assert len(first) == 300 and sum(p.loss is not None for p in first.values()) == 150
    second = backend.progress(jobs)
    assert requests.sent == 2
    assert all(p.loss is not None for p in second.values())
    assert second[jobs[7]].loss == pytest.approx(1.007)


def test_the_number_of_calls_per_update() -> None:
    from jobs.backends.sagemaker.progress import ProgressReader

    reader = ProgressReader(cloudwatch=None, clock=SystemClock())
    calls = {jobs: -(-reader.queries_for(jobs) // MAX_QUERIES_PER_CALL) for jobs in (1, 250, 251, 500, 1000)}
    assert calls == {1: 1, 250: 1, 251: 1, 500: 2, 1000: 3}


def test_cloudwatch_series_show_up_on_the_card(moto_aws: MotoAws, tmp_path: Path) -> None:
    clock = SystemClock()
    settings = Settings(trainbot_home=tmp_path, trainbot_bucket=moto_aws.bucket, trainbot_role_arn=moto_aws.role_arn)
    store = Store(f"sqlite:///{tmp_path / 'bot.db'}", clock=clock)
    store.migrate()
    backend = sagemaker_backend(moto_aws)
    jobs = JobService(store=store, backend=backend, settings=settings, clock=clock)
    services = Services(jobs=jobs, store=store, settings=settings, clock=clock, backend=backend)
    lineage = jobs.launch("distilbert-spot", actor=Actor("U_ALICE", channel_id="C_ML", via="slack"))
    jobs.attach_message(lineage.id, "C_ML", "1.0001")
    job = f"{lineage.id}-1"
    set_training_job_state(job, "InProgress", "Training")
    put_series(moto_aws, [(job, "step", 100.0, ago(150)), (job, "step", 160.0, ago(30)), (job, "loss", 0.42, ago(30))])
    assert ProgressTracker(store, backend, clock, settings).poll_once().updated == [lineage.id]
    chat = RecordingChat()
    deliver_due(services, chat)
    [update] = chat.of("update")
    text = str(update.blocks)
    assert "step 160/782 · loss 0.4200 · ETA " in text and "Cost so far" in text and "Forecast" in text

"""The watcher with the real SageMakerBackend against a moto server on loopback.

moto creates every training job Completed and never moves it: the tests move jobs as SageMaker would by
editing moto's in-process backend (set_training_job_state), and assert on the CreateTrainingJob requests
the relaunches really sent.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from bot.wiring import build_watcher, ending_steps
from jobs.endings.stage import EndingStage
from jobs.lifecycle import events
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
from jobs.lineage import AttemptStatus, LineageStatus
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import Store
from tests.support.clock import FakeClock
from tests.support.moto_server import (  # noqa: F401  (fixtures)
    CallRecorder,
    MotoAws,
    moto_aws,
    moto_server,
    sagemaker_backend,
    set_training_job_state,
)

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
_IDS = itertools.count(1)


@dataclass
class Rig:
    aws: MotoAws
    store: Store
    service: JobService
    watcher: Watcher
    created: CallRecorder
    clock: FakeClock
    endings: EndingStage

    def kinds(self) -> list[str]:
        return [n.kind for n in self.store.outbox.due_notifications(limit=1000)]

    def notes(self, kind: str) -> list[dict[str, Any]]:
        return [n.payload for n in self.store.outbox.due_notifications(limit=1000) if n.kind == kind]

    def cycle(self) -> Any:
        """What one watch cycle of a runtime does: the watcher's poll, then the steps after each ending."""
        self.clock.advance(1)
        cycle = self.watcher.poll_once()
        self.endings.process_due()
        return cycle


@pytest.fixture
def rig(moto_aws: MotoAws, tmp_path: Path) -> Rig:  # noqa: F811  (the imported fixture)
    clock = FakeClock(datetime.now(timezone.utc))
    store = Store(f"sqlite:///{tmp_path / 'trainbot.db'}", clock=clock)
    store.migrate()
    created = CallRecorder("CreateTrainingJob")
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[created]))
    settings = Settings(trainbot_bucket=moto_aws.bucket, trainbot_role_arn=moto_aws.role_arn,
                        trainbot_home=tmp_path, trainbot_relaunch_backoff_seconds=0)
    service = JobService(store=store, backend=backend, settings=settings, clock=clock,
                         new_lineage_id=lambda spec: f"wm{next(_IDS):03d}-{datetime.now():%H%M%S}")
    watcher = build_watcher(store, backend, clock, settings)
    endings = EndingStage(store, clock, ending_steps(store, backend, clock, settings))
    return Rig(moto_aws, store, service, watcher, created, clock, endings)


def test_spot_recovery_through_interruption_max_wait_capacity_and_a_code_failure(rig: Rig) -> None:
    lineage = rig.service.launch("distilbert-spot", actor=ALICE)
    first = f"{lineage.id}-1"
    set_training_job_state(first, "InProgress", "Training")
    rig.cycle()

    set_training_job_state(first, "InProgress", "Interrupted")
    rig.cycle()
    assert rig.kinds().count(events.INTERRUPTED) == 1
    assert len(rig.created.calls) == 1

    set_training_job_state(first, "Stopped", "MaxWaitTimeExceeded", billable_seconds=120, training_seconds=600)
    rig.cycle()
    second = f"{lineage.id}-2"
    request = rig.created.by_name(second)
    assert request["CheckpointConfig"]["S3Uri"] == rig.created.by_name(first)["CheckpointConfig"]["S3Uri"]
    assert request["CheckpointConfig"]["S3Uri"] == lineage.checkpoint_uri
    assert request["EnableManagedSpotTraining"] is True
    assert request["ResourceConfig"]["InstanceType"] == "ml.g6e.xlarge"  # one GPU, as planned
    assert rig.store.get_attempt(first).status is AttemptStatus.STOPPED
    assert rig.store.get_attempt(first).billable_seconds == 120

    set_training_job_state(second, "InProgress", "Training")  # moto made it Completed
    rig.cycle()
    before = (len(rig.created.calls), rig.kinds())
    quiet = [rig.cycle() for _ in range(3)]
    assert (len(rig.created.calls), rig.kinds()) == before
    assert all(c.described == [] and c.actions == [] for c in quiet)

    set_training_job_state(second, "Failed", failure_reason="CapacityError: Unable to provision requested ML compute capacity.")
    rig.cycle()
    third = f"{lineage.id}-3"
    assert rig.created.by_name(third)["ResourceConfig"]["InstanceType"] == "ml.g6.xlarge"
    assert rig.created.by_name(third)["CheckpointConfig"]["S3Uri"] == lineage.checkpoint_uri

    set_training_job_state(third, "InProgress", "Training")
    rig.cycle()
    _log(rig.aws, third, ["epoch 1", "Traceback (most recent call last):", "ValueError: bad label 7"])
    set_training_job_state(third, "Failed", failure_reason="AlgorithmError: ExecuteUserScriptError: exit status 1")
    rig.cycle()
    rig.cycle()
    assert len(rig.created.calls) == 3
    assert rig.store.get_lineage(lineage.id).status is LineageStatus.FAILED
    [failed] = rig.notes(events.FAILED)
    assert failed["reason"].startswith("AlgorithmError")
    assert failed["log_tail"][-1] == "ValueError: bad label 7"


def test_completed_job_gets_its_report_and_curves_from_cloudwatch(rig: Rig) -> None:
    lineage = rig.service.launch("distilbert-spot", actor=ALICE)
    job = f"{lineage.id}-1"
    set_training_job_state(job, "InProgress", "Training")
    rig.cycle()
    _metrics(rig.aws, job, {"loss": [0.9, 0.6, 0.4], "eval_accuracy": [0.7, 0.85]})
    artifacts = f"s3://{rig.aws.bucket}/trainbot/{lineage.id}/output/{job}/output/model.tar.gz"
    set_training_job_state(job, "Completed", billable_seconds=300, training_seconds=1000,
                           final_metrics={"eval_accuracy": 0.85, "eval_loss": 0.41}, model_artifacts=artifacts)
    cycle = rig.cycle()
    assert rig.store.get_lineage(lineage.id).status is LineageStatus.COMPLETED
    [done] = rig.notes(events.COMPLETED)
    assert done["report"]["spot_savings"] == "70%"
    assert done["report"]["headline"] == {"accuracy": 0.85, "eval loss": 0.41}
    assert done["report"]["links"]["job"].endswith(f"#/jobs/{job}")
    # The model link is where DescribeTrainingJob says the model is, under the lineage's output prefix.
    assert done["report"]["links"]["model"].endswith(f"&prefix=trainbot/{lineage.id}/output/{job}/output/")
    assert done["png_path"] and Path(done["png_path"]).read_bytes()[:4] == b"\x89PNG"
    assert cycle.api_calls == 2  # list and describe: the report and its curves come after the ending
    assert rig.cycle().actions == []


def _log(aws: MotoAws, job: str, lines: list[str]) -> None:
    logs = aws.client("logs")
    group = "/aws/sagemaker/TrainingJobs"
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=group)
    stream = f"{job}/algo-1-1700000000"
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    start = int(datetime.now(timezone.utc).timestamp() * 1000)
    events_ = [{"timestamp": start + i, "message": line} for i, line in enumerate(lines)]
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events_)


def _metrics(aws: MotoAws, job: str, series: dict[str, list[float]]) -> None:
    cloudwatch = aws.client("cloudwatch")
    now = datetime.now(timezone.utc)
    for name, values in series.items():
        data = [
            {"MetricName": name, "Dimensions": [{"Name": "TrainingJobName", "Value": job}],
             "Timestamp": now - timedelta(seconds=len(values) - i),
             "Value": value}
            for i, value in enumerate(values)
        ]
        cloudwatch.put_metric_data(Namespace="/aws/sagemaker/TrainingJobs", MetricData=data)


@pytest.mark.iam_unchecked("the bot moves to a second bucket, which a team's policy would then name instead")
def test_a_bucket_changed_between_attempts_resumes_from_the_approved_checkpoints(
    rig: Rig, moto_aws: MotoAws, tmp_path: Path  # noqa: F811
) -> None:
    lineage = rig.service.launch("distilbert-spot", actor=ALICE)
    first = f"{lineage.id}-1"
    set_training_job_state(first, "InProgress", "Training")
    rig.cycle()
    # The operator moves the bot to another bucket; a new process starts with it.
    moto_aws.boto_session().client("s3").create_bucket(Bucket="trainbot-moved")
    settings = Settings(trainbot_bucket="trainbot-moved", trainbot_role_arn=moto_aws.role_arn,
                        trainbot_home=tmp_path, trainbot_relaunch_backoff_seconds=0)
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[rig.created]), bucket="trainbot-moved")
    rig.watcher = build_watcher(rig.store, backend, rig.clock, settings)
    set_training_job_state(first, "Stopped", "MaxWaitTimeExceeded", billable_seconds=120, training_seconds=600)
    rig.cycle()
    sent = rig.created.by_name(f"{lineage.id}-2")
    approved = rig.created.by_name(first)
    assert sent["CheckpointConfig"] == approved["CheckpointConfig"]
    assert sent["OutputDataConfig"] == approved["OutputDataConfig"]
    [note] = rig.notes(events.RELAUNCHED)
    assert note["checkpoint_uri"] == sent["CheckpointConfig"]["S3Uri"] == lineage.checkpoint_uri

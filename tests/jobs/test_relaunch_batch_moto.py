"""A relaunch trains the same run: two distilbert-spot lineages whose spot capacity is taken again and again, through
the real SageMakerBackend against moto, the watcher deciding as in production. What each attempt trains
with is read from the CreateTrainingJob requests really sent (moto keeps no hyperparameters worth reading
back), and from the store's attempt rows.

- the default order (same-count): both relaunches stay on one GPU, on other families, batch as planned;
- any-count, planned on ml.g5.xlarge: first the other 1-GPU types with 24 GB or more (ml.g6e.xlarge,
  ml.g6.xlarge), then a 4-GPU type with the per-device batch divided by four, so the global batch stays 32.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jobs.lifecycle import events
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
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


def settings_sent(request: dict[str, Any]) -> tuple[str, int, int]:
    """(instance type, per-device batch, accumulation) of a CreateTrainingJob request (the SDK sends every
    hyperparameter JSON-encoded; one the plan leaves unsaid is the Trainer's default, 1 for accumulation)."""
    hps = {key: json.loads(value) for key, value in request["HyperParameters"].items()}
    return (request["ResourceConfig"]["InstanceType"], int(hps["per_device_train_batch_size"]),
            int(hps.get("gradient_accumulation_steps", 1)))


@pytest.mark.parametrize(
    ("policy", "text", "expected"),
    [
        ("same-count", "distilbert-spot",
         [("ml.p3.2xlarge", 32, 1), ("ml.g6e.xlarge", 32, 1), ("ml.g6.xlarge", 32, 1)]),
        ("any-count", "distilbert-spot instance_type=ml.g5.xlarge",
         [("ml.g5.xlarge", 32, 1), ("ml.g6e.xlarge", 32, 1), ("ml.g6.xlarge", 32, 1), ("ml.g6e.12xlarge", 8, 1)]),
    ],
)
def test_spot_capacity_taken_twice_relaunches_with_the_global_batch_kept(
    moto_aws: MotoAws, tmp_path: Path, policy: str, text: str, expected: list[tuple[str, int, int]]  # noqa: F811
) -> None:
    clock = FakeClock(datetime.now(timezone.utc))
    store = Store(f"sqlite:///{tmp_path / 'trainbot.db'}", clock=clock)
    store.migrate()
    created = CallRecorder("CreateTrainingJob")
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[created]))
    settings = Settings(trainbot_bucket=moto_aws.bucket, trainbot_role_arn=moto_aws.role_arn, trainbot_home=tmp_path,
                        trainbot_relaunch_backoff_seconds=0, trainbot_recovery_policy=policy)
    service = JobService(store=store, backend=backend, settings=settings, clock=clock,
                         new_lineage_id=lambda spec: f"gb-{policy}-{datetime.now():%H%M%S%f}")
    watcher = Watcher(store, backend, clock, settings)

    lineage = service.launch(text, actor=ALICE)
    for number in range(1, len(expected)):
        job = f"{lineage.id}-{number}"
        set_training_job_state(job, "InProgress", "Training")
        clock.advance(1)
        watcher.poll_once()
        set_training_job_state(job, "Stopped", "MaxWaitTimeExceeded", billable_seconds=60, training_seconds=200)
        clock.advance(1)
        watcher.poll_once()

    jobs = [f"{lineage.id}-{n}" for n in range(1, len(expected) + 1)]
    assert [settings_sent(created.by_name(job)) for job in jobs] == expected
    for job in jobs:  # every attempt resumes the one run: same checkpoints, same global batch
        request = created.by_name(job)
        assert request["CheckpointConfig"]["S3Uri"] == lineage.checkpoint_uri
        gpus = {"ml.g6e.12xlarge": 4}.get(request["ResourceConfig"]["InstanceType"], 1)
        _, per_device, accumulation = settings_sent(request)
        assert per_device * accumulation * gpus * request["ResourceConfig"]["InstanceCount"] == 32
    ran = store.get_lineage(lineage.id)
    assert [(a.instance_type, a.per_device_batch, a.accumulation) for a in ran.attempts] == expected
    assert ran.launch_plan is not None and ran.launch_plan["batch"]["global_batch"] == 32
    said = [n.payload["text"] for n in store.outbox.due_notifications(limit=100) if n.kind == events.RELAUNCHED]
    assert said[0].startswith(f"Relaunched as {jobs[1]} (attempt 2, {expected[1][0]}, spot; 1 GPU as planned)")
    last = "1 GPU as planned" if policy == "same-count" else \
        "4 GPUs, per-device batch 8 instead of 32, global batch 32 as planned"
    assert said[-1].startswith(f"Relaunched as {jobs[-1]} (attempt {len(jobs)}, {expected[-1][0]}, spot; {last})")

"""A relaunch of llm-lora is the same run on another GPU: its spot capacity taken twice, through the real
SageMakerBackend against moto and the watcher deciding as in production (TRAINBOT_RECOVERY_POLICY=any-count,
since no other 1-GPU type has the L40S's 48 GB). Each attempt's CreateTrainingJob, as sent, keeps the global
batch of 16 (per-device 4 x accumulation 4 on one GPU), the checkpoints (the adapter and its optimizer), and
the image by its URI."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from jobs.lifecycle import events
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
from jobs.planning.instances import instance_info
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import Store
from tests.jobs.test_relaunch_batch_moto import settings_sent
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
NEWEST = "huggingface-pytorch-training:2.9.0-transformers5.3.0-gpu-py312-cu130-ubuntu22.04"


def test_llm_lora_relaunched_on_more_gpus_keeps_its_global_batch_and_adapter_checkpoints(
    moto_aws: MotoAws, tmp_path: Path  # noqa: F811
) -> None:
    clock = FakeClock(datetime.now(timezone.utc))
    store = Store(f"sqlite:///{tmp_path / 'trainbot.db'}", clock=clock)
    store.migrate()
    created = CallRecorder("CreateTrainingJob")
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[created]))
    settings = Settings(trainbot_bucket=moto_aws.bucket, trainbot_role_arn=moto_aws.role_arn, trainbot_home=tmp_path,
                        trainbot_relaunch_backoff_seconds=0, trainbot_recovery_policy="any-count")
    service = JobService(store=store, backend=backend, settings=settings, clock=clock,
                         new_lineage_id=lambda spec: f"llm-gb-{datetime.now():%H%M%S%f}")
    watcher = Watcher(store, backend, clock, settings)

    lineage = service.launch("llm-lora", actor=ALICE)
    for number in (1, 2):
        job = f"{lineage.id}-{number}"
        set_training_job_state(job, "InProgress", "Training")
        clock.advance(1)
        watcher.poll_once()
        set_training_job_state(job, "Stopped", "MaxWaitTimeExceeded", billable_seconds=60, training_seconds=200)
        clock.advance(1)
        watcher.poll_once()

    jobs = [f"{lineage.id}-{n}" for n in (1, 2, 3)]
    expected = [("ml.g6e.2xlarge", 4, 4), ("ml.g6e.12xlarge", 4, 1), ("ml.g6e.48xlarge", 2, 1)]
    assert [settings_sent(created.by_name(job)) for job in jobs] == expected
    for job in jobs:
        request = created.by_name(job)
        instance, per_device, accumulation = settings_sent(request)
        assert per_device * accumulation * instance_info(instance).gpus == 16  # the approved global batch
        assert request["CheckpointConfig"]["S3Uri"] == lineage.checkpoint_uri  # the adapter's checkpoints
        assert request["AlgorithmSpecification"]["TrainingImage"].endswith(NEWEST)
        hps = {key: json.loads(value) for key, value in request["HyperParameters"].items()}
        assert (hps["sagemaker_program"], hps["lora_r"], hps["bf16"]) == ("train_sft.py", 16, True)
    ran = store.get_lineage(lineage.id)
    assert [(a.instance_type, a.per_device_batch, a.accumulation) for a in ran.attempts] == expected
    said = [n.payload["text"] for n in store.outbox.due_notifications(limit=100) if n.kind == events.RELAUNCHED]
    assert said[0].startswith(f"Relaunched as {jobs[1]} (attempt 2, ml.g6e.12xlarge, spot; 4 GPUs, "
                              "gradient accumulation 1 instead of 4, global batch 16 as planned)")

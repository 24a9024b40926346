"""End to end on the local backend: a spot job whose capacity is taken (its processes killed with no signal
the script can act on, as SageMaker's image does) is relaunched by the watcher from the last checkpoint on
disk, redoes the steps after it, and ends with the step count and weights of an uninterrupted run.

Real processes, real training of the tiny model; the two lineages train side by side.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors.torch import load_file

from bot.wiring import build_runtime
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.lineage import LineageStatus
from jobs.records import Actor
from jobs.settings import Settings
from tests.support.waiting import wait_for

OPERATOR = Actor("cli:test", via="cli")
SPEC = "distilbert-spot epochs=1"


def weights(model_dir: str) -> dict:  # type: ignore[type-arg]
    (file,) = Path(model_dir).glob("*.safetensors")
    return load_file(str(file))


def test_a_reclaimed_spot_job_resumes_and_matches_an_uninterrupted_run(local_home: Path) -> None:
    trainbot_home = local_home
    settings = Settings(trainbot_home=trainbot_home, trainbot_backend="local", trainbot_relaunch_backoff_seconds=0)
    # The real clock: a reclaimed local job shows Interrupted for a few seconds of it before it ends.
    runtime = build_runtime(settings, clock=SystemClock())
    backend = runtime.backend
    assert isinstance(backend, LocalBackend)
    steady = runtime.jobs.launch(SPEC, actor=OPERATOR)
    reclaimed = runtime.jobs.launch(SPEC, actor=OPERATOR)
    checkpoints = backend.checkpoint_folder(reclaimed.checkpoint_uri)

    furthest = checkpoints / "trainbot-furthest-step.json"

    def past_a_checkpoint() -> bool:
        saved = [int(p.parent.name.split("-")[1]) for p in checkpoints.glob("checkpoint-*/trainer_state.json")]
        return bool(saved) and furthest.is_file() and json.loads(furthest.read_text())["step"] > max(saved)

    wait_for(past_a_checkpoint, "a step past the first complete checkpoint")
    backend.take_capacity(f"{reclaimed.id}-1")

    def both_ended() -> bool:
        runtime.watcher.poll_once()
        return all(runtime.jobs.get(ref).status.is_terminal() for ref in (steady.id, reclaimed.id))

    wait_for(both_ended, "both lineages to end")
    steady, reclaimed = runtime.jobs.get(steady.id), runtime.jobs.get(reclaimed.id)
    assert steady.status is reclaimed.status is LineageStatus.COMPLETED
    assert [a.job_name for a in reclaimed.attempts] == [f"{reclaimed.id}-1", f"{reclaimed.id}-2"]
    first, second = reclaimed.attempts
    assert first.secondary_status == "MaxWaitTimeExceeded"
    assert second.resumed_from_step and second.resumed_from_step > 0
    redone = backend.describe(second.job_name).steps_redone
    assert redone is not None and redone >= 1  # the kill lost the steps after the checkpoint; they were redone
    assert "SIGTERM" not in "\n".join(backend.log_tail(first.job_name, 400))

    steady_job, resumed_job = steady.attempts[-1].job_name, second.job_name
    assert backend.metric_series(resumed_job)["loss"][-1].x == backend.metric_series(steady_job)["loss"][-1].x
    steady_weights = weights(backend.describe(steady_job).model_artifacts or "")
    resumed_weights = weights(backend.describe(resumed_job).model_artifacts or "")
    assert steady_weights.keys() == resumed_weights.keys()
    for name, tensor in steady_weights.items():
        assert resumed_weights[name].equal(tensor), f"{name} differs after the resume"
    runtime.shutdown()

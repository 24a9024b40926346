"""A relaunch on another GPU count trains the same run: the local backend runs the bot's script under the
training toolkit (`train`, as the Hugging Face image does), a 1-GPU plan as one process. Two lineages
start side by side: one trains its 60 steps uninterrupted; the other is killed (SIGKILL, as a spot reclaim
is lived in the image) once its step-30 checkpoint is on disk, and relaunched from it on a 4-GPU type,
which this backend runs as twice the processes with the per-device batch halved (the plan keeps the
global batch; the backend keeps its own scaled-down one the same way).

Every step's examples (`--log_samples`: a `[samples]` line a process a step) must be the uninterrupted
run's, and the final training loss within 2% of it. The real tiny BERT, the real toolkit, no mocks.
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jobs.backends.local.container import TOOLKIT, toolkit_available
from jobs.backends.local.scaling import LocalLimits
from jobs.backends.local.state import JobFolder
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.planning.grammar import parse_command
from jobs.planning.plan import LaunchPlan, build_plan
from jobs.records import RemoteJob, RemoteStatus

pytestmark = pytest.mark.timeout(900)
SPEC = "distilbert-spot hp.log_samples=yes"  # 60 steps locally (the backend's cap), a checkpoint every 10
KILLED_AT = 30
WAIT_S = 400


def wait_until(check: Callable[[], bool], what: str, every: float = 0.05) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(every)


def ended(backend: LocalBackend, job: str) -> RemoteJob:
    found: list[RemoteJob] = []

    def done() -> bool:
        found[:] = [backend.describe(job)]
        return found[0].status.is_terminal()

    wait_until(done, f"{job} to end", every=0.5)
    return found[0]


def samples_per_step(backend: LocalBackend, job: str) -> dict[int, list[int]]:
    """{step: the ids of every example that step trained, over all processes, sorted}."""
    steps: dict[int, list[int]] = {}
    for line in backend.log_tail(job, 100_000):
        match = re.search(r"\[samples\] step=(\d+) rank=\d+ ids=([\d,]+)", line)
        if match:
            steps.setdefault(int(match.group(1)), []).extend(int(i) for i in match.group(2).split(","))
    return {step: sorted(ids) for step, ids in steps.items()}


def test_a_run_relaunched_on_twice_the_processes_sees_the_same_samples_and_ends_at_the_same_loss(
    tmp_path: Path,
) -> None:
    if not toolkit_available(sys.executable):
        pytest.fail("the training toolkit (sagemaker-training, sagemaker-pytorch-training) is a test dependency")
    backend = LocalBackend(tmp_path / "home", clock=SystemClock(), offline=True, limits=LocalLimits(max_processes=2))
    spec = parse_command(SPEC)

    def plan(lineage: str) -> LaunchPlan:
        return build_plan(spec, bucket="local", lineage_id=lineage)

    steady, moved = plan("steady"), plan("moved")
    backend.launch("steady-1", steady)
    backend.launch("moved-1", moved)
    checkpoints = backend.checkpoint_folder(moved.checkpoint_uri)
    wait_until((checkpoints / f"checkpoint-{KILLED_AT}" / "trainer_state.json").is_file, "the step-30 checkpoint")
    backend.take_capacity("moved-1")
    assert ended(backend, "moved-1").secondary_status == "MaxWaitTimeExceeded"
    for later in checkpoints.glob("checkpoint-*"):  # killed at 30: whatever it saved past it is not there
        if int(later.name.split("-")[1]) > KILLED_AT:
            shutil.rmtree(later)

    relaunch = moved.for_attempt(instance_type="ml.g6.12xlarge", spot=True)  # 4 GPUs: per-device 32 -> 8
    assert relaunch.estimator["hyperparameters"]["per_device_train_batch_size"] == 8
    backend.launch("moved-2", relaunch)
    state = JobFolder(tmp_path / "home" / "local-jobs", "moved-2").load()
    assert (state.runner, state.processes) == (TOOLKIT, 2)
    assert state.hyperparameters["per_device_train_batch_size"] == 16  # the local run's 32 x 1 = 16 x 2
    for job in ("steady-1", "moved-2"):
        assert ended(backend, job).status is RemoteStatus.COMPLETED, "\n".join(backend.log_tail(job, 120))
    assert backend.resumed_from_step("moved-2") == KILLED_AT

    uninterrupted = samples_per_step(backend, "steady-1")
    relaunched = {**samples_per_step(backend, "moved-1"), **samples_per_step(backend, "moved-2")}
    assert sorted(uninterrupted) == list(range(1, 61))
    assert all(len(ids) == 32 for ids in uninterrupted.values())  # the global batch, every step
    assert {step: relaunched[step] for step in range(1, 61)} == uninterrupted

    steady_loss = backend.describe("steady-1").final_metrics["train_loss"]
    moved_loss = backend.describe("moved-2").final_metrics["train_loss"]
    print(f"[relaunch] train_loss uninterrupted {steady_loss:.5f}, relaunched on 2 processes {moved_loss:.5f} "
          f"({(moved_loss - steady_loss) / steady_loss:+.2%})")
    assert steady_loss < 0.65  # it learned (chance is 0.69): within 2% of it means the same run
    assert moved_loss == pytest.approx(steady_loss, rel=0.02)

"""Local jobs share the machine's cores: each new job's processes get the cores left by the local jobs
running now, never more than an operator's OMP_NUM_THREADS. Thread pools that outnumber the cores spin
against each other (bench/local_threads.py measures how much).

The runner here is the real one, told to start `sleep` in place of training: what is checked is the
environment a launch hands its processes, and that a running process counts and an ended one does not.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from jobs.backends.local.runner import SubprocessRunner
from jobs.backends.local.scaling import LocalLimits
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.planning.grammar import parse_command
from jobs.planning.plan import build_plan
from tests.support.waiting import wait_for


class SleepingRunner(SubprocessRunner):
    """Starts `sleep` for every job, and keeps the environment each launch asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []
        self.pids: list[int] = []

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log_path: Path) -> int:
        self.threads.append(env["OMP_NUM_THREADS"])
        self.pids.append(super().spawn(["sleep", "120"], env=env, cwd=cwd, log_path=log_path))
        return self.pids[-1]


@pytest.fixture
def backend_and_runner(local_home: Path) -> tuple[LocalBackend, SleepingRunner]:
    runner = SleepingRunner()
    limits = LocalLimits(cpus=8, max_processes=2)
    return LocalBackend(local_home, clock=SystemClock(), runner=runner, offline=True, limits=limits), runner


def launch(backend: LocalBackend, job: str, command: str) -> None:
    backend.launch(job, build_plan(parse_command(command), bucket="test-bucket", lineage_id=job.rsplit("-", 1)[0]))


def test_each_launch_gets_the_cores_the_running_local_jobs_left(
    backend_and_runner: tuple[LocalBackend, SleepingRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    backend, runner = backend_and_runner
    try:
        launch(backend, "pair-1", "bert-squad")  # two processes, nothing else running: 8 cores / 2
        launch(backend, "single-1", "distilbert-spot")  # one process beside those two: 8 cores / 3
        assert [backend.describe("pair-1").status.value, backend.describe("single-1").status.value] == [
            "InProgress", "InProgress"]
        assert runner.threads == ["4", "2"]

        backend.stop("pair-1")  # its processes end: their cores are free again
        wait_for(lambda: not runner.is_alive(runner.pids[0]), "pair-1's process to end")
        launch(backend, "after-1", "distilbert-spot")  # beside single-1's one process: 8 / 2
        assert runner.threads[-1] == "4"
    finally:
        for pid in runner.pids:
            runner.signal_group(pid, signal.SIGKILL)


def test_an_operators_omp_num_threads_caps_every_launch(
    backend_and_runner: tuple[LocalBackend, SleepingRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    backend, runner = backend_and_runner
    try:
        launch(backend, "capped-1", "bert-squad")
        assert runner.threads == ["1"]
    finally:
        for pid in runner.pids:
            runner.signal_group(pid, signal.SIGKILL)

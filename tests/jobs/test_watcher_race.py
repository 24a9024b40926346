"""Two watcher processes on one store (a SQLite file, then a real PostgreSQL database) act once: each lost job
is relaunched exactly once.

The processes share the database and a file-backed backend that records every create call, so a double
relaunch would show as two created jobs (or two create calls) however the processes interleave.
"""

from __future__ import annotations

import fcntl
import json
import multiprocessing
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from jobs.clock import SystemClock
from jobs.errors import NotFound
from jobs.lifecycle import events
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
from jobs.lineage import AttemptStatus, LineageStatus
from jobs.records import Actor, JobSummary, MetricSeries, RemoteJob, RemoteStatus
from jobs.settings import Settings
from jobs.store.store import Store

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
LINEAGES = 4
CYCLES = 3


class FileBackend:
    """A TrainingBackend whose jobs live in a JSON file under an exclusive lock, shared by processes."""

    name = "file"

    def __init__(self, path: Path, *, launch_seconds: float = 0.0, lingering: str | None = None) -> None:
        self.path = path
        self.launch_seconds = launch_seconds  # widens the race window inside a launch
        self.lingering = lingering  # this job's launch returns a second after the job exists, as under load

    @contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        with open(self.path.with_suffix(".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = json.loads(self.path.read_text()) if self.path.exists() else {"jobs": {}, "creates": []}
            yield data
            self.path.write_text(json.dumps(data))

    def launch(self, job_name: str, plan: Any) -> None:
        time.sleep(self.launch_seconds)
        with self._state() as data:
            data["creates"].append(job_name)
            if job_name not in data["jobs"]:
                data["jobs"][job_name] = {"status": "InProgress", "secondary": "Training", "at": _now()}
        if job_name == self.lingering:
            time.sleep(1.0)

    def set(self, job_name: str, status: str, secondary: str) -> None:
        with self._state() as data:
            data["jobs"][job_name] = {"status": status, "secondary": secondary, "at": _now()}

    def creates(self) -> list[str]:
        with self._state() as data:
            return list(data["creates"])

    def describe(self, job_name: str) -> RemoteJob:
        with self._state() as data:
            job = data["jobs"].get(job_name)
        if job is None:
            raise NotFound(f"There is no training job {job_name!r}.")
        return RemoteJob(name=job_name, status=RemoteStatus(job["status"]), secondary_status=job["secondary"],
                         last_modified=datetime.fromisoformat(job["at"]))

    def list_changed(self, since: datetime | None) -> list[JobSummary]:
        with self._state() as data:
            rows = [(name, job) for name, job in data["jobs"].items()]
        found = [JobSummary(name, RemoteStatus(job["status"]), datetime.fromisoformat(job["at"])) for name, job in rows]
        return [s for s in found if since is None or (s.last_modified and s.last_modified > since)]

    def stop(self, job_name: str) -> None:
        self.set(job_name, "Stopped", "Stopped")

    def log_tail(self, job_name: str, lines: int = 40) -> list[str]:
        return []

    def metric_series(self, job_name: str) -> MetricSeries:
        return {}

    def console_links(self, job_name: str, model_artifacts: str | None = None) -> dict[str, str]:
        return {}

    def scaling_note(self, plan: Any) -> str | None:
        return None

    def progress(self, job_names: Any) -> dict[str, Any]:
        return {}

    def forecast_target(self, plan: Any) -> Any:
        return None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _settings(home: Path) -> Settings:
    return Settings(trainbot_bucket="bkt", trainbot_home=home, trainbot_relaunch_backoff_seconds=0)


def _watch(url: str, state: Path, home: Path, barrier: Any, results: Any, lingering: str | None) -> None:
    """One watcher process: its own Store, service and watcher; starts with the other at the barrier."""
    clock = SystemClock()
    store = Store(url, clock=clock)
    backend = FileBackend(state, launch_seconds=0.05, lingering=lingering)
    watcher = Watcher(store, backend, clock, _settings(home))
    barrier.wait()
    actions: list[str] = []
    errors: list[str] = []
    for _ in range(CYCLES):
        cycle = watcher.poll_once()
        actions += cycle.actions
        errors += cycle.errors
    results.put((actions, errors))


@pytest.mark.parametrize("lingering", [None, f"race-{LINEAGES}-2"])
def test_two_watcher_processes_relaunch_each_lost_job_once(tmp_path: Path, database_url: str,
                                                          lingering: str | None) -> None:
    """``lingering``: one relaunch's create returns late, so the other process sees the new job running before
    the relauncher is back to announce it (a CI run under load)."""
    url = database_url
    state = tmp_path / "backend.json"
    clock = SystemClock()
    store = Store(url, clock=clock)
    store.migrate()
    backend = FileBackend(state)
    ids = iter(range(1, 100))
    service = JobService(store=store, backend=backend, settings=_settings(tmp_path), clock=clock,
                         new_lineage_id=lambda spec: f"race-{next(ids)}")
    lineages = [service.launch("distilbert-spot", actor=ALICE) for _ in range(LINEAGES)]
    for lineage in lineages:
        backend.set(f"{lineage.id}-1", "Stopped", "MaxWaitTimeExceeded")

    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    workers = [ctx.Process(target=_watch, args=(url, state, tmp_path, barrier, results, lingering)) for _ in range(2)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=60) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0

    assert [errors for _, errors in outcomes] == [[], []]
    # Each relaunch is finished by one process. Its announcement may come from either (the other one says
    # "notified relaunched ..."), so the announcements are counted in the outbox below.
    finished = [a for actions, _ in outcomes for a in actions if ": running again as " in a]
    assert sorted(finished) == sorted(f"{ln.id}: running again as {ln.id}-2" for ln in lineages), outcomes
    creates = backend.creates()
    for lineage in lineages:
        assert creates.count(f"{lineage.id}-2") == 1, creates
        final = store.get_lineage(lineage.id)
        assert final.status is LineageStatus.RUNNING
        assert [a.status for a in final.attempts] == [AttemptStatus.STOPPED, AttemptStatus.RUNNING]
    assert len(creates) == 2 * LINEAGES
    kinds = [n.kind for n in store.outbox.due_notifications(limit=1000)]
    assert kinds.count(events.RELAUNCHED) == LINEAGES

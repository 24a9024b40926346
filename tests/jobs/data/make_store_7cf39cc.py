"""Builds store_7cf39cc.db: a store made by the first released schema (commit 7cf39cc, hand-written
migrations 1, 9 and 20), holding one row or more in every table, for the in-place upgrade test.

Run it with that commit's code first on the path (it imports the old module layout)::

    git worktree add /tmp/old 7cf39cc   # or: git archive 7cf39cc | tar -x -C /tmp/old
    cd /tmp/old && PYTHONPATH=/tmp/old python $REPO/tests/jobs/data/make_store_7cf39cc.py $REPO/tests/jobs/data/store_7cf39cc.db

Not collected by pytest (no test_ prefix) and never imported by the suite.
"""

from __future__ import annotations

import sqlite3
import sys
from datetime import datetime, timezone
from pathlib import Path

from jobs.service import JobService  # type: ignore[import-not-found]

from bot.scheduler import ApsCronCalendar, LeaderLease, SchedulerRunner  # type: ignore[import-not-found]
from jobs.clock import FakeClock  # type: ignore[import-not-found]
from jobs.endpoints import EndpointService  # type: ignore[import-not-found]
from jobs.records import Actor, AttemptStatus, LineageStatus  # type: ignore[import-not-found]
from jobs.schedules import ScheduleService  # type: ignore[import-not-found]
from jobs.settings import Settings  # type: ignore[import-not-found]
from jobs.store import Store  # type: ignore[import-not-found]
from tests.jobs.fakes import ScriptedBackend  # type: ignore[import-not-found]
from tests.support.endpoints import FakeEndpoints, completed_lineage  # type: ignore[import-not-found]

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")


def main(target: Path) -> None:
    target.unlink(missing_ok=True)
    clock = FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc))
    store = Store(f"sqlite:///{target}", clock=clock)
    store.migrate()
    settings = Settings(trainbot_bucket="bkt")
    backend = ScriptedBackend(clock=clock)
    ids = iter(["spot-0001", "nightly-0002"])
    jobs = JobService(store=store, backend=backend, settings=settings, clock=clock,
                      new_lineage_id=lambda spec: next(ids))
    # A spot lineage on its second attempt, with a message, audit entries and outbox rows.
    lineage = jobs.launch("distilbert-spot hp.note=legacy", actor=ALICE, request_id="req-1")
    store.set_message(lineage.id, "C_ML", "1700000000.000100")
    clock.advance(60)
    store.transition_attempt(f"{lineage.id}-1", [AttemptStatus.LAUNCHING, AttemptStatus.RUNNING],
                             AttemptStatus.STOPPED, remote_status="Stopped",
                             secondary_status="MaxWaitTimeExceeded", billable_seconds=42, training_seconds=300,
                             metrics={"loss": 0.5}, resumed_from_step=None)
    store.transition_lineage(lineage.id, [LineageStatus.PENDING, LineageStatus.RUNNING], LineageStatus.RUNNING)
    store.add_attempt(lineage.id, number=2, instance_type="ml.p3.8xlarge", spot=True, resumed_from_step=10)
    store.enqueue(kind="state", payload={"text": "relaunched"}, dedup_key="spot-0001:relaunched:2",
                  lineage_id=lineage.id, channel="C_ML")
    store.set_meta("watcher.cursor.fake", "2026-03-01T12:00:00+00:00")
    # A schedule that ran once, and its runner's job row and lease.
    calendar = ApsCronCalendar()
    schedules = ScheduleService(store=store, jobs=jobs, calendar=calendar, settings=settings, clock=clock)
    schedules.add("nightly", "0 2 * * *", "UTC", "distilbert-spot", actor=ALICE, channel="C_ML")
    schedules.fire("nightly", datetime(2026, 3, 2, 2, 0, tzinfo=timezone.utc))
    runner = SchedulerRunner(settings, schedules, clock, autorun=False, inline=True,
                             lease=LeaderLease(store.engine, clock, holder="legacy-host:1"))
    runner.start()
    runner.tick()
    runner._scheduler.shutdown(wait=False)  # keep the lease row as a crashed leader would
    # A completed lineage deployed to an endpoint.
    completed_lineage(store, "bert-0003")
    endpoints = EndpointService(store=store, backend=FakeEndpoints(), settings=settings, clock=clock)
    endpoints.deploy("bert-0003", options={}, actor=ALICE)
    store.dispose()
    # One self-contained file: no WAL beside it.
    with sqlite3.connect(target) as conn:
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.execute("VACUUM")
    print(f"wrote {target} ({target.stat().st_size} bytes)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

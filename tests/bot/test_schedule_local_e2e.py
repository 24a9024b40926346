"""A schedule due in a few seconds starts a real tiny training job on the local backend.

The whole runtime is the one `trainbot serve` builds (store, local backend, watcher, schedules); only
the clock is fake, so "02:00" arrives when the test says so. Training itself is real.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

from bot.scheduler import SchedulerRunner
from bot.wiring import build_runtime
from jobs.lineage import LineageStatus
from jobs.records import Actor
from jobs.settings import Settings
from tests.support.clock import FakeClock

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")


def test_a_schedule_due_in_seconds_starts_a_real_tiny_job(local_home: Path) -> None:
    trainbot_home = local_home
    clock = FakeClock(datetime(2026, 1, 10, 1, 59, 55, tzinfo=timezone.utc))  # five seconds before 02:00
    settings = Settings(trainbot_home=trainbot_home, trainbot_backend="local")
    runtime = build_runtime(settings, clock=clock)
    schedules = runtime.require_schedules()
    schedules.add("nightly", "0 2 * * *", "UTC", "distilbert-spot epochs=1", actor=ALICE, channel="C_ML")
    runner = SchedulerRunner(settings, schedules, clock, autorun=False, inline=True)
    runner.start()
    try:
        runner.tick()
        assert runtime.store.list_lineages(schedule="nightly") == []  # not due yet

        clock.advance(10)
        runner.tick()
        (lineage,) = runtime.store.list_lineages(schedule="nightly")
        assert lineage.spec.spot and lineage.channel == "C_ML"

        deadline = time.monotonic() + 240
        while not runtime.jobs.get(lineage.id).status.is_terminal() and time.monotonic() < deadline:
            runtime.watcher.poll_once()
            time.sleep(1)
        finished = runtime.jobs.get(lineage.id)
        assert finished.status is LineageStatus.COMPLETED, runtime.backend.log_tail(f"{lineage.id}-1")
        assert "eval_accuracy" in (finished.latest_attempt.metrics if finished.latest_attempt else {})
        assert "completed" in schedules.render_list()
    finally:
        runner.shutdown()
        runtime.shutdown()

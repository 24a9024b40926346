"""The scheduler on a real store (a SQLite file, then a real PostgreSQL database) with APScheduler's
SQLAlchemy job store, driven by a FakeClock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from bot.scheduler import ApsCronCalendar, LeaderLease, SchedulerRunner
from jobs.errors import ScheduleError
from jobs.settings import Settings
from tests.jobs.test_schedules import ALICE, TRAIN, World, finish, make_world
from tests.support.clock import FakeClock

ROOT = Path(__file__).resolve().parents[2]
UTC = timezone.utc


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def runner_for(world: World, holder: str = "A", **kw: object) -> SchedulerRunner:
    lease = LeaderLease(world.store.engine, world.clock, holder=holder, ttl_seconds=60)
    runner = SchedulerRunner(Settings(), world.schedules, world.clock, lease=lease, autorun=False, inline=True,
                             **kw)  # type: ignore[arg-type]
    runner.start()
    return runner


def launched(world: World) -> list[str]:
    return [lineage.id for lineage in world.store.list_lineages(schedule="nightly")]


@pytest.fixture
def db(database_url: str) -> str:
    """The shared store's URL (tests/conftest.py runs each test on SQLite and on PostgreSQL)."""
    return database_url


# -- cron and time zones -------------------------------------------------------------------------------


def fires(cron: str, tz: str, start: datetime, count: int) -> list[datetime]:
    calendar, out, after = ApsCronCalendar(), [], start
    for _ in range(count):
        nxt = calendar.next_fire(cron, tz, after)
        assert nxt is not None and nxt.tzinfo is not None
        out.append(nxt)
        after = nxt
    return out


def test_time_zone_is_honoured() -> None:
    assert fires("0 2 * * *", "America/New_York", utc(2026, 1, 10, 12), 1) == [utc(2026, 1, 11, 7)]
    assert fires("0 2 * * *", "UTC", utc(2026, 1, 10, 12), 1) == [utc(2026, 1, 11, 2)]


def test_berlin_0230_on_the_spring_forward_night_fires_once() -> None:
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST, so 02:30 does not exist; it runs once, at 03:30 CEST.
    got = fires("30 2 * * *", "Europe/Berlin", utc(2026, 3, 27, 12), 4)
    assert got == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 30), utc(2026, 3, 30, 0, 30), utc(2026, 3, 31, 0, 30)]


def test_berlin_0230_on_the_fall_back_night_fires_once() -> None:
    # 2026-10-25: 02:30 happens twice (CEST, then CET); a nightly job runs at the first only.
    got = fires("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), 3)
    assert got == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30), utc(2026, 10, 27, 1, 30)]


def test_every_15_minutes_keeps_running_through_the_repeated_hour() -> None:
    got = fires("*/30 * * * *", "Europe/Berlin", utc(2026, 10, 24, 23, 50), 6)
    assert got == [utc(2026, 10, 25, 0, 0) + timedelta(minutes=30 * i) for i in range(6)]


@pytest.mark.parametrize(("cron", "tz", "words"), [
    ("61 * * * *", "UTC", "not a cron expression"),
    ("0 2 * * * *", "UTC", "five fields"),
    ("0 2 * * *", "Europe/Nowhere", "not a time zone"),
    ("0 2 * * *", "../etc/passwd", "not a time zone"),
])
def test_bad_cron_or_zone_is_one_sentence(cron: str, tz: str, words: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        ApsCronCalendar().validate(cron, tz)
    assert words in str(caught.value) and "\n" not in str(caught.value)


# -- firing, restarts, pause --------------------------------------------------------------------------


def test_fires_when_due_and_only_once(db: str) -> None:
    world = make_world(db)
    world.schedules.add("nightly", "0 2 * * *", "UTC", TRAIN, actor=ALICE, channel="C_ML")
    runner = runner_for(world)
    try:
        runner.tick()
        assert runner.is_leader and runner.jobs() == {"nightly": utc(2026, 3, 2, 2)}
        world.clock.advance(13 * 3600 + 30)  # 2026-03-02 01:00:30
        runner.tick()
        assert launched(world) == []
        world.clock.advance(3600)
        runner.tick()
        runner.tick()
        assert len(launched(world)) == 1
        assert runner.jobs() == {"nightly": utc(2026, 3, 3, 2)}
    finally:
        runner.shutdown()


def test_a_run_missed_while_down_runs_once_on_return(db: str) -> None:
    world = make_world(db)
    world.schedules.add("nightly", "0 2 * * *", "UTC", TRAIN, actor=ALICE, channel=None)
    first = runner_for(world)
    first.tick()
    first.shutdown()
    world.clock.advance(3 * 86400 + 14 * 3600 + 20 * 60)  # down for three nights; back at 02:20 on the 4th
    # A grace of days: all three missed nights are within it, and coalescing still runs only the last.
    again = runner_for(make_world(db, world.clock), holder="B", misfire_grace_seconds=5 * 86400)
    try:
        again.tick()
        again.tick()
        runs = again._schedules.runs("nightly")  # noqa: SLF001 - the run history is the evidence
        assert [(r.outcome, r.scheduled_for) for r in runs] == [("launched", utc(2026, 3, 5, 2))]
        assert len(launched(world)) == 1 and again.jobs() == {"nightly": utc(2026, 3, 6, 2)}
    finally:
        again.shutdown()


def test_a_run_missed_beyond_the_grace_period_is_dropped(db: str) -> None:
    world = make_world(db)
    world.schedules.add("nightly", "0 2 * * *", "UTC", TRAIN, actor=ALICE, channel=None)
    runner = runner_for(world, misfire_grace_seconds=600)
    try:
        runner.tick()
        world.clock.advance(14 * 3600 + 11 * 60)  # 02:11, grace 10 min
        runner.tick()
        assert launched(world) == [] and runner.jobs() == {"nightly": utc(2026, 3, 3, 2)}
    finally:
        runner.shutdown()


def test_pause_and_resume_sync_the_scheduler(db: str) -> None:
    world = make_world(db)
    world.schedules.add("nightly", "0 2 * * *", "UTC", TRAIN, actor=ALICE, channel=None)
    runner = runner_for(world)
    try:
        runner.tick()
        world.schedules.pause("nightly")
        world.clock.advance(15 * 3600)  # past 02:00 while paused
        runner.tick()
        assert runner.jobs() == {} and launched(world) == []
        world.schedules.resume("nightly")
        runner.tick()
        assert runner.jobs() == {"nightly": utc(2026, 3, 3, 2)} and launched(world) == []  # no catch-up
        world.schedules.remove("nightly")
        runner.tick()
        assert runner.jobs() == {}
    finally:
        runner.shutdown()


# -- several processes on one database --------------------------------------------------------------------


def test_two_runners_on_one_database_fire_once_and_a_crashed_leader_is_taken_over(db: str) -> None:
    one = make_world(db)
    one.schedules.add("nightly", "0 2 * * *", "UTC", TRAIN, actor=ALICE, channel=None)
    two = make_world(db, one.clock)
    a, b = runner_for(one, "A"), runner_for(two, "B")
    try:
        a.tick()
        b.tick()
        assert (a.is_leader, b.is_leader) == (True, False)
        one.clock.advance(14 * 3600 - 30)  # 01:59:30; the leader renews well within its 60 s lease
        a.tick()
        b.tick()
        one.clock.advance(35)  # 02:00:05
        b.tick()
        a.tick()
        b.tick()
        assert len(launched(one)) == 1
        assert two.backend.created == [] and len(one.backend.created) == 1  # only the leader fired
        finish(one, one.store.get_lineage(launched(one)[0]), {})
        # A crashes (no shutdown, no renewal); after the lease runs out B takes over and fires the next night.
        one.clock.advance(61)
        b.tick()
        assert b.is_leader and b.lease.current_holder() == "B"
        one.clock.advance(86400)
        b.tick()
        assert len(launched(one)) == 2
    finally:
        b.shutdown()


_CHILD = """
import json, sys
from datetime import datetime, timezone
from bot.scheduler import LeaderLease, SchedulerRunner
from tests.support.clock import FakeClock
from jobs.settings import Settings
from tests.jobs.test_schedules import make_world
world = make_world(sys.argv[1], FakeClock(datetime(2026, 3, 2, 2, 0, 5, tzinfo=timezone.utc)))
runner = SchedulerRunner(Settings(), world.schedules, world.clock, autorun=False, inline=True,
                         lease=LeaderLease(world.store.engine, world.clock, holder=sys.argv[2]))
runner.start()
sys.stdin.readline()  # both processes start their cycles together
leader = [runner.tick() is not None and runner.is_leader for _ in range(3)]
runner.shutdown()
print(json.dumps({"leader": any(leader), "created": world.backend.created}))
"""


def test_two_os_processes_on_one_database_fire_once(db: str) -> None:
    world = make_world(db)
    world.schedules.add("nightly", "0 2 * * *", "UTC", TRAIN, actor=ALICE, channel=None)
    runner = runner_for(world, "setup")  # stores the job's next run (02:00) as a running bot would have
    runner.tick()
    runner.shutdown()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [subprocess.Popen([sys.executable, "-c", _CHILD, db, f"proc-{i}"], cwd=ROOT, env=env,
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(2)]
    outputs = [child.communicate("go\n", timeout=60) for child in children]
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    assert [c.returncode for c in children] == [0, 0], [err for _, err in outputs]
    assert sum(len(r["created"]) for r in results) == 1
    assert len(launched(world)) == 1


# -- the real background thread ---------------------------------------------------------------------------


def test_the_background_thread_fires_a_due_schedule(db: str) -> None:
    world = make_world(db, FakeClock(utc(2026, 3, 2, 1, 59, 59)))
    world.schedules.add("nightly", "0 2 * * *", "UTC", TRAIN, actor=ALICE, channel=None)
    fired = threading.Event()
    world.backend.on_launch = lambda name: fired.set()
    runner = SchedulerRunner(Settings(), world.schedules, world.clock, renew_seconds=0.05,
                             lease=LeaderLease(world.store.engine, world.clock, holder="T"))
    runner.start()
    try:
        world.clock.advance(2)
        assert fired.wait(15)
    finally:
        runner.shutdown()
    assert len(launched(world)) == 1


# -- the schema at start ------------------------------------------------------------------------------------


def test_every_table_is_made_before_any_thread_starts_so_a_busy_store_never_refuses_a_start(tmp_path: Path) -> None:
    """Reproduces bug 3 of issue 21: `trainbot console` died at start, about 1 in 3 on a store where a
    CLI-launched job had ended, with "database is locked [SQL: CREATE TABLE apscheduler_jobs ...]":
    APScheduler made its job table from the scheduler's start, after the watcher thread had begun writing,
    and SQLite refuses a schema change in a transaction whose snapshot another writer moved on. Here the
    other writer commits exactly between APScheduler's check for its table and its CREATE TABLE."""
    from sqlalchemy import event, inspect

    from bot.wiring import build_runtime
    from jobs.store.store import Store
    from tests.jobs.fakes import ScriptedBackend

    settings = Settings(trainbot_home=tmp_path)
    clock = FakeClock(utc(2026, 3, 1, 9))
    runtime = build_runtime(settings, clock=clock, backend=ScriptedBackend(clock=clock))
    assert inspect(runtime.store.engine).has_table("apscheduler_jobs")  # made with the migrations
    other = Store(settings.database_url, clock=clock)  # the watcher thread, writing

    def write_meanwhile(conn: object, cursor: object, statement: str, *rest: object) -> None:
        if statement.lstrip().upper().startswith("CREATE TABLE APSCHEDULER_JOBS"):
            other.set_meta("watcher.cursor.fake", clock.now().isoformat())

    event.listen(runtime.store.engine, "before_cursor_execute", write_meanwhile)
    runner = SchedulerRunner(runtime.settings, runtime.schedules, clock, autorun=False, inline=True)
    try:
        runner.start()
        runner.tick()
    finally:
        runner.shutdown()
        other.dispose()
        runtime.shutdown()

"""Runs the schedules: APScheduler 3 (BackgroundScheduler, SQLAlchemy job store on the project's database,
CronTrigger in the schedule's time zone) behind a leader lease, so one process of many fires them.

APScheduler reads the wall clock itself; to keep the fire decisions on the injected Clock (deterministic
tests, no sleeping), the scheduler's job-processing step is ours: it asks APScheduler's job store for due
jobs at ``clock.now()`` and honours each job's ``coalesce``, ``misfire_grace_time`` and ``max_instances``.
APScheduler keeps the jobs' next run times in the database, which is what makes a run missed while the bot
was down run once on return (coalesced) when it is within the grace period.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.base import STATE_PAUSED
from apscheduler.triggers.cron import CronTrigger
from sqlalchemy import Engine, Table, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from jobs.clock import Clock
from jobs.errors import ScheduleError
from jobs.schedules.service import ScheduleService
from jobs.settings import Settings
from jobs.store.schema import scheduler_lease, write_transaction

if TYPE_CHECKING:
    from jobs.lifecycle.service import JobService
    from jobs.store.store import Store

log = logging.getLogger(__name__)

JOB_TABLE = "apscheduler_jobs"
JOB_PREFIX = "schedule:"
#: A run missed while no scheduler was up still runs (once) when one returns within this many seconds.
LEASE_SECONDS = 60.0  # a crashed leader is taken over this long after its last renewal (the default)
RENEW_SECONDS = 15.0  # each cycle renews the lease and re-reads the schedules table
FIRE_WORKERS = 2


# ---------------------------------------------------------------- cron arithmetic


class CronSchedule(CronTrigger):
    """CronTrigger that fires once on the autumn DST day: a fixed-hour schedule skips the second,
    repeated occurrence of its wall time (02:30 happens twice in Europe/Berlin on fall-back night).
    Spring-forward: a time that does not exist that night fires once, an hour later on the wall clock."""

    def get_next_fire_time(self, previous_fire_time: datetime | None, now: datetime) -> datetime | None:
        fire: datetime | None = super().get_next_fire_time(previous_fire_time, now)
        if fire is None:
            return None
        local = fire.astimezone(timezone.utc).astimezone(self.timezone)  # normalise a non-existent time
        if local.fold == 1 and not self._hour_is_wildcard() and _wall_time_repeats(local):
            return self.get_next_fire_time(None, fire.astimezone(timezone.utc) + timedelta(seconds=1))
        return local

    def _hour_is_wildcard(self) -> bool:
        hour = next(f for f in self.fields if f.name == "hour")
        return str(hour) == "*"


def _wall_time_repeats(local: datetime) -> bool:
    first = local.replace(fold=0)
    return first.utcoffset() != local.utcoffset()


def cron_trigger(cron: str, tz: str) -> CronSchedule:
    """The trigger for a schedule; ScheduleError (one sentence) for a bad expression or zone."""
    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"{tz!r} is not a time zone: use an IANA name such as Europe/Berlin, America/New_York or UTC."
        ) from None
    try:
        return CronSchedule.from_crontab(cron, timezone=zone)
    except (ValueError, TypeError) as error:
        raise ScheduleError(
            f"cron={cron!r} is not a cron expression ({error}): write five fields, minute hour day month "
            'weekday, e.g. cron="0 2 * * *" for 02:00 every night.'
        ) from None


class ApsCronCalendar:
    """The CronCalendar port (jobs/schedules/cron.py), on APScheduler's CronTrigger."""

    def validate(self, cron: str, tz: str) -> None:
        cron_trigger(cron, tz)

    def next_fire(self, cron: str, tz: str, after: datetime) -> datetime | None:
        fire = cron_trigger(cron, tz).get_next_fire_time(None, after.astimezone(timezone.utc) + timedelta(
            microseconds=1))
        return fire.astimezone(timezone.utc) if fire else None


# ---------------------------------------------------------------- leader lease


class LeaderLease:
    """A lease row in the database: whoever holds an unexpired lease runs the schedules.

    Taking and renewing are one guarded UPDATE (holder is me, or the lease expired), so on SQLite and
    PostgreSQL alike two processes never both hold it; an INSERT race on the first take is settled by the
    primary key."""

    def __init__(self, engine: Engine, clock: Clock, *, holder: str | None = None, name: str = "scheduler",
                 ttl_seconds: float = LEASE_SECONDS) -> None:
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._engine = engine
        self._clock = clock
        self._name = name
        self._ttl = ttl_seconds

    def acquire(self) -> bool:
        """Take or renew the lease; True while this process is the leader."""
        now = self._clock.now().timestamp()
        table = scheduler_lease
        with self._begin() as conn:
            taken = conn.execute(update(table).where(
                table.c.name == self._name, or_(table.c.holder == self.holder, table.c.expires_at < now),
            ).values(holder=self.holder, expires_at=now + self._ttl)).rowcount == 1
            if taken:
                return True
        try:
            with self._begin() as conn:
                conn.execute(insert(table).values(name=self._name, holder=self.holder, expires_at=now + self._ttl))
        except IntegrityError:
            return False  # someone else holds it
        return True

    def release(self) -> None:
        """Let a successor take over at once (a clean shutdown)."""
        with self._begin() as conn:
            conn.execute(update(scheduler_lease).where(
                scheduler_lease.c.name == self._name, scheduler_lease.c.holder == self.holder,
            ).values(expires_at=0.0))

    def current_holder(self) -> str | None:
        with self._engine.connect() as conn:
            row = conn.execute(select(scheduler_lease).where(scheduler_lease.c.name == self._name)).first()
        if row is None or row.expires_at < self._clock.now().timestamp():
            return None
        return str(row.holder)

    def _begin(self) -> Any:
        return write_transaction(self._engine)


# ---------------------------------------------------------------- the runner


def scheduled_run(name: str, cron: str, tz: str) -> None:
    """The job's textual function reference in APScheduler's table. The runner fires jobs itself, with the
    service it was given; stock APScheduler code reaching this means the runner was bypassed."""
    log.error("schedule %s fired outside SchedulerRunner; ignored", name)


class _ClockedScheduler(BackgroundScheduler):
    """BackgroundScheduler whose job-processing step is the runner's cycle (thread, wakeups and job
    store stay APScheduler's)."""

    def __init__(self, cycle: Any, **options: Any) -> None:
        self._cycle = cycle
        super().__init__(**options)

    def _process_jobs(self) -> float | None:
        if self.state == STATE_PAUSED:
            return None
        result: float | None = self._cycle()
        return result


class SchedulerRunner:
    def __init__(self, settings: Settings, schedules: ScheduleService, clock: Clock, *,
                 lease: LeaderLease | None = None, autorun: bool = True, inline: bool = False,
                 misfire_grace_seconds: float | None = None, renew_seconds: float = RENEW_SECONDS) -> None:
        """``autorun=False`` starts APScheduler paused: cycles run only when ``tick()`` is called (tests).
        ``inline=True`` fires in the cycle's thread instead of a worker pool (tests)."""
        self._schedules = schedules
        self._clock = clock
        self._autorun = autorun
        self._inline = inline
        # Renewed four times a lease: a leader that misses a renewal or two (a slow database) keeps it.
        ttl = settings.trainbot_scheduler_lease_seconds
        self._renew = min(renew_seconds, ttl / 4)
        grace = misfire_grace_seconds
        if grace is None:
            grace = settings.trainbot_schedule_grace_seconds
        self._defaults = {"coalesce": True, "max_instances": 1, "misfire_grace_time": int(grace)}
        self.lease = lease or LeaderLease(schedules.engine, clock, ttl_seconds=ttl)
        self._jobstore = SQLAlchemyJobStore(engine=schedules.engine, tablename=JOB_TABLE)
        self._scheduler = _ClockedScheduler(
            self._cycle_safely, timezone=timezone.utc, jobstores={"default": self._jobstore},
            job_defaults=self._defaults,
        )
        self._lock = threading.RLock()
        self._running: set[str] = set()
        self._pool = ThreadPoolExecutor(FIRE_WORKERS, thread_name_prefix="trainbot-schedule")
        self.is_leader = False

    def start(self) -> None:
        self._schedules.subscribe(self._on_change)
        self._scheduler.start(paused=not self._autorun)
        log.info("scheduler started as %s", self.lease.holder)

    def shutdown(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)
        self._pool.shutdown(wait=True)
        with self._lock:
            if self.is_leader:
                self.lease.release()
                self.is_leader = False

    def tick(self) -> float:
        """One cycle: take or renew the lease; as leader, sync jobs with the schedules table, fire what is
        due and start queued runs. Returns the seconds until the next cycle is needed."""
        with self._lock:
            self.is_leader = self.lease.acquire()
            if not self.is_leader:
                return self._renew
            self._sync()
            self._fire_due(self._clock.now())
            self._schedules.release_queued()
            return self._wait_seconds()

    def jobs(self) -> dict[str, datetime | None]:
        """Schedule name -> APScheduler's next run time (for checks and `list`)."""
        return {job.args[0]: job.next_run_time for job in self._jobstore.get_all_jobs()}

    # -- inside a cycle -----------------------------------------------------------------------------

    def _cycle_safely(self) -> float:
        try:
            return self.tick()
        except Exception:  # the database may be briefly unreachable: never let the thread die
            log.exception("scheduler cycle failed; retrying in %.0f s", self._renew)
            return self._renew

    def _sync(self) -> None:
        """Make APScheduler's jobs match the schedules table (added, removed, paused, changed).
        A job that is already right is left alone: its stored next run time is what catches up missed runs."""
        wanted = {JOB_PREFIX + s.name: s for s in self._schedules.list_raw() if not s.paused}
        existing = {job.id: job for job in self._jobstore.get_all_jobs()}
        for job_id in existing.keys() - wanted.keys():
            self._jobstore.remove_job(job_id)
        for job_id, schedule in wanted.items():
            args = (schedule.name, schedule.cron, schedule.tz)
            job = existing.get(job_id)
            if job is not None and tuple(job.args) == args:
                if any(getattr(job, key) != value for key, value in self._defaults.items()):
                    # Settings changed (e.g. the grace period): keep the stored next run time.
                    self._scheduler.modify_job(job_id, jobstore="default", **self._defaults)
                continue
            trigger = cron_trigger(schedule.cron, schedule.tz)
            # From when the schedule was added or resumed, not from now: a run that fell due before this
            # process saw the schedule still runs (within the grace period), and a pause is not caught up.
            first = trigger.get_next_fire_time(None, schedule.updated_at)
            self._scheduler.add_job(scheduled_run, trigger=trigger, args=args, id=job_id, name=schedule.name,
                                    jobstore="default", replace_existing=True, next_run_time=first,
                                    **self._defaults)

    def _fire_due(self, now: datetime) -> None:
        for job in self._jobstore.get_due_jobs(now):
            run_times = job._get_run_times(now)
            if job.coalesce:
                run_times = run_times[-1:]
            grace = job.misfire_grace_time
            on_time = [t for t in run_times if grace is None or (now - t).total_seconds() <= grace]
            for missed in set(run_times) - set(on_time):
                log.warning("schedule %s: the run due %s was missed by more than %s s", job.name, missed, grace)
            # Advance before firing: a crash mid-launch loses at most this run, never repeats it.
            next_run = job.trigger.get_next_fire_time(run_times[-1] if run_times else None, now)
            if next_run is None:
                self._jobstore.remove_job(job.id)
            else:
                job._modify(next_run_time=next_run)
                self._jobstore.update_job(job)
            for run_time in on_time:
                self._submit(job.args[0], run_time, job.max_instances)

    def _submit(self, name: str, run_time: datetime, max_instances: int) -> None:
        if name in self._running and max_instances <= 1:
            log.warning("schedule %s: still launching the previous run; %s skipped", name, run_time)
            return
        self._running.add(name)
        if self._inline:
            self._fire(name, run_time)
        else:
            self._pool.submit(self._fire, name, run_time)

    def _fire(self, name: str, run_time: datetime) -> None:
        try:
            result = self._schedules.fire(name, run_time)
            log.info("schedule %s (%s): %s %s", name, run_time, result.outcome, result.note)
        except Exception:
            log.exception("schedule %s: firing the run due %s failed", name, run_time)
        finally:
            self._running.discard(name)

    def _wait_seconds(self) -> float:
        next_run = self._jobstore.get_next_run_time()
        if next_run is None:
            return self._renew
        until = (next_run - self._clock.now()).total_seconds()
        return max(0.0, min(self._renew, until))

    def _on_change(self, name: str) -> None:
        # Another thread changed a schedule: resync now (if leader) instead of waiting for the next cycle.
        if self._autorun and self._scheduler.running:
            self._scheduler.wakeup()


def scheduler_tables(engine: Engine) -> list[Table]:
    """APScheduler's job table, as its SQLAlchemyJobStore declares it (building the store connects nothing):
    bot/wiring.py has the store create it with the migrations, before any thread starts."""
    return [SQLAlchemyJobStore(engine=engine, tablename=JOB_TABLE).jobs_t]


def build_schedule_service(store: Store, jobs: JobService, settings: Settings, clock: Clock) -> ScheduleService:
    """For bot/wiring.py: the schedules on the store, with the APScheduler calendar."""
    return ScheduleService(store=store, jobs=jobs, calendar=ApsCronCalendar(), settings=settings, clock=clock)

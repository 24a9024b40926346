"""Nightly retrains: schedules, their runs, and how each run compares with the previous one.

Each run is an ordinary lineage launched through JobService (budget, permissions, spot recovery, reports
all apply) and recorded with ``schedule=NAME``. Cron and time-zone arithmetic come in through the
``CronCalendar`` port (APScheduler's CronTrigger in bot/scheduler.py); this module imports no scheduler.

Exactly-once: every run claims a row keyed by (schedule, slot) before it launches, so two processes, or a
leader that lost its lease mid-fire, never start the same nightly run twice.

The tables and records are in jobs/schedules/store.py, the `/schedule add` text in jobs/schedules/text.py,
the port in jobs/schedules/cron.py and the run-to-run comparison in jobs/comparison.py; this module is the
service that uses them.
"""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from sqlalchemy import Connection, Engine, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from jobs.clock import Clock
from jobs.comparison import DEFAULT_REGRESSION_POINTS, Comparison, compare_runs, final_metrics
from jobs.errors import InvalidState, NotFound, PermissionDenied, ScheduleError, TrainbotError
from jobs.lifecycle.service import JobService
from jobs.lineage import Lineage, LineageStatus
from jobs.permissions import AccessPolicy
from jobs.records import Actor
from jobs.schedules.cron import CronCalendar
from jobs.schedules.limits import check_cadence, check_count
from jobs.schedules.store import FireResult, Schedule, ScheduleRun, run_from_row, schedule_from_row
from jobs.schedules.text import (
    DEFAULT_TZ,
    check_endpoint_task,
    check_name,
    check_overlap,
    endpoint_missing_words,
    endpoint_words,
    parse_add_text,
)
from jobs.settings import Settings
from jobs.store.schema import schedule_runs, schedules_table, write_transaction
from jobs.store.store import Store

log = logging.getLogger(__name__)

NOTIFY_KIND = "schedule"  # outbox kind; payload carries `text` like every event


# ---------------------------------------------------------------- the service


#: The live endpoints and the task each serves, by name (the endpoints room, passed in: schedules import none).
EndpointTasks = Callable[[], Mapping[str, str]]


class ScheduleService:
    def __init__(self, *, store: Store, jobs: JobService, calendar: CronCalendar, settings: Settings,
                 clock: Clock, endpoint_tasks: EndpointTasks | None = None) -> None:
        self.store = store
        self.calendar = calendar
        self._jobs = jobs
        self._settings = settings
        self._clock = clock
        self._policy = AccessPolicy.from_settings(settings)
        self._listeners: list[Callable[[str], None]] = []
        self.endpoint_tasks = endpoint_tasks

    @property
    def engine(self) -> Engine:
        return self.store.engine

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Called with a schedule's name after add/pause/resume/remove (the scheduler re-syncs)."""
        self._listeners.append(listener)

    # -- managing schedules -----------------------------------------------------------------------

    def add_from_text(self, name: str, text: str, *, actor: Actor, channel: str | None) -> Schedule:
        """``NAME`` and ``cron=... [tz=...] [options] <train args>`` (the CLI's and Slack's form)."""
        request = parse_add_text(text)
        return self.add(name, request.cron, request.tz, request.train_text, actor=actor, channel=channel,
                        overlap=request.overlap, regression_points=request.regression_points,
                        deploy_if_better=request.deploy_if_better, endpoint=request.endpoint)

    def add(self, name: str, cron: str, tz: str | None, text: str, *, actor: Actor, channel: str | None,
            overlap: str = "skip", regression_points: float = DEFAULT_REGRESSION_POINTS,
            deploy_if_better: bool = False, endpoint: str | None = None) -> Schedule:
        """Validate everything now (not at 2 a.m.) and store the schedule."""
        check_name(name)
        if deploy_if_better and not endpoint:
            raise ScheduleError("deploy_if_better=yes needs the endpoint to promote into: add endpoint=NAME.")
        tz = tz or DEFAULT_TZ
        self.calendar.validate(cron, tz)
        if self.calendar.next_fire(cron, tz, self._clock.now()) is None:
            raise ScheduleError(f"cron={cron!r} never fires (no such date): check the day and month fields.")
        check_cadence(self.calendar, cron, tz, self._clock.now(), self._settings.trainbot_min_schedule_minutes)
        # As a run will read it (recipes, own code allowed), but no git: a REF is resolved afresh at each
        # run, and asking the git host here could outlast a chat's 3-second acknowledgement.
        spec = self._jobs.check(text)
        self._policy.check_can_use(actor)
        if endpoint is not None:
            check_endpoint_task(endpoint, spec.task, self._live_endpoints())
        now = self._clock.now()
        values = dict(name=name, cron=cron, tz=tz, text=text, channel=channel, created_by=actor.user_id,
                      via=actor.via, paused=False, overlap=check_overlap(overlap), regression_points=regression_points,
                      deploy_if_better=deploy_if_better, endpoint=endpoint, train_data=spec.train_data,
                      dataset_revision=spec.dataset_revision, queued_for=None, created_at=now, updated_at=now)
        try:
            with write_transaction(self.engine) as conn:
                check_count(self._count_by(conn, actor.user_id), self._settings.trainbot_max_schedules_per_user)
                conn.execute(insert(schedules_table).values(**values))
        except IntegrityError:
            raise ScheduleError(
                f"A schedule named {name!r} exists already: remove it first or pick another name."
            ) from None
        self.store.audit(actor, "schedule.add", name, {"cron": cron, "tz": tz, "text": text, "endpoint": endpoint,
                                                       "deploy_if_better": deploy_if_better})
        self._changed(name)
        return self.get(name)

    def endpoint_warning(self, schedule: Schedule) -> str | None:
        """The sentence a schedule is added with when its endpoint does not exist yet: its runs are offered to
        it only once someone deploys one of them there."""
        if not schedule.endpoint or self.endpoint_tasks is None or schedule.endpoint in self._live_endpoints():
            return None
        return endpoint_missing_words(schedule.name, schedule.endpoint, list(self._live_endpoints()))

    def _live_endpoints(self) -> Mapping[str, str]:
        return self.endpoint_tasks() if self.endpoint_tasks is not None else {}

    def _count_by(self, conn: Connection, user_id: str) -> int:
        query = select(func.count()).select_from(schedules_table).where(schedules_table.c.created_by == user_id)
        return int(conn.execute(query).scalar_one())

    def get(self, name: str) -> Schedule:
        with self.engine.connect() as conn:
            row = conn.execute(select(schedules_table).where(schedules_table.c.name == name)).first()
        if row is None:
            raise NotFound(f"There is no schedule named {name!r}; `/schedule list` shows them.")
        return self._decorate(schedule_from_row(row))

    def list(self) -> builtins.list[Schedule]:
        return [self._decorate(s) for s in self.list_raw()]

    def list_raw(self) -> builtins.list[Schedule]:
        """The rows alone, without next run or last result (the scheduler's sync reads these)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(schedules_table).order_by(schedules_table.c.name)).all()
        return [schedule_from_row(r) for r in rows]

    def render_list(self) -> str:
        schedules = self.list()
        if not schedules:
            return 'No schedules yet: /schedule add NAME cron="0 2 * * *" <train arguments>.'
        return "\n".join(
            f"{s.name}  cron={s.cron!r} tz={s.tz}{endpoint_words(s)}  next: {s.next_run_text()}  "
            f"last: {s.last_result or 'none yet'}"
            for s in schedules
        )

    def pause(self, name: str, *, actor: Actor | None = None) -> Schedule:
        return self._set_paused(name, True, actor)

    def resume(self, name: str, *, actor: Actor | None = None) -> Schedule:
        return self._set_paused(name, False, actor)

    def remove(self, name: str, *, actor: Actor | None = None) -> None:
        self._check_manage(self.get(name), actor)
        with write_transaction(self.engine) as conn:
            conn.execute(delete(schedules_table).where(schedules_table.c.name == name))
            conn.execute(delete(schedule_runs).where(schedule_runs.c.schedule == name))
        self.store.audit(actor, "schedule.remove", name)
        self._changed(name)

    def runs(self, name: str, *, limit: int = 10) -> builtins.list[ScheduleRun]:
        """Newest first."""
        query = (select(schedule_runs).where(schedule_runs.c.schedule == name)
                 .order_by(schedule_runs.c.id.desc()).limit(limit))
        with self.engine.connect() as conn:
            return [run_from_row(r) for r in conn.execute(query)]

    # -- running ----------------------------------------------------------------------------------

    def run_now(self, name: str, *, actor: Actor) -> Lineage:
        """Launch the schedule's job now, for `actor`; refused while its previous run is still going."""
        schedule = self.get(name)
        active = self._active(name)
        if active is not None:
            raise InvalidState(
                f"{name}'s previous run {active.id} is still {active.status.value}: wait for it or stop it first."
            )
        slot = f"manual:{uuid.uuid4().hex[:12]}"
        self._claim(name, slot, self._clock.now())
        try:
            lineage = self._launch(schedule, actor, slot)
        except TrainbotError as error:
            self._finish(schedule, slot, "failed", note=error.user_message())
            raise
        self._finish(schedule, slot, "launched", lineage=lineage)
        return lineage

    def fire(self, name: str, scheduled_for: datetime) -> FireResult:
        """One cron run (called by the scheduler). Never raises for a refused launch: it records it."""
        try:
            schedule = self.get(name)
        except NotFound:
            return FireResult(name, "missing")
        if schedule.paused:
            return FireResult(name, "paused")
        scheduled_for = scheduled_for.astimezone(timezone.utc)  # one slot name whatever zone it came in
        if self._too_soon(name, scheduled_for):
            return FireResult(name, "skipped", note="too soon after its previous run (TRAINBOT_MIN_SCHEDULE_MINUTES)")
        slot = f"cron:{scheduled_for.isoformat()}"
        if not self._claim(name, slot, scheduled_for):
            return FireResult(name, "duplicate", note="another process ran this slot")
        return self._run_claimed(schedule, slot, scheduled_for)

    def _too_soon(self, name: str, scheduled_for: datetime) -> bool:
        """A cron run within TRAINBOT_MIN_SCHEDULE_MINUTES of the one before (a schedule stored before the
        minimum was checked at add time): not run, and not recorded either, so it cannot fill the store."""
        minimum = timedelta(minutes=self._settings.trainbot_min_schedule_minutes)
        if not minimum:
            return False
        query = select(schedule_runs.c.id).where(
            schedule_runs.c.schedule == name, schedule_runs.c.slot.like("cron:%"),
            schedule_runs.c.scheduled_for > scheduled_for - minimum, schedule_runs.c.scheduled_for < scheduled_for,
        ).limit(1)
        with self.engine.connect() as conn:
            return conn.execute(query).first() is not None

    def release_queued(self) -> builtins.list[FireResult]:
        """Start queued runs whose previous run has ended (the scheduler calls this each cycle)."""
        results = []
        for schedule in self.list_raw():
            if schedule.queued_for is None or schedule.paused or self._active(schedule.name) is not None:
                continue
            with write_transaction(self.engine) as conn:  # guarded: only one process takes the queued run
                taken = conn.execute(update(schedules_table).where(
                    schedules_table.c.name == schedule.name, schedules_table.c.queued_for == schedule.queued_for,
                ).values(queued_for=None)).rowcount == 1
            slot = f"queued:{schedule.queued_for.isoformat()}"
            if taken and self._claim(schedule.name, slot, schedule.queued_for):
                results.append(self._run_claimed(schedule, slot, schedule.queued_for))
        return results

    def _run_claimed(self, schedule: Schedule, slot: str, scheduled_for: datetime) -> FireResult:
        active = self._active(schedule.name)
        if active is not None:
            return self._overlapping(schedule, slot, scheduled_for, active)
        try:
            lineage = self._launch(schedule, schedule_actor(schedule), slot)
        except TrainbotError as error:
            log.warning("schedule %s: launch refused: %s", schedule.name, error.user_message())
            self._finish(schedule, slot, "failed", note=error.user_message())
            return FireResult(schedule.name, "failed", note=error.user_message())
        self._finish(schedule, slot, "launched", lineage=lineage)
        return FireResult(schedule.name, "launched", lineage=lineage)

    def _overlapping(self, schedule: Schedule, slot: str, scheduled_for: datetime, active: Lineage) -> FireResult:
        if schedule.overlap == "queue":
            with write_transaction(self.engine) as conn:
                conn.execute(update(schedules_table).where(schedules_table.c.name == schedule.name)
                             .values(queued_for=scheduled_for, updated_at=self._clock.now()))
            note = f"queued until the previous run {active.id} ends"
            self._finish(schedule, slot, "queued", note=note)
            return FireResult(schedule.name, "queued", note=note)
        note = f"the previous run {active.id} is still {active.status.value}"
        self._finish(schedule, slot, "skipped", note=note)
        return FireResult(schedule.name, "skipped", note=note)

    def _launch(self, schedule: Schedule, actor: Actor, slot: str) -> Lineage:
        # The request id makes JobService itself refuse a second launch of one slot.
        return self._jobs.launch(schedule.text, actor=actor, request_id=f"schedule:{schedule.name}:{slot}",
                                 schedule=schedule.name)

    def _claim(self, name: str, slot: str, scheduled_for: datetime) -> bool:
        try:
            with write_transaction(self.engine) as conn:
                conn.execute(insert(schedule_runs).values(
                    schedule=name, slot=slot, scheduled_for=scheduled_for, outcome="claimed", note="",
                    created_at=self._clock.now()))
        except IntegrityError:
            return False
        return True

    def _finish(self, schedule: Schedule, slot: str, outcome: str, *, lineage: Lineage | None = None,
                note: str = "") -> None:
        with write_transaction(self.engine) as conn:
            conn.execute(update(schedule_runs).where(
                schedule_runs.c.schedule == schedule.name, schedule_runs.c.slot == slot,
            ).values(outcome=outcome, note=note, lineage_id=lineage.id if lineage else None))
        self._notify(schedule, slot, outcome, lineage, note)

    def _notify(self, schedule: Schedule, slot: str, outcome: str, lineage: Lineage | None, note: str) -> None:
        """A line in the schedule's channel through the outbox (a chat outage delays it, never drops it)."""
        if schedule.channel is None:
            return
        if lineage is not None:
            text = f"Schedule {schedule.name} launched {lineage.id} (trained on {schedule.data_text()})."
        else:
            text = f"Schedule {schedule.name} {outcome}: {note.rstrip('.')}."
        payload = {"kind": NOTIFY_KIND, "event": outcome, "schedule": schedule.name, "text": text,
                   "lineage_id": lineage.id if lineage else None, "job_name": None}
        self.store.outbox.enqueue(kind=NOTIFY_KIND, payload=payload, dedup_key=f"schedule:{schedule.name}:{slot}:{outcome}",
                           lineage_id=lineage.id if lineage else None, channel=schedule.channel)

    def _active(self, name: str) -> Lineage | None:
        running = self.store.list_lineages(active_only=True, schedule=name, limit=1)
        return running[0] if running else None

    # -- comparison -------------------------------------------------------------------------------

    def compare_with_previous(self, lineage: Lineage) -> Comparison | None:
        """This run's final metrics against the previous successful run of the same schedule;
        None for an unscheduled lineage, a first run, or no metrics in common."""
        if lineage.schedule is None:
            return None
        previous = self._previous_success(lineage)
        if previous is None:
            return None
        threshold, deploy = self._comparison_options(lineage.schedule)
        return compare_runs(lineage.schedule, lineage, previous, threshold=threshold, deploy_if_better=deploy)

    def find(self, name: str) -> Schedule | None:
        """The schedule's row (None once removed), without next run or last result."""
        with self.engine.connect() as conn:
            row = conn.execute(select(schedules_table).where(schedules_table.c.name == name)).first()
        return None if row is None else schedule_from_row(row)

    def _previous_success(self, lineage: Lineage) -> Lineage | None:
        for other in self.store.list_lineages(schedule=lineage.schedule, limit=200):
            if (other.id != lineage.id and other.status is LineageStatus.COMPLETED
                    and (other.created_at, other.id) < (lineage.created_at, lineage.id)):
                return other
        return None

    def _comparison_options(self, name: str) -> tuple[float, bool]:
        try:
            schedule = self.get(name)
        except NotFound:  # removed since: compare with the defaults
            return DEFAULT_REGRESSION_POINTS, False
        return schedule.regression_points, schedule.deploy_if_better

    # -- helpers ----------------------------------------------------------------------------------

    def _set_paused(self, name: str, paused: bool, actor: Actor | None) -> Schedule:
        self._check_manage(self.get(name), actor)
        with write_transaction(self.engine) as conn:
            conn.execute(update(schedules_table).where(schedules_table.c.name == name)
                         .values(paused=paused, queued_for=None, updated_at=self._clock.now()))
        self.store.audit(actor, "schedule.pause" if paused else "schedule.resume", name)
        self._changed(name)
        return self.get(name)

    def _check_manage(self, schedule: Schedule, actor: Actor | None) -> None:
        # The CLI passes no actor: a terminal on the bot's host is trusted like an admin.
        if actor is None or actor.user_id == schedule.created_by or self._policy.is_admin(actor):
            return
        raise PermissionDenied(
            f"Only {schedule.created_by}, who added schedule {schedule.name}, or an admin may change it; ask one of them."
        )

    def _changed(self, name: str) -> None:
        for listener in self._listeners:
            try:
                listener(name)
            except Exception:  # the table is the truth; the scheduler re-syncs on its next cycle anyway
                log.exception("schedule listener failed for %s", name)

    def _decorate(self, schedule: Schedule) -> Schedule:
        nxt = None if schedule.paused else self.calendar.next_fire(schedule.cron, schedule.tz, self._clock.now())
        runs = self.runs(schedule.name, limit=1)
        last = runs[0] if runs else None
        return replace(schedule, next_run=nxt, last_run=last, last_result=self._result_text(last))

    def _result_text(self, run: ScheduleRun | None) -> str:
        if run is None:
            return ""
        if run.lineage_id is None:
            return f"{run.outcome}" + (f": {run.note}" if run.note else "")
        try:
            lineage = self.store.get_lineage(run.lineage_id)
        except NotFound:
            return f"{run.outcome} ({run.lineage_id})"
        metrics = ", ".join(f"{k}={v:g}" for k, v in sorted(final_metrics(lineage).items())[:3])
        return f"{lineage.status.value} ({lineage.id})" + (f": {metrics}" if metrics else "")


def schedule_actor(schedule: Schedule) -> Actor:
    # A cron run acts for the person who added the schedule: their permissions and budget apply.
    return Actor(user_id=schedule.created_by, channel_id=schedule.channel, via="schedule",
                 display=f"schedule {schedule.name}")

"""Nightly retrains: schedules, their runs, and how each run compares with the previous one.

Each run is an ordinary lineage launched through JobService (budget, permissions, spot recovery, reports
all apply) and recorded with ``schedule=NAME``. Cron and time-zone arithmetic come in through the
``CronCalendar`` port (APScheduler's CronTrigger in bot/scheduler.py); this module imports no scheduler.

Exactly-once: every run claims a row keyed by (schedule, slot) before it launches, so two processes, or a
leader that lost its lease mid-fire, never start the same nightly run twice.
"""

from __future__ import annotations

import builtins
import logging
import re
import shlex
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Protocol

from sqlalchemy import (
    Boolean,
    Column,
    Connection,
    Engine,
    Float,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
    delete,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError

from jobs.clock import Clock
from jobs.errors import InvalidState, NotFound, PermissionDenied, ScheduleError, TrainbotError
from jobs.grammar import normalize_slack_text, parse_command
from jobs.permissions import AccessPolicy
from jobs.records import Actor, AttemptStatus, LineageStatus
from jobs.service import JobService
from jobs.settings import Settings
from jobs.store import Lineage, Store
from jobs.store_schema import UTCDateTime, metadata, register_migration

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}", re.ASCII)
DEFAULT_TZ = "UTC"
#: A run is flagged when EM, F1 or accuracy drops by more than this many points (0-100 scale).
DEFAULT_REGRESSION_POINTS = 1.0
OVERLAP_CHOICES = ("skip", "queue")
# Metrics where higher is better and a drop is a regression; compared on a 0-100 scale.
QUALITY_METRICS = {"exact_match", "exact", "em", "f1", "accuracy", "acc"}
_METRIC_PREFIXES = ("eval_", "test_", "final_", "validation_")
# Keys of `/schedule add` that belong to the schedule; everything else is a /train argument.
_SCHEDULE_KEYS = {
    "cron": "cron", "tz": "tz", "timezone": "tz", "overlap": "overlap",
    "regression_threshold": "threshold", "threshold": "threshold", "deploy_if_better": "deploy_if_better",
}
NOTIFY_KIND = "schedule"  # outbox kind; payload carries `text` like every event

# ---------------------------------------------------------------- tables (schema version 9)

schedules_table = Table(
    "schedules", metadata,
    Column("name", String(64), primary_key=True),
    Column("cron", String(120), nullable=False),
    Column("tz", String(64), nullable=False),
    Column("text", Text, nullable=False),  # the /train arguments, as validated at add time
    Column("channel", String(64)),
    Column("created_by", String(64), nullable=False),
    Column("via", String(32), nullable=False),
    Column("paused", Boolean, nullable=False, default=False),
    Column("overlap", String(16), nullable=False, default="skip"),
    Column("regression_points", Float, nullable=False, default=DEFAULT_REGRESSION_POINTS),
    Column("deploy_if_better", Boolean, nullable=False, default=False),
    Column("train_data", Text),
    Column("dataset_revision", String(255)),
    Column("queued_for", UTCDateTime),  # a run that waits for the previous one to end (overlap=queue)
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

schedule_runs = Table(
    "schedule_runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("schedule", String(64), nullable=False),
    Column("slot", String(128), nullable=False),  # cron:<iso>, queued:<iso> or manual:<uuid>
    Column("scheduled_for", UTCDateTime, nullable=False),
    Column("outcome", String(16), nullable=False),  # claimed, launched, skipped, queued, failed
    Column("lineage_id", String(64)),
    Column("note", Text, nullable=False, default=""),
    Column("created_at", UTCDateTime, nullable=False),
    UniqueConstraint("schedule", "slot", name="uq_schedule_runs_slot"),
    Index("ix_schedule_runs_schedule", "schedule", "id"),
)

#: One row per lease name: the process holding it runs the schedules until `expires_at` (epoch seconds).
scheduler_lease = Table(
    "scheduler_lease", metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("expires_at", Float, nullable=False),
)

_TABLES = [schedules_table, schedule_runs, scheduler_lease]
register_migration(9, "schedules", lambda conn: metadata.create_all(conn, tables=_TABLES))


class CronCalendar(Protocol):
    """Cron arithmetic in a time zone (bot/scheduler.py implements it with APScheduler)."""

    def validate(self, cron: str, tz: str) -> None:
        """Raise ScheduleError (one sentence) for a bad expression or unknown time zone."""
        ...

    def next_fire(self, cron: str, tz: str, after: datetime) -> datetime | None:
        """The first fire time strictly after `after`, as an aware UTC datetime (None: never)."""
        ...


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class ScheduleRun:
    schedule: str
    slot: str
    scheduled_for: datetime
    outcome: str  # claimed (launch in progress), launched, skipped, queued, failed
    lineage_id: str | None
    note: str
    created_at: datetime


@dataclass(frozen=True)
class Schedule:
    name: str
    cron: str
    tz: str
    text: str
    channel: str | None
    created_by: str
    via: str
    paused: bool
    overlap: str  # skip or queue
    regression_points: float
    deploy_if_better: bool
    train_data: str | None
    dataset_revision: str | None
    queued_for: datetime | None
    created_at: datetime
    updated_at: datetime
    next_run: datetime | None = None  # filled by the service (None when paused)
    last_run: ScheduleRun | None = None
    last_result: str = ""  # e.g. "completed (nightly-x): eval_f1=88.1", "skipped: ..."

    def next_run_text(self) -> str:
        if self.paused:
            return "paused"
        return _when(self.next_run) if self.next_run else "never"

    def data_text(self) -> str:
        return describe_data(self.train_data, self.dataset_revision)


@dataclass(frozen=True)
class FireResult:
    schedule: str
    outcome: str  # launched, skipped, queued, failed, duplicate, missing, paused
    lineage: Lineage | None = None
    note: str = ""


@dataclass(frozen=True)
class MetricChange:
    name: str
    previous: float
    current: float
    change_points: float  # current - previous, in points for quality metrics
    quality: bool  # higher is better and a drop counts as a regression
    regressed: bool


@dataclass(frozen=True)
class Comparison:
    schedule: str
    lineage_id: str
    previous_lineage_id: str
    threshold_points: float
    changes: tuple[MetricChange, ...]
    data: str  # which data this run trained on
    previous_data: str
    deploy_if_better: bool

    @property
    def regressed(self) -> bool:
        return any(c.regressed for c in self.changes)

    @property
    def better(self) -> bool:
        quality = [c for c in self.changes if c.quality]
        # Strict on purpose (it can trigger a deploy): nothing dropped at all, and something improved.
        return bool(quality) and all(c.change_points >= 0 for c in quality) and any(
            c.change_points > 0 for c in quality)

    @property
    def deploy_recommended(self) -> bool:
        """deploy_if_better=yes and this run beat the previous one (the endpoints layer acts on it)."""
        return self.deploy_if_better and self.better

    def lines(self) -> list[str]:
        head = f"Compared with {self.previous_lineage_id} (previous successful run of {self.schedule}):"
        body = [f"- {c.name}: {c.previous:g} -> {c.current:g} ({c.change_points:+.2f}"
                f"{' points' if c.quality else ''}){' REGRESSION' if c.regressed else ''}" for c in self.changes]
        verdict = (f"Regression: a metric dropped by more than {self.threshold_points:g} points."
                   if self.regressed else "No regression.")
        return [head, *body, verdict, f"Trained on {self.data}."]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule, "lineage_id": self.lineage_id, "previous_lineage_id": self.previous_lineage_id,
            "threshold_points": self.threshold_points, "regressed": self.regressed, "better": self.better,
            "deploy_recommended": self.deploy_recommended, "data": self.data, "previous_data": self.previous_data,
            "changes": [c.__dict__ for c in self.changes], "text": "\n".join(self.lines()),
        }


def describe_data(train_data: str | None, revision: str | None) -> str:
    """The report's sentence fragment on the data a run used."""
    if train_data and revision:
        return f"{train_data} (revision {revision})"
    if train_data:
        return train_data
    return f"the dataset at revision {revision}" if revision else "the dataset's default revision"


# ---------------------------------------------------------------- `/schedule add` text


@dataclass(frozen=True)
class AddRequest:
    cron: str
    tz: str
    train_text: str
    overlap: str = "skip"
    regression_points: float = DEFAULT_REGRESSION_POINTS
    deploy_if_better: bool = False


def parse_add_text(text: str) -> AddRequest:
    """``cron="0 2 * * *" [tz=ZONE] [overlap=queue] [threshold=0.5] [deploy_if_better=yes] <train args>``."""
    try:
        tokens = shlex.split(normalize_slack_text(text))
    except ValueError:
        raise ScheduleError('The command has an unbalanced quote: write the cron as cron="0 2 * * *".') from None
    found: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(tokens):
        key, has_value, value = tokens[i].partition("=")
        slot = _SCHEDULE_KEYS.get(key.lower())
        i += 1
        if slot is None or not has_value:
            rest.append(tokens[i - 1])
            continue
        if slot == "cron":  # an unquoted cron: take the following bare fields too
            while len(value.split()) < 5 and i < len(tokens) and "=" not in tokens[i]:
                value, i = f"{value} {tokens[i]}", i + 1
        found[slot] = value.strip()
    if "cron" not in found:
        raise ScheduleError('Give the schedule a cron expression, e.g. cron="0 2 * * *" for 02:00 every night.')
    return AddRequest(
        cron=found["cron"], tz=found.get("tz", DEFAULT_TZ), train_text=shlex.join(rest),
        overlap=_overlap(found.get("overlap", "skip")),
        regression_points=_threshold(found.get("threshold")),
        deploy_if_better=_yes_no(found.get("deploy_if_better", "no"), "deploy_if_better"),
    )


def _overlap(value: str) -> str:
    if value.lower() not in OVERLAP_CHOICES:
        raise ScheduleError(f"overlap takes skip or queue, not {value!r}.")
    return value.lower()


def _threshold(value: str | None) -> float:
    if value is None:
        return DEFAULT_REGRESSION_POINTS
    try:
        points = float(value)
    except ValueError:
        points = -1.0
    if not 0 <= points <= 100:
        raise ScheduleError(f"threshold takes points between 0 and 100 (e.g. threshold=0.5), not {value!r}.")
    return points


def _yes_no(value: str, key: str) -> bool:
    if value.lower() in ("yes", "true", "on", "1"):
        return True
    if value.lower() in ("no", "false", "off", "0"):
        return False
    raise ScheduleError(f"{key} takes yes or no, not {value!r}.")


def check_name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise ScheduleError(
            f"{name!r} cannot name a schedule: use up to 63 letters, digits, - and _, starting with a letter or digit."
        )
    return name


# ---------------------------------------------------------------- the service


class ScheduleService:
    def __init__(self, *, store: Store, jobs: JobService, calendar: CronCalendar, settings: Settings,
                 clock: Clock) -> None:
        self.store = store
        self.calendar = calendar
        self._jobs = jobs
        self._settings = settings
        self._clock = clock
        self._policy = AccessPolicy.from_settings(settings)
        self._listeners: list[Callable[[str], None]] = []

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
                        deploy_if_better=request.deploy_if_better)

    def add(self, name: str, cron: str, tz: str | None, text: str, *, actor: Actor, channel: str | None,
            overlap: str = "skip", regression_points: float = DEFAULT_REGRESSION_POINTS,
            deploy_if_better: bool = False) -> Schedule:
        """Validate everything now (not at 2 a.m.) and store the schedule."""
        check_name(name)
        tz = tz or DEFAULT_TZ
        self.calendar.validate(cron, tz)
        if self.calendar.next_fire(cron, tz, self._clock.now()) is None:
            raise ScheduleError(f"cron={cron!r} never fires (no such date): check the day and month fields.")
        spec = parse_command(text, max_instances=self._settings.trainbot_max_instances)
        self._policy.check_can_use(actor)
        now = self._clock.now()
        values = dict(name=name, cron=cron, tz=tz, text=text, channel=channel, created_by=actor.user_id,
                      via=actor.via, paused=False, overlap=_overlap(overlap), regression_points=regression_points,
                      deploy_if_better=deploy_if_better, train_data=spec.train_data,
                      dataset_revision=spec.dataset_revision, queued_for=None, created_at=now, updated_at=now)
        try:
            with write_transaction(self.engine) as conn:
                conn.execute(insert(schedules_table).values(**values))
        except IntegrityError:
            raise ScheduleError(
                f"A schedule named {name!r} exists already: remove it first or pick another name."
            ) from None
        self.store.audit(actor, "schedule.add", name, {"cron": cron, "tz": tz, "text": text})
        self._changed(name)
        return self.get(name)

    def get(self, name: str) -> Schedule:
        with self.engine.connect() as conn:
            row = conn.execute(select(schedules_table).where(schedules_table.c.name == name)).first()
        if row is None:
            raise NotFound(f"There is no schedule named {name!r}; `/schedule list` shows them.")
        return self._decorate(_to_schedule(row))

    def list(self) -> builtins.list[Schedule]:
        return [self._decorate(s) for s in self.list_raw()]

    def list_raw(self) -> builtins.list[Schedule]:
        """The rows alone, without next run or last result (the scheduler's sync reads these)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(schedules_table).order_by(schedules_table.c.name)).all()
        return [_to_schedule(r) for r in rows]

    def render_list(self) -> str:
        schedules = self.list()
        if not schedules:
            return 'No schedules yet: /schedule add NAME cron="0 2 * * *" <train arguments>.'
        return "\n".join(
            f"{s.name}  cron={s.cron!r} tz={s.tz}  next: {s.next_run_text()}  last: {s.last_result or 'none yet'}"
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
            return [_to_run(r) for r in conn.execute(query)]

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
        slot = f"cron:{scheduled_for.isoformat()}"
        if not self._claim(name, slot, scheduled_for):
            return FireResult(name, "duplicate", note="another process ran this slot")
        return self._run_claimed(schedule, slot, scheduled_for)

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
            lineage = self._launch(schedule, _schedule_actor(schedule), slot)
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
        self.store.enqueue(kind=NOTIFY_KIND, payload=payload, dedup_key=f"schedule:{schedule.name}:{slot}:{outcome}",
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
        changes = _changes(final_metrics(previous), final_metrics(lineage), threshold)
        if not changes:
            return None
        return Comparison(
            schedule=lineage.schedule, lineage_id=lineage.id, previous_lineage_id=previous.id,
            threshold_points=threshold, changes=changes, deploy_if_better=deploy,
            data=describe_data(lineage.spec.train_data, lineage.spec.dataset_revision),
            previous_data=describe_data(previous.spec.train_data, previous.spec.dataset_revision),
        )

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


# ---------------------------------------------------------------- module helpers


def final_metrics(lineage: Lineage) -> dict[str, float]:
    """The metrics of the attempt that completed (else the latest attempt's)."""
    for attempt in reversed(lineage.attempts):
        if attempt.status is AttemptStatus.COMPLETED:
            return dict(attempt.metrics)
    latest = lineage.latest_attempt
    return dict(latest.metrics) if latest else {}


def _is_quality(name: str) -> bool:
    base = name.lower()
    for prefix in _METRIC_PREFIXES:
        base = base.removeprefix(prefix)
    return base in QUALITY_METRICS


def _changes(previous: dict[str, float], current: dict[str, float], threshold: float) -> tuple[MetricChange, ...]:
    out = []
    for name in sorted(set(previous) & set(current)):
        before, after = float(previous[name]), float(current[name])
        quality = _is_quality(name)
        # Accuracy 0.91 and SQuAD EM 81.2 are both "points" people read on a 0-100 scale.
        scale = 100.0 if quality and abs(before) <= 1 and abs(after) <= 1 else 1.0
        change = (after - before) * scale
        out.append(MetricChange(name, before, after, round(change, 4), quality, quality and -change > threshold))
    return tuple(out)


def _schedule_actor(schedule: Schedule) -> Actor:
    # A cron run acts for the person who added the schedule: their permissions and budget apply.
    return Actor(user_id=schedule.created_by, channel_id=schedule.channel, via="schedule",
                 display=f"schedule {schedule.name}")


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A write transaction; BEGIN IMMEDIATE on SQLite (the store's recipe) so writers queue, not fail."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn = conn.execution_options(sqlite_begin="BEGIN IMMEDIATE")
        with conn.begin():
            yield conn


def _to_schedule(row: Row[Any]) -> Schedule:
    return Schedule(
        name=row.name, cron=row.cron, tz=row.tz, text=row.text, channel=row.channel, created_by=row.created_by,
        via=row.via, paused=bool(row.paused), overlap=row.overlap, regression_points=float(row.regression_points),
        deploy_if_better=bool(row.deploy_if_better), train_data=row.train_data,
        dataset_revision=row.dataset_revision, queued_for=row.queued_for, created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _to_run(row: Row[Any]) -> ScheduleRun:
    return ScheduleRun(schedule=row.schedule, slot=row.slot, scheduled_for=row.scheduled_for, outcome=row.outcome,
                       lineage_id=row.lineage_id, note=row.note, created_at=row.created_at)

"""The durable record of every lineage, attempt, command and pending chat message.

SQLAlchemy Core on any URL; SQLite under TRAINBOT_HOME by default (WAL and a busy timeout, so the bot and a
CLI share one file). Status changes are guarded updates (``UPDATE ... WHERE status IN (:expected)``): the
caller learns from the row count whether it won, so two processes never both act on one change.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, MetaData, Table, delete, insert, select, update
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError

from jobs.clock import Clock
from jobs.errors import InvalidState, NotFound
from jobs.lineage import (
    ATTEMPT_MOVES,
    LINEAGE_MOVES,
    Attempt,
    AttemptStatus,
    EndingFacts,
    Lineage,
    LineageStatus,
    Move,
)
from jobs.planning.spec import JobSpec
from jobs.records import Actor
from jobs.store.endings import EndingLog
from jobs.store.migrate import current_revision, upgrade
from jobs.store.outbox import Outbox
from jobs.store.rows import AuditEntry, Ending, Notification, to_attempt, to_lineage
from jobs.store.schema import attempts as t_attempts
from jobs.store.schema import audit as t_audit
from jobs.store.schema import lineages as t_lineages
from jobs.store.schema import make_engine, read_transaction, write_transaction
from jobs.store.schema import meta as t_meta
from jobs.store.schema import metadata as _metadata

log = logging.getLogger(__name__)

_ACTIVE_ATTEMPT = (AttemptStatus.LAUNCHING.value, AttemptStatus.RUNNING.value)
_TERMINAL_LINEAGE = tuple(s.value for s in LineageStatus if s.is_terminal())
# Columns a transition or update may set; identity, status and creation time are not among them.
_FIXED = {"id", "status", "created_at", "lineage_id", "number", "job_name"}


class DuplicateLineage(InvalidState):
    """create_lineage met an existing lineage id or request id (a race the caller resolves)."""


class Store:
    """Lineages, attempts, the audit trail and meta; ``outbox`` holds the chat messages owed, on the same
    database (a change and the message announcing it are written by the same caller, one after the other);
    ``endings`` holds each ended lineage's facts, written in the very transaction that ends it."""

    def __init__(self, url: str, *, clock: Clock) -> None:
        self._clock = clock
        self._engine = make_engine(url)
        self.outbox = Outbox(self._engine, clock)
        self.endings = EndingLog(self._engine, clock)

    @property
    def engine(self) -> Engine:
        """Other tables (schedules) share it; declare them on ``metadata`` (and add a revision)."""
        return self._engine

    @property
    def metadata(self) -> MetaData:
        return _metadata

    def dispose(self) -> None:
        self._engine.dispose()

    # -- migrations -------------------------------------------------------------------------------

    def migrate(self, *, foreign: Sequence[Table] = ()) -> list[str]:
        """Bring the schema to the newest Alembic revision (jobs/store/migrations), under a lock so two
        processes starting together migrate once; returns the revisions this call applied. ``foreign``
        tables (APScheduler's) are created under the same lock: every table exists before a thread starts."""
        return upgrade(self._engine, foreign=foreign)

    def schema_revision(self) -> str | None:
        return current_revision(self._engine)

    # -- lineages ---------------------------------------------------------------------------------

    def create_lineage(
        self,
        *,
        lineage_id: str,
        spec: JobSpec,
        backend: str,
        checkpoint_uri: str,
        actor: Actor,
        estimated_usd: float,
        request_id: str | None = None,
        schedule: str | None = None,
        launch_plan: dict[str, Any] | None = None,
    ) -> Lineage:
        """Record a lineage as PENDING with its approved ``launch_plan`` (LaunchPlan.stored()).
        DuplicateLineage when the id or request id is taken."""
        now = self._now()
        values = {
            "id": lineage_id,
            "spec": spec.model_dump(mode="json"),
            "backend": backend,
            "checkpoint_uri": checkpoint_uri,
            "status": LineageStatus.PENDING.value,
            "launched_by": actor.user_id,
            "origin": actor.via,
            "channel": actor.channel_id,
            "schedule": schedule,
            "request_id": request_id,
            "estimated_usd": float(estimated_usd),
            "restarts": 0,
            "launch_plan": launch_plan,
            "created_at": now,
            "updated_at": now,
        }
        try:
            with self._write() as conn:
                conn.execute(insert(t_lineages).values(**values))
        except IntegrityError as exc:
            raise DuplicateLineage(
                f"A job with id {lineage_id} or the same request already exists; run `trainbot jobs` to see it."
            ) from exc
        return self.get_lineage(lineage_id)

    def find_by_request(self, request_id: str) -> Lineage | None:
        with self._read() as conn:
            row = conn.execute(select(t_lineages).where(t_lineages.c.request_id == request_id)).first()
            return None if row is None else self._lineage(conn, row)

    def get_lineage(self, lineage_id: str) -> Lineage:
        with self._read() as conn:
            row = conn.execute(select(t_lineages).where(t_lineages.c.id == lineage_id)).first()
            if row is None:
                raise NotFound(f"There is no job {lineage_id!r}; `trainbot jobs` (or /jobs) lists them.")
            return self._lineage(conn, row)

    def find(self, ref: str) -> Lineage:
        """A lineage by its id or by the job name of one of its attempts."""
        ref = ref.strip()
        with self._read() as conn:
            row = conn.execute(select(t_lineages).where(t_lineages.c.id == ref)).first()
            if row is None:
                owner = select(t_attempts.c.lineage_id).where(t_attempts.c.job_name == ref)
                row = conn.execute(select(t_lineages).where(t_lineages.c.id.in_(owner))).first()
            if row is None:
                raise NotFound(
                    f"There is no job or SageMaker training job named {ref!r}; `trainbot jobs` (or /jobs) lists them."
                )
            return self._lineage(conn, row)

    def list_lineages(
        self, *, active_only: bool = False, limit: int = 50, schedule: str | None = None,
        backend: str | None = None, status: LineageStatus | None = None,
    ) -> list[Lineage]:
        """Newest first."""
        query = (
            select(t_lineages).order_by(t_lineages.c.created_at.desc(), t_lineages.c.id.desc()).limit(limit)
        )
        if active_only:
            query = query.where(t_lineages.c.status.not_in(_TERMINAL_LINEAGE))
        if schedule is not None:
            query = query.where(t_lineages.c.schedule == schedule)
        if backend is not None:
            query = query.where(t_lineages.c.backend == backend)
        if status is not None:
            query = query.where(t_lineages.c.status == status.value)
        with self._read() as conn:
            rows = conn.execute(query).all()
            by_lineage = self._attempts_of(conn, [r.id for r in rows])
            return [to_lineage(r, by_lineage.get(r.id, ())) for r in rows]

    def transition_lineage(
        self, lineage_id: str, move: Move[LineageStatus], *, ending: EndingFacts | None = None, **fields: Any
    ) -> bool:
        """Carry out ``move`` (jobs.lineage) only if the status is one of its sources; True when
        this call did it. A move into a terminal status records its ``ending`` (why, and on which attempt) in
        the same transaction: every ended lineage has one, so what follows an ending always happens."""
        _check_move(move, LINEAGE_MOVES)
        values = self._settable(t_lineages, fields)
        values["status"] = move.target.value
        statuses = [s.value for s in move.sources]
        stmt = (
            update(t_lineages)
            .where(t_lineages.c.id == lineage_id, t_lineages.c.status.in_(statuses))
            .values(**values)
        )
        with self._write() as conn:
            won = conn.execute(stmt).rowcount == 1
            if won and move.target.is_terminal():
                self.endings.record(conn, lineage_id, move.target, ending or EndingFacts(job_name=None))
        log.debug("lineage %s %s (%s -> %s): %s", lineage_id, move.name, statuses, values["status"], won)
        return won

    def set_message(self, lineage_id: str, channel: str, ts: str) -> None:
        stmt = (
            update(t_lineages)
            .where(t_lineages.c.id == lineage_id)
            .values(channel=channel, message_ts=ts, updated_at=self._now())
        )
        with self._write() as conn:
            if conn.execute(stmt).rowcount != 1:
                raise NotFound(f"There is no job {lineage_id!r} to attach a message to.")

    # -- attempts ---------------------------------------------------------------------------------

    def add_attempt(
        self,
        lineage_id: str,
        *,
        number: int,
        instance_type: str,
        spot: bool,
        resumed_from_step: int | None = None,
        per_device_batch: int | None = None,
        accumulation: int | None = None,
        forecast: dict[str, Any] | None = None,
    ) -> Attempt | None:
        """Record attempt ``number`` as LAUNCHING, with the batch settings and forecast of its plan; None
        when that number (or job name) already exists, i.e. another process got there first."""
        now = self._now()
        job_name = f"{lineage_id}-{number}"
        values = {
            "lineage_id": lineage_id,
            "number": number,
            "job_name": job_name,
            "instance_type": instance_type,
            "spot": spot,
            "status": AttemptStatus.LAUNCHING.value,
            "remote_status": "",
            "secondary_status": "",
            "failure_reason": "",
            "metrics": {},
            "resumed_from_step": resumed_from_step,
            "per_device_train_batch_size": per_device_batch,
            "gradient_accumulation_steps": accumulation,
            "forecast": forecast,
            "created_at": now,
            "updated_at": now,
        }
        try:
            with self._write() as conn:
                known = conn.execute(select(t_lineages.c.id).where(t_lineages.c.id == lineage_id)).first()
                if known is None:
                    raise NotFound(f"There is no job {lineage_id!r} to add an attempt to.")
                conn.execute(insert(t_attempts).values(**values))
        except IntegrityError:
            log.info("attempt %s already recorded by another writer", job_name)
            return None
        return self.get_attempt(job_name)

    def get_attempt(self, job_name: str) -> Attempt:
        with self._read() as conn:
            row = conn.execute(select(t_attempts).where(t_attempts.c.job_name == job_name)).first()
        if row is None:
            raise NotFound(f"There is no training job {job_name!r}; `trainbot jobs` (or /jobs) lists them.")
        return to_attempt(row)

    def transition_attempt(self, job_name: str, move: Move[AttemptStatus], **fields: Any) -> bool:
        """Guarded like transition_lineage; a move to a terminal status stamps ``ended_at`` unless given."""
        _check_move(move, ATTEMPT_MOVES)
        values = self._settable(t_attempts, fields)
        values["status"] = move.target.value
        if move.target.is_terminal():
            values.setdefault("ended_at", values["updated_at"])
        statuses = [s.value for s in move.sources]
        stmt = (
            update(t_attempts)
            .where(t_attempts.c.job_name == job_name, t_attempts.c.status.in_(statuses))
            .values(**values)
        )
        with self._write() as conn:
            return conn.execute(stmt).rowcount == 1

    def update_attempt(self, job_name: str, **fields: Any) -> None:
        """Mirror remote fields (remote_status, metrics, billable_seconds, ...); never the status."""
        values = self._settable(t_attempts, fields)
        with self._write() as conn:
            stmt = update(t_attempts).where(t_attempts.c.job_name == job_name).values(**values)
            if conn.execute(stmt).rowcount != 1:
                raise NotFound(f"There is no training job {job_name!r} to update.")

    def attempts_created_since(self, since: datetime) -> list[tuple[Attempt, JobSpec]]:
        """Every attempt created at or after ``since``, with its lineage's spec (for what it may cost)."""
        query = (
            select(t_attempts, t_lineages.c.spec.label("lineage_spec"))
            .join(t_lineages, t_lineages.c.id == t_attempts.c.lineage_id)
            .where(t_attempts.c.created_at >= since)
        )
        with self._read() as conn:
            return [(to_attempt(row), JobSpec.model_validate(row.lineage_spec)) for row in conn.execute(query)]

    def active_attempts(self, *, backend: str | None = None) -> list[Attempt]:
        """LAUNCHING or RUNNING attempts (of lineages on `backend`, if given), oldest first."""
        query = (
            select(t_attempts)
            .where(t_attempts.c.status.in_(_ACTIVE_ATTEMPT))
            .order_by(t_attempts.c.created_at, t_attempts.c.id)
        )
        if backend is not None:
            on_backend = select(t_lineages.c.id).where(t_lineages.c.backend == backend)
            query = query.where(t_attempts.c.lineage_id.in_(on_backend))
        with self._read() as conn:
            return [to_attempt(r) for r in conn.execute(query)]

    # -- audit ------------------------------------------------------------------------------------

    def audit(
        self, actor: Actor | None, action: str, target: str, detail: dict[str, Any] | None = None
    ) -> None:
        """Record who did what to which lineage; ``actor`` None means the bot itself (watcher, recovery)."""
        values = {
            "at": self._now(),
            "user": actor.user_id if actor else "trainbot",
            "via": actor.via if actor else "system",
            "action": action,
            "target": target,
            "detail": detail or {},
        }
        with self._write() as conn:
            conn.execute(insert(t_audit).values(**values))

    def audit_log(self, *, target: str | None = None, limit: int = 100) -> list[AuditEntry]:
        """Newest first."""
        query = select(t_audit).order_by(t_audit.c.id.desc()).limit(limit)
        if target is not None:
            query = query.where(t_audit.c.target == target)
        with self._read() as conn:
            return [
                AuditEntry(r.id, r.at, r.user, r.via, r.action, r.target, dict(r.detail or {}))
                for r in conn.execute(query)
            ]

    # -- meta -------------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        with self._read() as conn:
            return conn.execute(select(t_meta.c.value).where(t_meta.c.key == key)).scalar_one_or_none()

    def set_meta(self, key: str, value: str) -> None:
        try:
            with self._write() as conn:
                if conn.execute(update(t_meta).where(t_meta.c.key == key).values(value=value)).rowcount == 0:
                    conn.execute(insert(t_meta).values(key=key, value=value))
        except IntegrityError:  # another process inserted the key in between (not on SQLite: locked)
            with self._write() as conn:
                conn.execute(update(t_meta).where(t_meta.c.key == key).values(value=value))

    def delete_meta(self, key: str) -> None:
        """Removes what was kept for one piece of work once it is done (a deferred delivery's progress), so meta
        does not grow with work that has ended."""
        with self._write() as conn:
            conn.execute(delete(t_meta).where(t_meta.c.key == key))

    # -- helpers ----------------------------------------------------------------------------------

    def _write(self) -> AbstractContextManager[Connection]:
        return write_transaction(self._engine)

    def _read(self) -> AbstractContextManager[Connection]:
        return read_transaction(self._engine)

    def _now(self) -> datetime:
        return self._clock.now()

    def _settable(self, table: Any, fields: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(fields) - {c.name for c in table.columns} | (set(fields) & _FIXED)
        if unknown:
            raise TypeError(f"cannot set {sorted(unknown)} on {table.name}")
        values = {
            k: (v.value if isinstance(v, (LineageStatus, AttemptStatus)) else v) for k, v in fields.items()
        }
        values.setdefault("updated_at", self._now())
        return values

    def _lineage(self, conn: Connection, row: Row[Any]) -> Lineage:
        return to_lineage(row, self._attempts_of(conn, [row.id]).get(row.id, ()))

    def _attempts_of(self, conn: Connection, ids: list[str]) -> dict[str, tuple[Attempt, ...]]:
        if not ids:
            return {}
        query = select(t_attempts).where(t_attempts.c.lineage_id.in_(ids)).order_by(t_attempts.c.number)
        grouped: dict[str, list[Attempt]] = {}
        for row in conn.execute(query):
            grouped.setdefault(row.lineage_id, []).append(to_attempt(row))
        return {k: tuple(v) for k, v in grouped.items()}



def _check_move(move: Move[Any], known: tuple[Move[Any], ...]) -> None:
    # Only the lifecycle's named moves: an ad-hoc edge would bypass the table that says what may happen.
    if move not in known:
        raise ValueError(f"{move.name!r} is not one of the lifecycle's moves")


__all__ = ["Attempt", "AuditEntry", "DuplicateLineage", "Ending", "Lineage", "Notification", "Store"]

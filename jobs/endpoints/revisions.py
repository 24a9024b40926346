"""What each endpoint served: one row per deploy, promotion and rollback (the endpoint_revisions table),
with who asked, why, and when it served. `/endpoint NAME` reads them; a rollback returns to the newest
revision that a later one replaced.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError

from jobs.clock import Clock
from jobs.errors import NotFound
from jobs.store.schema import endpoint_revisions, read_transaction, write_transaction
from jobs.store.store import Store


class Action(str, Enum):
    DEPLOY = "deploy"  # the endpoint's creation
    PROMOTE = "promote"  # a new model, updated in place
    ROLLBACK = "rollback"  # back to the config served before


class RevisionStatus(str, Enum):
    UPDATING = "updating"  # asked for: the endpoint is moving to this config
    SERVING = "serving"  # what the endpoint serves now
    REPLACED = "replaced"  # served until a later promotion; a rollback returns to the newest of these
    ROLLED_BACK = "rolled_back"  # taken out by a rollback (its package rejected)
    RESTORED = "restored"  # a rollback returned to its config; that rollback's revision serves now
    FAILED = "failed"  # the update did not take (refused, failed, or rolled back by its alarm)
    RETIRED = "retired"  # the endpoint was undeployed

    def is_over(self) -> bool:
        return self not in (RevisionStatus.UPDATING, RevisionStatus.SERVING)


@dataclass(frozen=True)
class Revision:
    id: int
    endpoint: str
    action: Action
    status: RevisionStatus
    lineage_id: str
    job_name: str
    model_name: str
    model_data: str
    config_name: str
    instance_type: str
    instance_count: int
    serverless: bool
    memory_mb: int
    canary_percent: int | None
    alarm: str
    requested_by: str
    via: str
    reason: str
    request_id: str | None
    replaces: int | None
    restores: int | None
    remote_status: str
    failure_reason: str
    created_at: datetime
    serving_since: datetime | None
    ended_at: datetime | None

    def serving_fields(self) -> dict[str, Any]:
        """The endpoint row's columns that say what it serves, as this revision has them."""
        return {
            "lineage_id": self.lineage_id, "job_name": self.job_name, "model_name": self.model_name,
            "model_data": self.model_data, "config_name": self.config_name, "instance_type": self.instance_type,
            "instance_count": self.instance_count, "serverless": self.serverless, "memory_mb": self.memory_mb,
        }


class RevisionStore:
    def __init__(self, store: Store, *, clock: Clock) -> None:
        self._engine = store.engine
        self._clock = clock

    def add(self, values: dict[str, Any]) -> Revision:
        """A new revision; with a ``request_id`` that exists already, the one recorded then."""
        row = {"alarm": "", "reason": "", "remote_status": "", "failure_reason": "", "created_at": self._clock.now(),
               **values}
        try:
            with self._write() as conn:
                key = conn.execute(insert(endpoint_revisions).values(**row)).inserted_primary_key
                assert key is not None
                new_id = key[0]
        except IntegrityError:
            found = self.by_request(str(values.get("request_id")))
            if found is None:
                raise
            return found
        return self.get(int(new_id))

    def get(self, revision_id: int) -> Revision:
        with self._read() as conn:
            row = conn.execute(select(endpoint_revisions).where(endpoint_revisions.c.id == revision_id)).first()
        if row is None:
            raise NotFound(f"There is no endpoint revision {revision_id}.")
        return _to_revision(row)

    def by_request(self, request_id: str) -> Revision | None:
        with self._read() as conn:
            row = conn.execute(select(endpoint_revisions).where(
                endpoint_revisions.c.request_id == request_id)).first()
        return None if row is None else _to_revision(row)

    def history(self, endpoint: str, *, limit: int = 50) -> list[Revision]:
        """Newest first."""
        query = (select(endpoint_revisions).where(endpoint_revisions.c.endpoint == endpoint)
                 .order_by(endpoint_revisions.c.id.desc()).limit(limit))
        with self._read() as conn:
            return [_to_revision(row) for row in conn.execute(query)]

    def with_status(self, endpoint: str | None, *statuses: RevisionStatus) -> list[Revision]:
        """Newest first; every endpoint's when ``endpoint`` is None."""
        query = (select(endpoint_revisions)
                 .where(endpoint_revisions.c.status.in_([s.value for s in statuses]))
                 .order_by(endpoint_revisions.c.id.desc()))
        if endpoint is not None:
            query = query.where(endpoint_revisions.c.endpoint == endpoint)
        with self._read() as conn:
            return [_to_revision(row) for row in conn.execute(query)]

    def move(self, revision_id: int, expected: tuple[RevisionStatus, ...], new: RevisionStatus,
             **values: Any) -> bool:
        """Guarded: only from ``expected``; True when this call made the change."""
        stmt = (update(endpoint_revisions)
                .where(endpoint_revisions.c.id == revision_id,
                       endpoint_revisions.c.status.in_([s.value for s in expected]))
                .values(status=new.value, **values))
        with self._write() as conn:
            return bool(conn.execute(stmt).rowcount == 1)

    def mirror(self, revision_id: int, remote_status: str) -> None:
        with self._write() as conn:
            conn.execute(update(endpoint_revisions).where(endpoint_revisions.c.id == revision_id)
                         .values(remote_status=remote_status))

    def retire(self, endpoint: str) -> list[str]:
        """The endpoint is gone: every revision still serving or kept for a rollback ends; returns the configs
        they named (to delete with it)."""
        kept = self.with_status(endpoint, RevisionStatus.SERVING, RevisionStatus.REPLACED, RevisionStatus.UPDATING,
                                RevisionStatus.ROLLED_BACK, RevisionStatus.RESTORED, RevisionStatus.FAILED)
        now = self._clock.now()
        for revision in kept:
            if revision.status in (RevisionStatus.SERVING, RevisionStatus.REPLACED, RevisionStatus.UPDATING):
                self.move(revision.id, (revision.status,), RevisionStatus.RETIRED, ended_at=now)
        return sorted({r.config_name for r in kept if r.config_name and r.config_name != endpoint})

    def _write(self) -> AbstractContextManager[Connection]:
        return write_transaction(self._engine)

    def _read(self) -> AbstractContextManager[Connection]:
        return read_transaction(self._engine)


def _to_revision(row: Row[Any]) -> Revision:
    values = dict(row._mapping)
    values["action"] = Action(values["action"])
    values["status"] = RevisionStatus(values["status"])
    return Revision(**values)

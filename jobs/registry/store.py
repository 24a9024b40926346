"""The model_packages table's records and guarded writes: one row per lineage (its id is the key, so a
step run twice finds the row the first run made), versions numbered per group.
"""

from __future__ import annotations

import builtins
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError

from jobs.clock import Clock
from jobs.errors import NotFound
from jobs.registry.port import Approval
from jobs.store.schema import model_packages, read_transaction, write_transaction
from jobs.store.store import Store

REGISTERING = "registering"  # claimed; the remote registry may not have it yet
REGISTERED = "registered"  # in the store (and the remote registry, where there is one)


@dataclass(frozen=True)
class ModelPackage:
    lineage_id: str
    group_name: str
    version: int | None
    backend: str
    job_name: str
    status: str
    arn: str
    approval: Approval
    approval_by: str
    approval_reason: str
    approval_at: datetime | None
    image: str
    model_data: str
    task: str
    code_commit: str
    metrics: dict[str, float]
    released_at: datetime | None
    created_at: datetime
    updated_at: datetime

    @property
    def label(self) -> str:
        """``sentiment v3``: how people name a package."""
        return f"{self.group_name} v{self.version}" if self.version is not None else self.group_name


class PackageStore:
    def __init__(self, store: Store, *, clock: Clock) -> None:
        self._engine = store.engine
        self._clock = clock

    # -- reading ----------------------------------------------------------------------------------

    def find(self, lineage_id: str) -> ModelPackage | None:
        with self._read() as conn:
            row = conn.execute(select(model_packages).where(model_packages.c.lineage_id == lineage_id)).first()
        return None if row is None else _to_package(row)

    def get(self, lineage_id: str) -> ModelPackage:
        found = self.find(lineage_id)
        if found is None:
            raise NotFound(f"{lineage_id} has no model package (yet): /models lists the registered ones.")
        return found

    def list(self, group: str | None = None, *, limit: int = 50) -> builtins.list[ModelPackage]:
        """Registered packages, newest first."""
        query = (select(model_packages).where(model_packages.c.status == REGISTERED)
                 .order_by(model_packages.c.created_at.desc(), model_packages.c.id.desc()).limit(limit))
        if group is not None:
            query = query.where(model_packages.c.group_name == group)
        with self._read() as conn:
            return [_to_package(row) for row in conn.execute(query)]

    def groups(self) -> builtins.list[tuple[str, int, datetime]]:
        """(group, registered packages, newest registration), newest group first."""
        table = model_packages
        query = (select(table.c.group_name, func.count(), func.max(table.c.created_at))
                 .where(table.c.status == REGISTERED).group_by(table.c.group_name)
                 .order_by(func.max(table.c.created_at).desc()))
        with self._read() as conn:
            return [(row[0], int(row[1]), row[2]) for row in conn.execute(query)]

    def claim(self, values: dict[str, Any]) -> ModelPackage:
        """The lineage's row, inserted REGISTERING unless a run before this one made it."""
        now = self._clock.now()
        row = {"status": REGISTERING, "arn": "", "approval": Approval.PENDING.value, "approval_by": "",
               "approval_reason": "", "image": "", "created_at": now,
               "updated_at": now, **values}
        try:
            with self._write() as conn:
                if conn.execute(select(model_packages.c.id).where(
                        model_packages.c.lineage_id == values["lineage_id"])).first() is None:
                    conn.execute(insert(model_packages).values(**row))
        except IntegrityError:  # another process inserted it in between (not on SQLite: it locks)
            pass
        return self.get(values["lineage_id"])

    def registered(self, lineage_id: str, *, version: int | None, arn: str = "", image: str = "") -> ModelPackage:
        """REGISTERING -> REGISTERED with the remote registry's version, or the group's next one when there is
        no remote registry (numbered under the write lock; a clash with another process is retried)."""
        for _ in range(5):
            try:
                with self._write() as conn:
                    number = version if version is not None else _next_version(conn, lineage_id)
                    conn.execute(update(model_packages).where(
                        model_packages.c.lineage_id == lineage_id, model_packages.c.status == REGISTERING,
                    ).values(status=REGISTERED, version=number, arn=arn, image=image,
                             updated_at=self._clock.now()))
                break
            except IntegrityError:
                continue
        return self.get(lineage_id)

    def set_approval(self, lineage_id: str, approval: Approval, *, by: str, reason: str) -> None:
        now = self._clock.now()
        with self._write() as conn:
            conn.execute(update(model_packages).where(model_packages.c.lineage_id == lineage_id).values(
                approval=approval.value, approval_by=by, approval_reason=reason, approval_at=now, updated_at=now))

    def mark_released(self, lineage_id: str) -> None:
        now = self._clock.now()
        with self._write() as conn:
            conn.execute(update(model_packages).where(model_packages.c.lineage_id == lineage_id)
                         .values(released_at=now, updated_at=now))

    def _write(self) -> AbstractContextManager[Connection]:
        return write_transaction(self._engine)

    def _read(self) -> AbstractContextManager[Connection]:
        return read_transaction(self._engine)


def _next_version(conn: Connection, lineage_id: str) -> int:
    group = conn.execute(select(model_packages.c.group_name).where(
        model_packages.c.lineage_id == lineage_id)).scalar_one()
    highest = conn.execute(select(func.max(model_packages.c.version)).where(
        model_packages.c.group_name == group)).scalar_one_or_none()
    return int(highest or 0) + 1


def _to_package(row: Row[Any]) -> ModelPackage:
    values = dict(row._mapping)
    values.pop("id", None)
    values["approval"] = Approval(values["approval"])
    values["metrics"] = dict(values.get("metrics") or {})
    return ModelPackage(**values)

"""The notification tables (created by Alembic revision 0004): channel subscriptions and per-user DM
defaults. A subscription belongs to its author and is unique per (channel, filter, author): the author
subscribing again with the same filter replaces its events; anyone else gets a subscription of their own.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Connection,
    delete,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Row

from jobs.clock import Clock
from jobs.errors import LimitReached
from jobs.notifications.rules import Filter
from jobs.store.schema import preferences_table, read_transaction, subscriptions_table, write_transaction
from jobs.store.store import Store


@dataclass(frozen=True)
class Subscription:
    id: int
    channel: str
    events: tuple[str, ...]
    filter: Filter
    created_by: str
    via: str
    created_at: datetime
    updated_at: datetime


class SubscriptionStore:
    """Rows of the notification tables, on the store's engine."""

    def __init__(self, store: Store, *, clock: Clock) -> None:
        self._engine = store.engine
        self._clock = clock

    # -- subscriptions ----------------------------------------------------------------------------

    def upsert(self, *, channel: str, events: tuple[str, ...], flt: Filter, created_by: str,
               via: str, most: int | None = None) -> tuple[Subscription, tuple[str, ...] | None]:
        """Subscribe ``channel`` for ``created_by``: (their row, the events it had when this replaced them, else
        None). A new row beyond ``most`` of theirs raises LimitReached (counted in the same transaction)."""
        now = self._clock.now()
        table = subscriptions_table
        where = (table.c.channel == channel, table.c.filter_kind == flt.kind, table.c.filter_value == flt.value,
                 table.c.created_by == created_by)
        with self._write() as conn:
            found = conn.execute(select(table.c.id, table.c.events).where(*where)).first()
            if found is None and most is not None:
                check_limit(_count_by(conn, created_by), most)
            if found is None:
                conn.execute(insert(table).values(
                    channel=channel, events=",".join(events), filter_kind=flt.kind, filter_value=flt.value,
                    created_by=created_by, via=via, created_at=now, updated_at=now))
            else:
                conn.execute(update(table).where(table.c.id == found.id).values(
                    events=",".join(events), updated_at=now))
            row = conn.execute(select(table).where(*where)).one()
        return _subscription(row), None if found is None else _events(found.events)

    def for_channel(self, channel: str) -> list[Subscription]:
        query = select(subscriptions_table).where(subscriptions_table.c.channel == channel)
        with self._read() as conn:
            return [_subscription(row) for row in conn.execute(query.order_by(subscriptions_table.c.id))]

    def count_by(self, user_id: str) -> int:
        with self._read() as conn:
            return _count_by(conn, user_id)

    def all(self) -> list[Subscription]:
        with self._read() as conn:
            return [_subscription(r) for r in conn.execute(select(subscriptions_table).order_by(subscriptions_table.c.id))]

    def remove(self, ids: list[int]) -> None:
        if ids:
            with self._write() as conn:
                conn.execute(delete(subscriptions_table).where(subscriptions_table.c.id.in_(ids)))

    # -- DM defaults ------------------------------------------------------------------------------

    def dm_default(self, user_id: str) -> bool | None:
        """The user's `/notify dm` setting; None when they never set one."""
        query = select(preferences_table.c.dm).where(preferences_table.c.user_id == user_id)
        with self._read() as conn:
            value = conn.execute(query).scalar_one_or_none()
        return None if value is None else bool(value)

    def set_dm_default(self, user_id: str, dm: bool) -> None:
        now = self._clock.now()
        table = preferences_table
        with self._write() as conn:
            changed = conn.execute(update(table).where(table.c.user_id == user_id).values(dm=dm, updated_at=now))
            if changed.rowcount == 0:
                conn.execute(insert(table).values(user_id=user_id, dm=dm, updated_at=now))

    def _write(self) -> AbstractContextManager[Connection]:
        return write_transaction(self._engine)

    def _read(self) -> AbstractContextManager[Connection]:
        return read_transaction(self._engine)


def _count_by(conn: Connection, user_id: str) -> int:
    query = select(func.count()).select_from(subscriptions_table).where(subscriptions_table.c.created_by == user_id)
    return int(conn.execute(query).scalar_one())


def check_limit(have: int, most: int) -> None:
    if have >= most:
        raise LimitReached(
            f"You have {have} /notify subscriptions, the most one person may have "
            "(TRAINBOT_MAX_SUBSCRIPTIONS_PER_USER): remove one with /notify off in its channel first."
        )


def _subscription(row: Row[Any]) -> Subscription:
    return Subscription(
        id=row.id, channel=row.channel, events=_events(row.events),
        filter=Filter(row.filter_kind or "", row.filter_value or ""), created_by=row.created_by, via=row.via,
        created_at=row.created_at, updated_at=row.updated_at,
    )


def _events(text: str) -> tuple[str, ...]:
    return tuple(event for event in text.split(",") if event)

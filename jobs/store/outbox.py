"""The outbox: every chat message the bot owes, kept until it is delivered, each exactly once.

A message is queued under a dedup key in the same breath as the change it announces, so a crash between the
two redoes both and the key makes it one message; delivery claims each due row with a guarded update, so
two bots on one store never post the same one. The store holds one (``store.outbox``) on its engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, case, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from jobs.clock import Clock
from jobs.store.rows import Notification
from jobs.store.schema import claim_due_row, read_transaction, write_transaction
from jobs.store.schema import outbox as t_outbox


class Outbox:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    def _write(self) -> AbstractContextManager[Connection]:
        return write_transaction(self._engine)

    def _read(self) -> AbstractContextManager[Connection]:
        return read_transaction(self._engine)

    def _now(self) -> datetime:
        return self._clock.now()

    def enqueue(
        self,
        *,
        kind: str,
        payload: dict[str, Any],
        dedup_key: str,
        lineage_id: str | None = None,
        channel: str | None = None,
    ) -> bool:
        """Queue a chat message; False when ``dedup_key`` was queued before (delivered or not)."""
        now = self._now()
        values = {
            "kind": kind,
            "lineage_id": lineage_id,
            "channel": channel,
            "payload": payload,
            "dedup_key": dedup_key,
            "attempts": 0,
            "next_try_at": now,
            "created_at": now,
            "last_error": "",
        }
        try:
            with self._write() as conn:
                conn.execute(insert(t_outbox).values(**values))
        except IntegrityError:
            return False
        return True

    def due_notifications(self, *, limit: int = 20, claim_seconds: float | None = None,
                          ranks: Mapping[str, int] | None = None) -> list[Notification]:
        """Undelivered messages whose next try is due, oldest first.

        With ``ranks`` (kind -> rank, lower first; kinds it does not name after those it does) the most
        important go first, while each lineage's messages keep their order: a message ranks as the most
        important of its lineage's due messages from it on, so a job's ending jumps the queue with the state
        lines before it, and its thread still reads in order.

        With `claim_seconds`, each returned message is claimed for that long (its next try moved on by a
        guarded update), so two bot processes delivering from one store never post the same message; a
        claimer that dies leaves it due again once the claim runs out, so nothing is dropped."""
        now = self._now()
        order: list[Any] = [t_outbox.c.next_try_at, t_outbox.c.id]
        if ranks:
            order.insert(0, _lineage_rank(ranks, now))
        query = (
            select(t_outbox)
            .where(t_outbox.c.delivered_at.is_(None), t_outbox.c.next_try_at <= now)
            .order_by(*order)
            .limit(limit)
        )
        with self._read() as conn:
            rows = conn.execute(query).all()
        if claim_seconds is not None:
            rows = [r for r in rows if self._claim(r.id, r.next_try_at, now + timedelta(seconds=claim_seconds))]
        return [
            Notification(
                r.id, r.kind, r.lineage_id, r.channel, dict(r.payload), r.dedup_key, r.attempts,
                r.next_try_at, r.created_at,
            )
            for r in rows
        ]

    def _claim(self, notification_id: int, seen_next_try: datetime, until: datetime) -> bool:
        return claim_due_row(self._engine, t_outbox.c.id, notification_id, t_outbox.c.delivered_at,
                             seen_next_try, until)

    def undelivered(self, lineage_ids: list[str]) -> int:
        """How many messages about these lineages are still owed (due, deferred or being delivered)."""
        if not lineage_ids:
            return 0
        query = select(func.count()).select_from(t_outbox).where(
            t_outbox.c.delivered_at.is_(None), t_outbox.c.lineage_id.in_(lineage_ids)
        )
        with self._read() as conn:
            return int(conn.execute(query).scalar_one())

    def mark_delivered(self, notification_id: int) -> None:
        stmt = update(t_outbox).where(t_outbox.c.id == notification_id).values(delivered_at=self._now())
        with self._write() as conn:
            conn.execute(stmt)

    def defer(self, notification_id: int, *, until: datetime, error: str) -> None:
        """Try again at ``until``; ``error`` is kept (shortened) for the operator."""
        stmt = (
            update(t_outbox)
            .where(t_outbox.c.id == notification_id)
            .values(attempts=t_outbox.c.attempts + 1, next_try_at=until, last_error=error[:1000])
        )
        with self._write() as conn:
            conn.execute(stmt)


    def wait(self, notification_id: int, *, until: datetime, why: str) -> None:
        """Try again at ``until`` without counting a failed attempt: the message waits for something it
        needs (its job's card), so its backoff after a real failure stays as short as it was."""
        stmt = update(t_outbox).where(t_outbox.c.id == notification_id).values(next_try_at=until,
                                                                              last_error=why[:1000])
        with self._write() as conn:
            conn.execute(stmt)


def _lineage_rank(ranks: Mapping[str, int], now: datetime) -> Any:
    """The rank of the most important due message of the row's lineage from the row on (its own rank when
    it has no lineage)."""
    later = t_outbox.alias("later")
    unnamed = max(ranks.values()) + 1
    most_important = (
        select(func.min(case(dict(ranks), value=later.c.kind, else_=unnamed)))
        .where(later.c.lineage_id == t_outbox.c.lineage_id, later.c.delivered_at.is_(None),
               later.c.next_try_at <= now, later.c.id >= t_outbox.c.id)
        .scalar_subquery()
    )
    return func.coalesce(most_important, case(dict(ranks), value=t_outbox.c.kind, else_=unnamed))


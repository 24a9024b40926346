"""The outbox: every chat message the bot owes, kept until it is delivered, each exactly once.

A message is queued under a dedup key in the same breath as the change it announces, so a crash between the
two redoes both and the key makes it one message; delivery claims each due row with a guarded update, so
two bots on one store never post the same one. `Store` inherits these methods.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from jobs.clock import Clock
from jobs.store.rows import Notification
from jobs.store.schema import outbox as t_outbox
from jobs.store.schema import read_transaction, write_transaction


class Outbox:
    _engine: Engine
    _clock: Clock

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

    def due_notifications(self, *, limit: int = 20, claim_seconds: float | None = None) -> list[Notification]:
        """Undelivered messages whose next try is due, oldest first.

        With `claim_seconds`, each returned message is claimed for that long (its next try moved on by a
        guarded update), so two bot processes delivering from one store never post the same message; a
        claimer that dies leaves it due again once the claim runs out, so nothing is dropped."""
        now = self._now()
        query = (
            select(t_outbox)
            .where(t_outbox.c.delivered_at.is_(None), t_outbox.c.next_try_at <= now)
            .order_by(t_outbox.c.next_try_at, t_outbox.c.id)
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
        stmt = (
            update(t_outbox)
            .where(
                t_outbox.c.id == notification_id,
                t_outbox.c.delivered_at.is_(None),
                t_outbox.c.next_try_at == seen_next_try,
            )
            .values(next_try_at=until)
        )
        with self._write() as conn:
            return conn.execute(stmt).rowcount == 1

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

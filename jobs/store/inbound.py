"""The inbound_events table (Alembic revision 0012): which events a chat platform already delivered.

A platform that is not sure its delivery arrived sends the event again (Slack: the same ``event_id`` with
``x-slack-retry-num``). The first delivery to reach any replica claims the id; every later delivery of it,
to whichever replica, finds the claim and is dropped; a delivery that failed before it was handled gives its
claim back, so the platform's retry is taken. Claims older than ``KEEP`` are pruned: Slack stops retrying
an event after about an hour.
"""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import delete, insert
from sqlalchemy.exc import IntegrityError

from jobs.clock import Clock
from jobs.store.schema import inbound_events, write_transaction
from jobs.store.store import Store

KEEP = timedelta(hours=2)
PRUNE_EVERY = timedelta(minutes=10)
MAX_EVENT_ID = 128


class InboundEvents:
    def __init__(self, store: Store, clock: Clock) -> None:
        self._engine = store.engine
        self._clock = clock
        self._lock = threading.Lock()
        self._pruned_at = clock.now() - PRUNE_EVERY

    def claim(self, event_id: str) -> bool:
        """True for the first delivery of ``event_id`` (now claimed); False when it was received before."""
        now = self._clock.now()
        self._prune_if_due(now)
        try:
            with write_transaction(self._engine) as conn:
                conn.execute(insert(inbound_events).values(event_id=event_id[:MAX_EVENT_ID], received_at=now))
        except IntegrityError:
            return False
        return True

    def release(self, event_id: str) -> None:
        """The delivery that claimed ``event_id`` was not handled: its redelivery is to be taken."""
        with write_transaction(self._engine) as conn:
            conn.execute(delete(inbound_events).where(inbound_events.c.event_id == event_id[:MAX_EVENT_ID]))

    def _prune_if_due(self, now: object) -> None:
        with self._lock:
            if self._clock.now() - self._pruned_at < PRUNE_EVERY:
                return
            self._pruned_at = self._clock.now()
        cutoff = self._clock.now() - KEEP
        with write_transaction(self._engine) as conn:
            conn.execute(delete(inbound_events).where(inbound_events.c.received_at < cutoff))

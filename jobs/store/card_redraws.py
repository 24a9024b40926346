"""Cards waiting to be redrawn: one row per card, however many changes asked, so a card is redrawn once
with its newest state (coalesced), the most important request first.

A request bumps the row's version; a redraw clears the row only when the version is still the one it read,
so a change that lands while the card is being drawn gets its own redraw. A card the chat refuses (its
message deleted, the bot removed from the channel) waits longer after each failure and is given up after
MAX_FAILURES, so it never holds the others back. Rows live in the store: a bot that stops between a change
and its redraw leaves the redraw to whoever delivers next.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from jobs.clock import Clock
from jobs.store.schema import card_redraws as t_redraws
from jobs.store.schema import read_transaction, write_transaction
from jobs.store.store import Store

MAX_FAILURES = 8
MAX_RETRY_SECONDS = 600.0


@dataclass(frozen=True)
class Redraw:
    lineage_id: str
    priority: int  # jobs.rate_limits.Priority
    version: int
    requested_at: datetime
    failures: int = 0


class CardRedraws:
    def __init__(self, store: Store, clock: Clock) -> None:
        self._engine = store.engine
        self._clock = clock

    def request(self, lineage_id: str, priority: int) -> None:
        """Ask for ``lineage_id``'s card to be redrawn; a waiting request keeps its place, takes the higher
        priority of the two and will draw the newest state."""
        now = self._clock.now()
        for tries_left in (1, 0):
            try:
                with write_transaction(self._engine) as conn:
                    row = conn.execute(select(t_redraws).where(t_redraws.c.lineage_id == lineage_id)).first()
                    if row is None:
                        conn.execute(insert(t_redraws).values(
                            lineage_id=lineage_id, priority=int(priority), version=1, requested_at=now,
                            failures=0, not_before=now))
                    else:
                        conn.execute(update(t_redraws).where(t_redraws.c.lineage_id == lineage_id).values(
                            priority=min(row.priority, int(priority)), version=row.version + 1))
                    return
            except IntegrityError:  # another process asked for the same card at the same moment
                if not tries_left:
                    raise

    def due(self, *, limit: int = 20) -> list[Redraw]:
        """The redraws that may go now, most important first, then oldest first."""
        c = t_redraws.c
        query = (select(t_redraws).where(c.not_before <= self._clock.now())
                 .order_by(c.priority, c.requested_at, c.lineage_id).limit(limit))
        with read_transaction(self._engine) as conn:
            return [Redraw(r.lineage_id, r.priority, r.version, r.requested_at, r.failures)
                    for r in conn.execute(query)]

    def drawn(self, redraw: Redraw) -> bool:
        """The card was drawn as of ``redraw``; False when a newer request came meanwhile (it stays due)."""
        stmt = delete(t_redraws).where(t_redraws.c.lineage_id == redraw.lineage_id,
                                       t_redraws.c.version == redraw.version)
        with write_transaction(self._engine) as conn:
            return conn.execute(stmt).rowcount == 1

    def failed(self, redraw: Redraw) -> bool:
        """The chat refused the redraw: try it later (5 s, doubling); False when it was given up."""
        if redraw.failures + 1 >= MAX_FAILURES:
            with write_transaction(self._engine) as conn:
                conn.execute(delete(t_redraws).where(t_redraws.c.lineage_id == redraw.lineage_id))
            return False
        delay = min(MAX_RETRY_SECONDS, 5.0 * 2 ** redraw.failures)
        stmt = update(t_redraws).where(t_redraws.c.lineage_id == redraw.lineage_id).values(
            failures=t_redraws.c.failures + 1, not_before=self._clock.now() + timedelta(seconds=delay))
        with write_transaction(self._engine) as conn:
            conn.execute(stmt)
        return True

    def waiting(self) -> list[Redraw]:
        """Every redraw waiting, due or not, in the order they go."""
        c = t_redraws.c
        query = select(t_redraws).order_by(c.priority, c.requested_at, c.lineage_id)
        with read_transaction(self._engine) as conn:
            return [Redraw(r.lineage_id, r.priority, r.version, r.requested_at, r.failures)
                    for r in conn.execute(query)]

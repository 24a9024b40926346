"""The endings log: each ended lineage's facts, written in the same transaction as the move that ends it, and
the progress of the steps that follow (jobs/endings carries them out; this only keeps them).

Processing claims a due ending with a guarded update (its next try moved on), as the outbox claims a message,
so two processes never run one ending's steps at once; a claimer that dies leaves it due again once the
claim runs out.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, insert, select, update

from jobs.clock import Clock
from jobs.lineage import EndingFacts, LineageStatus
from jobs.store.rows import Ending, to_ending
from jobs.store.schema import claim_due_row, read_transaction, write_transaction
from jobs.store.schema import endings as t_endings


class EndingLog:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    def record(self, conn: Connection, lineage_id: str, outcome: LineageStatus, facts: EndingFacts) -> None:
        """Inside the write that moved ``lineage_id`` to ``outcome`` (Store.transition_lineage)."""
        now = self._clock.now()
        conn.execute(insert(t_endings).values(
            lineage_id=lineage_id, outcome=outcome.value, job_name=facts.job_name, reason=facts.reason,
            facts=dict(facts.details), steps={}, next_try_at=now, created_at=now, settled_at=None,
        ))

    def get(self, lineage_id: str) -> Ending | None:
        with read_transaction(self._engine) as conn:
            row = conn.execute(select(t_endings).where(t_endings.c.lineage_id == lineage_id)).first()
        return None if row is None else to_ending(row)

    def of(self, lineage_ids: Iterable[str]) -> dict[str, Ending]:
        ids = list(lineage_ids)
        if not ids:
            return {}
        with read_transaction(self._engine) as conn:
            rows = conn.execute(select(t_endings).where(t_endings.c.lineage_id.in_(ids))).all()
        return {row.lineage_id: to_ending(row) for row in rows}

    def due(self, *, limit: int = 20, claim_seconds: float, lineage_id: str | None = None) -> list[Ending]:
        """Unsettled endings whose next step is due, oldest first, each claimed for ``claim_seconds``."""
        now = self._clock.now()
        query = (
            select(t_endings)
            .where(t_endings.c.settled_at.is_(None), t_endings.c.next_try_at <= now)
            .order_by(t_endings.c.next_try_at, t_endings.c.created_at, t_endings.c.lineage_id)
            .limit(limit)
        )
        if lineage_id is not None:
            query = query.where(t_endings.c.lineage_id == lineage_id)
        with read_transaction(self._engine) as conn:
            rows = conn.execute(query).all()
        until = now + timedelta(seconds=claim_seconds)
        claimed = []
        for row in rows:
            if self._claim(row.lineage_id, row.next_try_at, until):
                claimed.append(to_ending(row))
        return claimed

    def save(self, lineage_id: str, steps: dict[str, dict[str, Any]], *, next_try_at: datetime,
             settled: bool) -> None:
        """The steps' progress after a pass; ``settled`` once none is left to try."""
        values: dict[str, Any] = {"steps": steps, "next_try_at": next_try_at}
        if settled:
            values["settled_at"] = self._clock.now()
        with write_transaction(self._engine) as conn:
            conn.execute(update(t_endings).where(t_endings.c.lineage_id == lineage_id).values(**values))

    def _claim(self, lineage_id: str, seen_next_try: datetime, until: datetime) -> bool:
        return claim_due_row(self._engine, t_endings.c.lineage_id, lineage_id, t_endings.c.settled_at,
                             seen_next_try, until)

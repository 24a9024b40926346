"""The rate-limit buckets (jobs/rate_limits.py) in the store, so every bot on one database shares them: the
workspace's tier budget of each method, each channel's posting pace, and the Retry-After Slack last answered.

Each call is one write transaction over the rows of its budgets (SQLite takes the write lock at BEGIN,
PostgreSQL locks the rows with SELECT ... FOR UPDATE), so two replicas never both take the last slot.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, Engine, insert, select, update
from sqlalchemy.exc import IntegrityError

from jobs.rate_limits import Bucket, Budget, Priority, blocked, take
from jobs.store.schema import chat_rate_limits as t_limits
from jobs.store.schema import read_transaction, write_transaction


class StoreRateLedger:
    """jobs.rate_limits.RateLedger on the store's engine."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def take(self, budgets: Sequence[Budget], priority: Priority, now: float) -> float:
        keys = sorted({budget.key for budget in budgets})
        for tries_left in (1, 0):
            try:
                with write_transaction(self._engine) as conn:
                    buckets = self._locked(conn, keys)
                    wait, taken = take(buckets, budgets, priority, now)
                    for key, bucket in taken.items():
                        self._put(conn, key, bucket, exists=key in buckets)
                    return wait
            except IntegrityError:  # another replica made the same new bucket first: read it this time
                if not tries_left:
                    raise
        raise AssertionError("unreachable")

    def block(self, key: str, until: float) -> None:
        for tries_left in (1, 0):
            try:
                with write_transaction(self._engine) as conn:
                    current = self._locked(conn, [key]).get(key)
                    self._put(conn, key, blocked(current, until), exists=current is not None)
                    return
            except IntegrityError:
                if not tries_left:
                    raise

    def buckets(self) -> dict[str, Bucket]:
        """Every bucket as stored (for operators and tests)."""
        with read_transaction(self._engine) as conn:
            return {r.key: Bucket(r.next_free, r.blocked_until) for r in conn.execute(select(t_limits))}

    @staticmethod
    def _locked(conn: Connection, keys: Sequence[str]) -> dict[str, Bucket]:
        query = select(t_limits).where(t_limits.c.key.in_(list(keys))).with_for_update()
        return {r.key: Bucket(r.next_free, r.blocked_until) for r in conn.execute(query)}

    @staticmethod
    def _put(conn: Connection, key: str, bucket: Bucket, *, exists: bool) -> None:
        values = {"next_free": bucket.next_free, "blocked_until": bucket.blocked_until}
        if exists:
            conn.execute(update(t_limits).where(t_limits.c.key == key).values(**values))
        else:
            conn.execute(insert(t_limits).values(key=key, **values))

"""Pacing the calls to a rate-limited service (Slack's Web API) by what matters: the pure policy, on any clock.

Each budget a call draws on (a method's per-workspace tier, a channel's posting pace) is a bucket kept by
the generic cell rate algorithm (GCRA): one number, ``next_free``, the moment the bucket is next free. A call
may go when ``next_free - now`` is within the bucket's burst tolerance, and moves ``next_free`` on by one
interval. That bounds what goes in every sliding window (at most ``per_minute + burst - 1`` calls a minute)
and needs one row per bucket, so replicas sharing a store share the budget.

Priorities: a call of lower priority leaves ``RESERVED`` slots of every burst free for the ones above it,
so a job's ending finds room at once while live progress takes only what is left; under sustained
contention the higher priority always reaches its threshold first. ``blocked_until`` is a service's own
``Retry-After``: every call to that method waits it out, whatever its priority.

Nothing here sleeps or knows Slack: the ledger (memory here, the store's in jobs/store/rate_ledger.py) keeps
the buckets, the adapter (bot/slack_governor.py) knows the tiers and carries the decisions out.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Protocol


class Priority(IntEnum):
    """What a call is for; lower goes first."""

    INTERACTIVE = 0  # a person is waiting on this answer (a modal, a button's reply, a launch card)
    ENDING = 1  # a job's ending or failure: its report, its card, the launcher's DM
    CHANGE = 2  # a state change, a relaunch, a routed line, a home tab republished
    PROGRESS = 3  # live progress on a card: the first to yield, its refresh stretched under load


#: Slots of each burst a priority leaves free for those above it.
RESERVED: Mapping[Priority, int] = {
    Priority.INTERACTIVE: 0, Priority.ENDING: 0, Priority.CHANGE: 1, Priority.PROGRESS: 2,
}
#: The longest a call of each priority waits for its slot; past that the caller is told when to come back.
#: A modal's trigger lives 3 s; progress never waits (the next pass redraws it, with newer figures).
MAX_WAIT_SECONDS: Mapping[Priority, float] = {
    Priority.INTERACTIVE: 2.5, Priority.ENDING: 15.0, Priority.CHANGE: 15.0, Priority.PROGRESS: 0.0,
}


@dataclass(frozen=True)
class Rate:
    """``per_minute`` calls sustained, ``burst`` of them at once after a quiet spell."""

    per_minute: float
    burst: int = 1

    def __post_init__(self) -> None:
        if self.per_minute <= 0 or self.burst < 1:
            raise ValueError("a rate needs per_minute > 0 and burst >= 1")

    @property
    def interval(self) -> float:
        return 60.0 / self.per_minute

    def tolerance(self, priority: Priority) -> float:
        """How far ahead of now ``next_free`` may be for a call of ``priority`` to go (negative: only
        after a quiet spell, where the burst is smaller than the reserve)."""
        return (self.burst - 1 - RESERVED[priority]) * self.interval


@dataclass(frozen=True)
class Budget:
    """One bucket a call draws on: its key (``chat.update``, ``channel:C123``) and its rate."""

    key: str
    rate: Rate


@dataclass(frozen=True)
class Bucket:
    next_free: float = 0.0  # GCRA's theoretical arrival time, in the clock's epoch seconds
    blocked_until: float = 0.0  # the service said Retry-After: nothing goes before this


#: Waits shorter than this are none (sums of intervals are not exact in floating point).
EPSILON_SECONDS = 1e-6


def wait_for(bucket: Bucket, rate: Rate, priority: Priority, now: float) -> float:
    """Seconds until a call of ``priority`` may draw on ``bucket`` (0: now)."""
    wait = max(bucket.blocked_until - now, bucket.next_free - rate.tolerance(priority) - now)
    return wait if wait > EPSILON_SECONDS else 0.0


def take(buckets: Mapping[str, Bucket], budgets: Sequence[Budget], priority: Priority,
         now: float) -> tuple[float, dict[str, Bucket]]:
    """(0, the buckets after the call) when every budget has room now; else (the wait, no change). A call
    draws on all its budgets or none."""
    wait = max((wait_for(buckets.get(b.key, Bucket()), b.rate, priority, now) for b in budgets), default=0.0)
    if wait > 0:
        return wait, {}
    taken = {}
    for budget in budgets:
        bucket = buckets.get(budget.key, Bucket())
        taken[budget.key] = replace(bucket, next_free=max(bucket.next_free, now) + budget.rate.interval)
    return 0.0, taken


def blocked(bucket: Bucket | None, until: float) -> Bucket:
    """``bucket`` after the service answered Retry-After up to ``until`` (a later answer never shortens it)."""
    bucket = bucket or Bucket()
    return replace(bucket, blocked_until=max(bucket.blocked_until, until))


class RateLedger(Protocol):
    """Where the buckets live: one process (MemoryLedger) or every replica on a store (StoreRateLedger)."""

    def take(self, budgets: Sequence[Budget], priority: Priority, now: float) -> float:
        """Draw on every budget when all have room (returns 0), else return the seconds to wait."""
        ...

    def block(self, key: str, until: float) -> None:
        """Nothing draws on ``key`` before ``until`` (epoch seconds)."""
        ...


class MemoryLedger:
    """The buckets of one process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, Bucket] = {}

    def take(self, budgets: Sequence[Budget], priority: Priority, now: float) -> float:
        with self._lock:
            wait, taken = take(self._buckets, budgets, priority, now)
            self._buckets.update(taken)
            return wait

    def block(self, key: str, until: float) -> None:
        with self._lock:
            self._buckets[key] = blocked(self._buckets.get(key), until)


# ---------------------------------------------------------------- the priority of the calls in progress

_PRIORITY: ContextVar[Priority] = ContextVar("trainbot_call_priority", default=Priority.INTERACTIVE)


@contextmanager
def prioritised(priority: Priority) -> Iterator[None]:
    """Calls made inside (in this thread) go at ``priority``; a call nobody marked is INTERACTIVE."""
    token = _PRIORITY.set(priority)
    try:
        yield
    finally:
        _PRIORITY.reset(token)


def current_priority() -> Priority:
    return _PRIORITY.get()

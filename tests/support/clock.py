"""A clock for tests: the watcher, backoff and schedules take it where the bot takes SystemClock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


class FakeClock:
    """A clock that only moves when told to; `sleep` advances it instead of waiting."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=timezone.utc)

    def now(self) -> datetime:
        return self._now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)

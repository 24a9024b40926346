"""The cron port: cron and time-zone arithmetic, which the schedules need and bot/scheduler.py provides with
APScheduler's CronTrigger, so that nothing in jobs/ imports a scheduler."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol


class CronCalendar(Protocol):
    """Cron arithmetic in a time zone (bot/scheduler.py implements it with APScheduler)."""

    def validate(self, cron: str, tz: str) -> None:
        """Raise ScheduleError (one sentence) for a bad expression or unknown time zone."""
        ...

    def next_fire(self, cron: str, tz: str, after: datetime) -> datetime | None:
        """The first fire time strictly after `after`, as an aware UTC datetime (None: never)."""
        ...

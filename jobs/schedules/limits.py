"""What one person's schedules may cost the bot: how often a schedule may fire (TRAINBOT_MIN_SCHEDULE_MINUTES)
and how many schedules one person may have (TRAINBOT_MAX_SCHEDULES_PER_USER)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jobs.errors import LimitReached, ScheduleError

if TYPE_CHECKING:
    from jobs.schedules.cron import CronCalendar

#: The fires looked at for the shortest gap: a day of an hourly schedule and far more; the window ends
#: earlier for a rare one. A cron's gaps repeat with its fields (at most a year), and every frequent one
#: shows its shortest gap within its first fires.
FIRES_CHECKED = 400
WINDOW = timedelta(days=400)


def shortest_gap(calendar: CronCalendar, cron: str, tz: str, after: datetime) -> timedelta | None:
    """The shortest time between two fires of ``cron`` among its next FIRES_CHECKED (within WINDOW)."""
    previous = calendar.next_fire(cron, tz, after)
    shortest: timedelta | None = None
    for _ in range(FIRES_CHECKED):
        if previous is None or previous - after > WINDOW:
            break
        following = calendar.next_fire(cron, tz, previous)
        if following is None:
            break
        gap = following - previous
        shortest = gap if shortest is None else min(shortest, gap)
        previous = following
    return shortest


def check_cadence(calendar: CronCalendar, cron: str, tz: str, now: datetime, min_minutes: float) -> None:
    """ScheduleError when ``cron`` fires more often than every ``min_minutes`` (0: no minimum)."""
    if min_minutes <= 0:
        return
    gap = shortest_gap(calendar, cron, tz, now)
    if gap is not None and gap < timedelta(minutes=min_minutes):
        raise ScheduleError(
            f"cron={cron!r} fires every {_minutes(gap)}, more often than a schedule may (every "
            f"{min_minutes:g} minutes at most, TRAINBOT_MIN_SCHEDULE_MINUTES): e.g. cron=\"0 2 * * *\" runs nightly."
        )


def check_count(have: int, most: int) -> None:
    if have >= most:
        raise LimitReached(
            f"You have {have} schedules, the most one person may have (TRAINBOT_MAX_SCHEDULES_PER_USER): "
            "remove one with /schedule remove NAME first."
        )


def _minutes(gap: timedelta) -> str:
    minutes = gap.total_seconds() / 60
    return "minute" if minutes == 1 else f"{minutes:g} minutes"

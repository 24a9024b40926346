"""What jobs have cost so far: one lineage (the App Home's running jobs) and the team, today and this week
(the App Home's spend line), next to what the daily budget checks (jobs/budget.py's ledger).

An ended attempt costs its billable seconds; a running one costs the time since it was created, at the
typical spot price when it is spot (SageMaker bills it at the end; this is the figure so far). An attempt
counts in the day and week it was created in (UTC; weeks start on Monday).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jobs.budget import SpendLedger, start_of_utc_day
from jobs.errors import TrainbotError
from jobs.lineage import AttemptStatus
from jobs.planning.prices import cost_of

if TYPE_CHECKING:
    from jobs.lineage import Attempt, Lineage
    from jobs.store.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TeamSpend:
    today_usd: float  # billed, or running so far, by attempts created today
    week_usd: float  # the same since Monday
    committed_today_usd: float  # what the daily budget checks: the most today's attempts and endpoints may cost
    daily_budget_usd: float | None


def attempt_cost_so_far(attempt: Attempt, instance_count: int, now: datetime) -> float:
    if attempt.status is AttemptStatus.LAUNCH_FAILED:
        return 0.0  # no job ever ran
    if attempt.status.is_terminal():
        seconds = float(attempt.billable_seconds or 0)
    else:
        seconds = max(0.0, (now - attempt.created_at).total_seconds())
    try:
        return cost_of(attempt.instance_type, instance_count, seconds, attempt.spot)
    except TrainbotError:  # a type the price table does not know: no figure rather than no page
        log.warning("no price for %s; %s counted at 0", attempt.instance_type, attempt.job_name)
        return 0.0


def lineage_cost_so_far(lineage: Lineage, now: datetime) -> float:
    return sum(attempt_cost_so_far(a, lineage.spec.instance_count, now) for a in lineage.attempts)


def start_of_week(now: datetime) -> datetime:
    day = start_of_utc_day(now)
    return day - timedelta(days=day.weekday())


def team_spend(store: Store, ledger: SpendLedger, now: datetime, *, daily_budget_usd: float | None) -> TeamSpend:
    day = start_of_utc_day(now)
    today = this_week = 0.0
    for attempt, spec in store.attempts_created_since(start_of_week(now)):
        cost = attempt_cost_so_far(attempt, spec.instance_count, now)
        this_week += cost
        if attempt.created_at >= day:
            today += cost
    return TeamSpend(today_usd=today, week_usd=this_week, committed_today_usd=ledger.spent_today(now),
                     daily_budget_usd=daily_budget_usd)

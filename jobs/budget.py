"""What the team has spent, or may yet be billed, today: the one ledger every money decision reads.

A launch, a relaunch and a deploy each compare their worst case with what is left. Today's spend counts
every attempt created today (what it billed once it ended, else the most it can be billed) and every hour
an endpoint is up today, so a lineage that relaunches five times counts five times.
"""

from __future__ import annotations

from datetime import datetime, time, timezone

from jobs.clock import Clock
from jobs.endpoints.store import Endpoint, EndpointStore
from jobs.errors import BudgetExceeded
from jobs.lineage import Attempt, AttemptStatus
from jobs.planning.prices import attempt_worst_case_usd, cost_of, usd
from jobs.planning.spec import JobSpec
from jobs.settings import Settings
from jobs.store.store import Store

SECONDS_PER_HOUR = 3600.0


class SpendLedger:
    def __init__(self, store: Store, endpoints: EndpointStore, *, daily_budget_usd: float | None) -> None:
        self._store = store
        self._endpoints = endpoints
        self._daily = daily_budget_usd

    @classmethod
    def from_settings(cls, store: Store, clock: Clock, settings: Settings) -> SpendLedger:
        return cls(store, EndpointStore(store, clock=clock), daily_budget_usd=settings.trainbot_daily_budget_usd)

    def spent_today(self, now: datetime) -> float:
        since = start_of_utc_day(now)
        attempts = sum(_attempt_usd(a, spec) for a, spec in self._store.attempts_created_since(since))
        endpoints = sum(_endpoint_usd(e, since, now) for e in self._endpoints.list(include_ended=True))
        return attempts + endpoints

    def left_today(self, now: datetime) -> float | None:
        """What TRAINBOT_DAILY_BUDGET_USD leaves today; None when there is no daily budget."""
        if self._daily is None:
            return None
        return self._daily - self.spent_today(now)

    def check(self, worst_case_usd: float, now: datetime, *, what: str = "this job") -> None:
        """BudgetExceeded when ``worst_case_usd`` more would pass today's budget."""
        if self._daily is None:
            return
        spent = self.spent_today(now)
        if spent + worst_case_usd > self._daily:
            raise BudgetExceeded(
                f"Today's jobs and endpoints could already cost up to {usd(spent)} and {what} up to "
                f"{usd(worst_case_usd)}, over the {usd(self._daily)} daily limit (TRAINBOT_DAILY_BUDGET_USD): "
                "wait until 00:00 UTC, make it smaller or shorter, or ask an admin to raise the limit."
            )


def start_of_utc_day(now: datetime) -> datetime:
    return datetime.combine(now.astimezone(timezone.utc).date(), time.min, tzinfo=timezone.utc)


def _attempt_usd(attempt: Attempt, spec: JobSpec) -> float:
    if attempt.status is AttemptStatus.LAUNCH_FAILED:
        return 0.0  # no job ever ran
    if attempt.status.is_terminal() and attempt.billable_seconds is not None:
        return cost_of(attempt.instance_type, spec.instance_count, attempt.billable_seconds, attempt.spot)
    return attempt_worst_case_usd(attempt.instance_type, spec.instance_count, attempt.spot, spec.max_run)


def _endpoint_usd(endpoint: Endpoint, since: datetime, now: datetime) -> float:
    hourly = endpoint.hourly_usd()
    if not hourly:
        return 0.0
    start = max(endpoint.created_at, since)
    end = min(endpoint.ended_at or now, now)
    return hourly * max((end - start).total_seconds(), 0.0) / SECONDS_PER_HOUR

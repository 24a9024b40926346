"""What a job costs: on-demand list prices, a typical spot discount, and the cost bounds of a plan.

The list prices are in jobs/planning/prices.py. The estimate of a plan, all instances together:
- ``hourly_usd``: the on-demand price per hour; ``spot_hourly_usd``: less the typical spot discount (spot jobs);
- ``attempt_worst_case_usd``: the most one attempt can be billed: ``max_run`` seconds (SageMaker bills a spot
  job's training seconds only, at most ``max_run``, however long it waits) at up to the on-demand price
  (what a spot price can rise to);
- ``worst_case_usd``: the most the whole lineage can be billed: every allowed attempt (1 + the restart cap:
  the spec's ``max_restarts``, never above TRAINBOT_MAX_RESTARTS) at the attempt worst case on the dearest
  instance type recovery may move it to (the plan's fallbacks, jobs.planning.fallbacks), capped by
  TRAINBOT_MAX_JOB_USD where set (relaunches stop at the cap);
- ``expected_usd``: ``max_run`` at the price you expect to pay (the typical spot price for spot jobs): one
  attempt that runs to its limit. The forecast (jobs.planning.forecast) says what the job will likely cost;
- ``spot_savings_pct``: the typical discount, in percent (spot jobs only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.errors import BudgetExceeded
from jobs.planning.batch import batch_of
from jobs.planning.fallbacks import lineage_fallbacks
from jobs.planning.prices import SECONDS_PER_HOUR, attempt_worst_case_usd, hourly_usd, spot_discount, usd

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jobs.planning.spec import JobSpec



@dataclass(frozen=True)
class CostEstimate:
    """The cost bounds of a plan, all instances together (see the module docstring)."""

    hourly_usd: float
    spot_hourly_usd: float | None
    worst_case_usd: float
    expected_usd: float
    spot_savings_pct: float | None
    on_demand_usd: float  # max_run at on-demand: what the job would cost without spot
    attempt_worst_case_usd: float = 0.0  # the first attempt's ceiling
    attempts: int = 1  # the attempts the lineage may make (1 + the restart cap)
    dearest_type: str = ""  # the dearest type recovery may move the lineage to
    capped_by_usd: float | None = None  # TRAINBOT_MAX_JOB_USD, when it lowered worst_case_usd

    @property
    def spot_savings_usd(self) -> float | None:
        if self.spot_hourly_usd is None:
            return None
        return self.on_demand_usd - self.expected_usd

    def to_json(self) -> dict[str, float | int | str | None]:
        """Plain data; every amount's key names its unit (``_usd``), rounded to cents (hourly to 0.1 cent)."""
        return {
            "hourly_usd": round(self.hourly_usd, 3),
            "spot_hourly_usd": _round(self.spot_hourly_usd, 3),
            "worst_case_usd": round(self.worst_case_usd, 2),
            "attempt_worst_case_usd": round(self.attempt_worst_case_usd, 2),
            "expected_usd": round(self.expected_usd, 2),
            "on_demand_usd": round(self.on_demand_usd, 2),
            "spot_savings_usd": _round(self.spot_savings_usd, 2),
            "worst_case_attempts": self.attempts,
            "worst_case_instance_type": self.dearest_type,
            "worst_case_capped_at_usd": _round(self.capped_by_usd, 2),
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def lineage_worst_case(
    spec: JobSpec, *, max_restarts: int | None = None, max_job_usd: float | None = None,
    types: Sequence[str] | None = None,
) -> tuple[float, int, str, bool]:
    """(worst case of the lineage, attempts, the dearest type, whether ``max_job_usd`` capped it);
    ``types``: every type recovery may move the lineage to (None: the default order's fallbacks)."""
    restarts = spec.max_restarts if max_restarts is None else min(spec.max_restarts, max_restarts)
    attempts = 1 + max(0, restarts)
    types = [spec.instance_type, *(reachable_types(spec) if types is None else types)]
    dearest = max(types, key=lambda name: (hourly_usd(name), name))
    total = attempts * attempt_worst_case_usd(dearest, spec.instance_count, spec.spot, spec.max_run)
    if max_job_usd is not None and total > max_job_usd:
        return max_job_usd, attempts, dearest, True
    return total, attempts, dearest, False


def reachable_types(spec: JobSpec) -> list[str]:
    """The types the default recovery order may move ``spec`` to (jobs.planning.fallbacks)."""
    batch = batch_of(spec.hyperparameters, spec.instance.gpus, spec.instance_count)
    return lineage_fallbacks(spec, batch).types()


def estimate(
    spec: JobSpec, *, max_restarts: int | None = None, max_job_usd: float | None = None,
    types: Sequence[str] | None = None,
) -> CostEstimate:
    """The cost bounds of ``spec``; ``max_restarts`` and ``max_job_usd`` are the operator's caps
    (TRAINBOT_MAX_RESTARTS, TRAINBOT_MAX_JOB_USD); ``types`` the ones recovery may move it to."""
    count = spec.instance_count
    on_demand = hourly_usd(spec.instance_type) * count
    on_demand_usd = on_demand * spec.max_run / SECONDS_PER_HOUR
    spot = hourly_usd(spec.instance_type, spot=True) * count if spec.spot else None
    worst, attempts, dearest, capped = lineage_worst_case(
        spec, max_restarts=max_restarts, max_job_usd=max_job_usd, types=types
    )
    return CostEstimate(
        hourly_usd=on_demand,
        spot_hourly_usd=spot,
        worst_case_usd=worst,
        expected_usd=(spot if spot is not None else on_demand) * spec.max_run / SECONDS_PER_HOUR,
        spot_savings_pct=round(spot_discount(spec.instance_type) * 100.0, 1) if spec.spot else None,
        on_demand_usd=on_demand_usd,
        attempt_worst_case_usd=attempt_worst_case_usd(spec.instance_type, count, spec.spot, spec.max_run),
        attempts=attempts,
        dearest_type=dearest,
        capped_by_usd=max_job_usd if capped else None,
    )


def check_job_budget(cost: CostEstimate, max_job_usd: float | None) -> None:
    """BudgetExceeded when one attempt could already pass the per-job cap (TRAINBOT_MAX_JOB_USD).

    The lineage as a whole never passes it: its worst case is capped there, as relaunches stop at the cap."""
    if max_job_usd is None or cost.attempt_worst_case_usd <= max_job_usd:
        return
    raise BudgetExceeded(
        f"This job could cost up to {usd(cost.attempt_worst_case_usd)} in one attempt (max_run at on-demand "
        f"prices), over the {usd(max_job_usd)} per-job limit (TRAINBOT_MAX_JOB_USD): lower max_run, "
        "instance_count or instance_type."
    )

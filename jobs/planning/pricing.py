"""What a job costs: on-demand list prices, a typical spot discount, and the estimate of a plan.

Prices come from data/prices.json (us-east-1 on-demand SageMaker training list prices; the file names its
source and date). Spot prices move; the file carries a typical managed-spot discount per family.

The estimate of one job (one attempt), all instances together:
- ``hourly_usd``: the on-demand price per hour;
- ``spot_hourly_usd``: that price less the typical spot discount (spot jobs only);
- ``worst_case_usd``: ``max_run`` at on-demand; for a spot job ``max_wait`` at the typical spot price
  (SageMaker bills only training seconds, at most ``max_run``, so this bound is conservative unless the spot
  price rises far above its usual level). Relaunches after capacity losses are further attempts, each
  bounded the same way;
- ``expected_usd``: ``max_run`` at the price you expect to pay (typical spot price for spot jobs), a ceiling on
  the likely bill, since training usually ends before ``max_run``;
- ``spot_savings_pct``: the typical discount, in percent (spot jobs only).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.errors import BudgetExceeded
from jobs.planning.instances import family_of, instance_info

if TYPE_CHECKING:
    from jobs.planning.spec import JobSpec

DATA_FILE = Path(__file__).parent / "data" / "prices.json"
SECONDS_PER_HOUR = 3600.0


@cache
def price_table() -> dict[str, Any]:
    """The parsed prices.json (source, date, prices, discounts)."""
    data: dict[str, Any] = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return data


def spot_discount(instance_type: str) -> float:
    """The typical managed-spot discount of the type's family, as a fraction (0.7 = 70% off)."""
    name = instance_info(instance_type).name
    return float(price_table()["typical_spot_discount"].get(family_of(name), 0.0))


def hourly_usd(instance_type: str, *, spot: bool = False) -> float:
    """The price of one instance-hour, on-demand or at the typical spot price."""
    name = instance_info(instance_type).name
    price = float(price_table()["on_demand_hourly_usd"][name])
    return price * (1.0 - spot_discount(name)) if spot else price


def cost_of(instance_type: str, instance_count: int, billable_seconds: float, spot: bool) -> float:
    """What ``billable_seconds`` of ``instance_count`` instances cost (typical spot price when ``spot``)."""
    return hourly_usd(instance_type, spot=spot) * instance_count * max(billable_seconds, 0.0) / SECONDS_PER_HOUR


def attempt_worst_case_usd(instance_type: str, instance_count: int, spot: bool, max_run: float) -> float:
    """The most one attempt can be billed: ``max_run`` of every instance at up to the on-demand price (a
    spot job is billed for training time, at most max_run, and its price can rise to on-demand).
    ``spot`` is taken for the signature's sake: the ceiling is the same."""
    return cost_of(instance_type, instance_count, max_run, spot=False)


@dataclass(frozen=True)
class CostEstimate:
    """The cost of one attempt of a job, all instances together (see the module docstring)."""

    hourly_usd: float
    spot_hourly_usd: float | None
    worst_case_usd: float
    expected_usd: float
    spot_savings_pct: float | None
    on_demand_usd: float  # max_run at on-demand: what the job would cost without spot

    @property
    def spot_savings_usd(self) -> float | None:
        if self.spot_hourly_usd is None:
            return None
        return self.on_demand_usd - self.expected_usd

    def to_json(self) -> dict[str, float | None]:
        """Plain data; every key names its unit (``_usd``), amounts rounded to cents (hourly to 0.1 cent)."""
        return {
            "hourly_usd": round(self.hourly_usd, 3),
            "spot_hourly_usd": _round(self.spot_hourly_usd, 3),
            "worst_case_usd": round(self.worst_case_usd, 2),
            "expected_usd": round(self.expected_usd, 2),
            "on_demand_usd": round(self.on_demand_usd, 2),
            "spot_savings_usd": _round(self.spot_savings_usd, 2),
        }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def estimate(spec: JobSpec) -> CostEstimate:
    """The cost estimate of ``spec`` (one attempt)."""
    count = spec.instance_count
    on_demand = hourly_usd(spec.instance_type) * count
    on_demand_usd = on_demand * spec.max_run / SECONDS_PER_HOUR
    if not spec.spot:
        return CostEstimate(on_demand, None, on_demand_usd, on_demand_usd, None, on_demand_usd)
    spot = hourly_usd(spec.instance_type, spot=True) * count
    max_wait = spec.max_wait if spec.max_wait is not None else spec.max_run
    return CostEstimate(
        hourly_usd=on_demand,
        spot_hourly_usd=spot,
        worst_case_usd=spot * max_wait / SECONDS_PER_HOUR,
        expected_usd=spot * spec.max_run / SECONDS_PER_HOUR,
        spot_savings_pct=round(spot_discount(spec.instance_type) * 100.0, 1),
        on_demand_usd=on_demand_usd,
    )


def usd(amount: float) -> str:
    """``1234.5`` -> ``$1,234.50``."""
    return f"${amount:,.2f}"


def check_job_budget(cost: CostEstimate, max_job_usd: float | None) -> None:
    """BudgetExceeded when the worst case of ``cost`` passes the per-job cap (TRAINBOT_MAX_JOB_USD)."""
    if max_job_usd is None or cost.worst_case_usd <= max_job_usd:
        return
    raise BudgetExceeded(
        f"This job could cost up to {usd(cost.worst_case_usd)} (worst case), over the {usd(max_job_usd)} "
        "per-job limit (TRAINBOT_MAX_JOB_USD): lower max_run, instance_count or instance_type, or use spot=yes."
    )

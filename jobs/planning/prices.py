"""List prices: SageMaker's on-demand price per instance-hour, the typical managed-spot discount, what a span of
billed seconds costs, and how an amount reads.

Prices come from data/prices.json (us-east-1 on-demand SageMaker training list prices; the file names its
source and date). Spot prices move; the file carries a typical managed-spot discount per family. The cost
bounds of a plan, built on these, are in jobs/planning/pricing.py.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jobs.planning.instances import family_of, instance_info

DATA_FILE = Path(__file__).parent / "data" / "prices.json"
SECONDS_PER_HOUR = 3600.0


@cache
def price_table() -> dict[str, Any]:
    """The parsed prices.json (source, date, prices, discounts)."""
    data: dict[str, Any] = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return data


def is_estimate(instance_type: str) -> bool:
    """Whether the type's price is the data file's estimate (no public list price was found; it says why)."""
    name = instance_info(instance_type).name
    return name in price_table().get("additions", {}).get("estimated", {})


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


def attempt_worst_case_usd(instance_type: str, count: int, spot: bool, max_run: float) -> float:
    """The most one attempt can be billed: ``max_run`` seconds of ``count`` instances at the on-demand
    price. ``spot`` does not lower it: a spot job bills at most ``max_run`` training seconds (its wait for
    capacity is not billed), and the spot price can rise to the on-demand price."""
    return hourly_usd(instance_type) * count * max(max_run, 0) / SECONDS_PER_HOUR


def usd(amount: float) -> str:
    """``1234.5`` -> ``$1,234.50``."""
    return f"${amount:,.2f}"

"""Prices, estimates and the per-job budget."""

from __future__ import annotations

import pytest

from jobs.errors import BudgetExceeded, SpecError
from jobs.planning.grammar import parse_command
from jobs.planning.instances import instance_names
from jobs.planning.pricing import check_job_budget, cost_of, estimate, hourly_usd, price_table, spot_discount


def test_the_price_file_names_its_source_and_date() -> None:
    table = price_table()
    assert table["region"] == "us-east-1"
    assert table["source"].startswith("https://aws.amazon.com/sagemaker/pricing")
    assert table["as_of"]


def test_every_instance_type_has_a_price_and_a_family_discount() -> None:
    for name in instance_names():
        assert hourly_usd(name) > 0
        assert 0 < spot_discount(name) < 1
        assert hourly_usd(name, spot=True) < hourly_usd(name)


def test_hourly_prices() -> None:
    assert hourly_usd("ml.p3.2xlarge") == pytest.approx(3.825)
    assert hourly_usd("p3.2xlarge", spot=True) == pytest.approx(3.825 * 0.3)
    with pytest.raises(SpecError, match="Unknown instance type"):
        hourly_usd("ml.x9.large")


def test_cost_of() -> None:
    assert cost_of("ml.p3.16xlarge", 2, 1800, spot=False) == pytest.approx(28.152)
    assert cost_of("ml.p3.2xlarge", 1, 3600, spot=True) == pytest.approx(3.825 * 0.3)
    assert cost_of("ml.p3.2xlarge", 1, -5, spot=False) == 0


def test_on_demand_estimate_matches_the_article() -> None:
    # The article: one p3.2xlarge for ~4 h cost ~$15.
    cost = estimate(parse_command("model=m dataset=squad max_run=4h"))
    assert cost.hourly_usd == pytest.approx(3.825)
    assert cost.worst_case_usd == pytest.approx(15.3)
    assert cost.expected_usd == cost.worst_case_usd
    assert cost.spot_hourly_usd is None and cost.spot_savings_pct is None and cost.spot_savings_usd is None


def test_data_parallel_estimate_counts_every_instance() -> None:
    cost = estimate(parse_command("bert-squad max_run=28m"))
    assert cost.hourly_usd == pytest.approx(2 * 28.152)
    assert cost.worst_case_usd == pytest.approx(2 * 28.152 * 28 / 60)  # ~$26; the article says ~$24


def test_spot_estimate() -> None:
    cost = estimate(parse_command("distilbert-spot"))
    assert cost.spot_hourly_usd == pytest.approx(3.825 * 0.3)
    assert cost.worst_case_usd == pytest.approx(3.825 * 0.3 * 3600 / 3600)  # max_wait at the spot price
    assert cost.expected_usd == pytest.approx(3.825 * 0.3 * 1000 / 3600)  # max_run at the spot price
    assert cost.on_demand_usd == pytest.approx(3.825 * 1000 / 3600)
    assert cost.spot_savings_pct == 70.0
    assert cost.spot_savings_usd == pytest.approx(cost.on_demand_usd - cost.expected_usd)


def test_to_json_keys_say_usd() -> None:
    for text in ("bert-squad", "distilbert-spot"):
        data = estimate(parse_command(text)).to_json()
        assert data and all("usd" in key for key in data)
        assert data["hourly_usd"] > 0


def test_job_budget() -> None:
    cost = estimate(parse_command("bert-squad"))
    check_job_budget(cost, None)
    check_job_budget(cost, cost.worst_case_usd)
    with pytest.raises(BudgetExceeded) as caught:
        check_job_budget(cost, 100.0)
    message = caught.value.message
    assert "$1,351.30" in message and "$100.00" in message and "TRAINBOT_MAX_JOB_USD" in message
    assert "\n" not in message

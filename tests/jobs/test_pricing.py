"""Prices, estimates and the per-job budget."""

from __future__ import annotations

import pytest

from jobs.errors import BudgetExceeded, SpecError
from jobs.lifecycle.recovery import RecoveryPolicy, candidates
from jobs.planning.grammar import parse_command
from jobs.planning.instances import instance_info, instance_names
from jobs.planning.plan import build_plan
from jobs.planning.prices import (
    attempt_worst_case_usd,
    cost_of,
    hourly_usd,
    is_estimate,
    price_table,
    spot_discount,
)
from jobs.planning.pricing import check_job_budget, estimate


def test_the_price_file_names_its_source_and_date() -> None:
    table = price_table()
    assert table["region"] == "us-east-1"
    assert table["source"].startswith("https://aws.amazon.com/sagemaker/pricing")
    assert table["as_of"]


def test_every_instance_type_has_a_price_and_a_family_discount() -> None:
    for name in instance_names():
        assert hourly_usd(name) > 0
        if not instance_info(name).spot:  # no managed spot on it: no discount either
            assert spot_discount(name) == 0 and is_estimate(name)
            continue
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


def test_one_attempt_is_billed_at_most_max_run_at_on_demand() -> None:
    # The article: one p3.2xlarge for ~4 h cost ~$15.
    assert attempt_worst_case_usd("ml.p3.2xlarge", 1, False, 4 * 3600) == pytest.approx(15.3)
    # Spot bills at most max_run training seconds, at a price that can rise to on-demand.
    assert attempt_worst_case_usd("ml.p3.2xlarge", 1, True, 4 * 3600) == pytest.approx(15.3)
    assert attempt_worst_case_usd("ml.p3.16xlarge", 2, False, 1800) == pytest.approx(28.152)


def test_the_worst_case_is_every_attempt_on_the_dearest_fallback() -> None:
    cost = estimate(parse_command("model=m dataset=squad max_run=4h"))
    assert cost.hourly_usd == pytest.approx(3.825)
    assert cost.attempt_worst_case_usd == pytest.approx(15.3)
    # 1 + 5 relaunches; a p3.2xlarge job keeps its one GPU (g6, g5, g4dn .xlarge: all cheaper).
    assert (cost.attempts, cost.dearest_type) == (6, "ml.p3.2xlarge")
    assert cost.worst_case_usd == pytest.approx(6 * 3.825 * 4)
    assert cost.capped_by_usd is None
    # any-count may move it to 8 GPUs: the worst case is every attempt there.
    spec = parse_command("model=m dataset=squad max_run=4h")
    wide = build_plan(spec, bucket="b", lineage_id="x", recovery_order="any-count").cost
    # (not ml.p6-b200: its B200 needs a newer CUDA than the 4.28.1 image's)
    assert wide.dearest_type in ("ml.p5e.48xlarge", "ml.p5en.48xlarge")
    assert wide.worst_case_usd == pytest.approx(6 * 130.028 * 4)


def test_the_restart_caps_bound_the_attempts() -> None:
    spec = parse_command("model=m dataset=squad max_run=1h max_restarts=3")
    assert estimate(spec).attempts == 4
    assert estimate(spec, max_restarts=1).attempts == 2  # TRAINBOT_MAX_RESTARTS below the spec's
    assert estimate(spec, max_restarts=10).attempts == 4  # the spec's own cap when it is lower
    assert estimate(parse_command("model=m dataset=squad max_restarts=0")).attempts == 1


def test_data_parallel_moves_only_to_types_it_runs_on() -> None:
    cost = estimate(parse_command("bert-squad max_run=28m"))
    # 8 GPUs on the types smddp runs on: p3dn, p4d and p4de besides p3.16xlarge (never p5, g5 or g6).
    assert cost.dearest_type == "ml.p4de.24xlarge"
    assert cost.worst_case_usd == pytest.approx(6 * 2 * 47.11 * 28 / 60)


def test_the_per_job_cap_caps_the_lineage() -> None:
    cost = estimate(parse_command("distilbert-spot"), max_job_usd=5.0)  # uncapped: 6 x 1000 s at $3.825/h
    assert cost.worst_case_usd == 5.0 and cost.capped_by_usd == 5.0
    assert estimate(parse_command("distilbert-spot"), max_job_usd=1000.0).capped_by_usd is None


@pytest.mark.parametrize("text", ["distilbert-spot", "bert-squad max_run=2h", "roberta-mnli max_restarts=2",
                                  "model=m dataset=imdb type=ml.g4dn.xlarge spot=yes fallback=yes max_run=3h",
                                  "model=m dataset=imdb type=ml.g5.2xlarge max_restarts=1"])
def test_no_path_recovery_can_take_bills_more_than_the_worst_case(text: str) -> None:
    """Walk recovery's own candidates: each attempt on any type it may reach, billed max_run at on-demand."""
    spec = parse_command(text)
    cap = RecoveryPolicy().restart_cap(spec)
    reachable = candidates(spec)
    dearest_path = (1 + cap) * max(
        attempt_worst_case_usd(name, spec.instance_count, spot, spec.max_run) for name, spot in reachable
    )
    assert estimate(spec, max_restarts=RecoveryPolicy().max_restarts).worst_case_usd == pytest.approx(dearest_path)


def test_spot_estimate() -> None:
    cost = estimate(parse_command("distilbert-spot"))
    assert cost.spot_hourly_usd == pytest.approx(3.825 * 0.3)
    assert cost.attempt_worst_case_usd == pytest.approx(3.825 * 1000 / 3600)  # max_run at up to on-demand
    assert cost.expected_usd == pytest.approx(3.825 * 0.3 * 1000 / 3600)  # max_run at the spot price
    assert cost.on_demand_usd == pytest.approx(3.825 * 1000 / 3600)
    assert cost.spot_savings_pct == 70.0
    assert cost.spot_savings_usd == pytest.approx(cost.on_demand_usd - cost.expected_usd)


def test_to_json_keys_say_their_unit() -> None:
    for text in ("bert-squad", "distilbert-spot"):
        data = estimate(parse_command(text)).to_json()
        amounts = [key for key, value in data.items() if isinstance(value, float)]
        assert amounts and all("usd" in key for key in amounts)
        assert data["hourly_usd"] > 0 and data["worst_case_attempts"] == 6


def test_job_budget_refuses_a_job_whose_one_attempt_passes_the_cap() -> None:
    cost = estimate(parse_command("bert-squad"))
    check_job_budget(cost, None)
    check_job_budget(cost, cost.attempt_worst_case_usd)
    with pytest.raises(BudgetExceeded) as caught:
        check_job_budget(cost, 100.0)
    message = caught.value.message
    assert "$1,351.30" in message and "$100.00" in message and "TRAINBOT_MAX_JOB_USD" in message
    assert "\n" not in message


def test_job_budget_lets_relaunches_stop_at_the_cap() -> None:
    # One attempt fits under the cap, six would not: allowed, and the worst case is the cap itself.
    cost = estimate(parse_command("distilbert-spot"), max_job_usd=5.0)
    check_job_budget(cost, 5.0)
    assert cost.worst_case_usd == 5.0

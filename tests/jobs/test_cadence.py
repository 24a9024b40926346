"""The loss and evaluation cadence: at least 20 loss points for every preset at its real length, the same
rule for the local scale-down, and never over what the person set."""

from __future__ import annotations

import pytest

from jobs.backends.local.scaling import LocalLimits, scale_plan
from jobs.planning import cadence
from jobs.planning.grammar import parse_command
from jobs.planning.plan import build_plan, plan_hyperparameters


@pytest.mark.parametrize(
    ("preset", "steps", "logging_steps"),
    [("bert-squad", 100, 5), ("roberta-mnli", 500, 25), ("distilbert-spot", 782, 39)],  # 1 epoch of IMDB at 32
)
def test_every_preset_logs_at_least_20_losses_at_its_real_length(preset: str, steps: int, logging_steps: int) -> None:
    spec = parse_command(preset)
    hps = plan_hyperparameters(spec)
    assert cadence.total_steps(spec, spec.hyperparameters) == steps
    assert hps["logging_steps"] == logging_steps
    assert cadence.loss_points(steps, logging_steps) >= 20
    assert hps["eval_strategy"] == "steps" and hps["eval_steps"] == -(-steps // 4)


def test_what_the_person_set_wins() -> None:
    hps = plan_hyperparameters(parse_command("bert-squad logging_steps=50 hp.eval_strategy=no"))
    assert hps["logging_steps"] == 50 and hps["eval_strategy"] == "no" and "eval_steps" not in hps


def test_own_data_in_epochs_leaves_the_cadence_to_transformers() -> None:
    spec = parse_command("task=text-classification model=m train_data=s3://b/data epochs=2")
    assert "logging_steps" not in plan_hyperparameters(spec)


def test_the_local_scale_down_uses_the_same_rule_for_its_own_length() -> None:
    plan = build_plan(parse_command("roberta-mnli"), bucket="b", lineage_id="l")
    run = scale_plan(plan, offline=True, limits=LocalLimits(max_steps=60))
    assert run.hyperparameters["logging_steps"] == 3 and run.hyperparameters["eval_steps"] == 15

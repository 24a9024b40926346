"""What SageMaker accepts, trainbot accepts (issue 32): ``env.NAME=VALUE`` as the estimator's ``environment=``
(reserved names and secrets refused in one sentence that never repeats the secret), and own code on every image the
SDK knows, older than the bot's own scripts need included."""

from __future__ import annotations

import pytest

from jobs.errors import SpecError
from jobs.planning.grammar import parse_command
from jobs.planning.plan import build_plan
from jobs.planning.plan_text import render_plan_text
from jobs.planning.versions import training_combinations

CODE = "code=git+https://github.com/acme/models.git@main entry=scripts/train.py"


def test_env_reaches_the_spec_the_estimator_and_the_plan() -> None:
    spec = parse_command(f"{CODE} env.MY_FLAG=on env.NCCL_DEBUG=INFO hp.epochs=1")
    assert spec.environment == {"MY_FLAG": "on", "NCCL_DEBUG": "INFO"}
    plan = build_plan(spec.model_copy(update={"code_commit": "a" * 40}), bucket="b", lineage_id="l")
    assert plan.estimator["environment"] == {"MY_FLAG": "on", "NCCL_DEBUG": "INFO"}
    assert "Environment: MY_FLAG=on NCCL_DEBUG=INFO" in render_plan_text(plan)
    assert plan.spec.model_dump(mode="json")["environment"] == {"MY_FLAG": "on", "NCCL_DEBUG": "INFO"}
    # The bot's own scripts take it too (it is the estimator's argument, whatever the code).
    assert build_plan(parse_command("bert-squad env.NCCL_DEBUG=INFO"), bucket="b", lineage_id="l"
                      ).estimator["environment"] == {"NCCL_DEBUG": "INFO"}


@pytest.mark.parametrize(("token", "says"), [
    ("env.SM_MODEL_DIR=/x", "SageMaker, AWS and trainbot set SM_MODEL_DIR themselves"),
    ("env.SAGEMAKER_PROGRAM=x.py", "set SAGEMAKER_PROGRAM themselves"),
    ("env.AWS_ACCESS_KEY_ID=x", "set AWS_ACCESS_KEY_ID themselves"),
    ("env.TRAINBOT_CPU_STANDIN=0", "set TRAINBOT_CPU_STANDIN themselves"),
    ("env.HF_TOKEN=x", "set HF_TOKEN themselves"),
    ("env.LD_PRELOAD=/x.so", "set LD_PRELOAD themselves"),
    ("env.WANDB_API_KEY=x", "looks like a credential"),
    ("env.9X=1", "is not a variable name"),
    ("env.MY_FLAG", "needs a value"),
])
def test_reserved_names_are_one_sentence(token: str, says: str) -> None:
    with pytest.raises(SpecError, match=says):
        parse_command(f"{CODE} {token}")


@pytest.mark.parametrize("value", ["AKIAABCDEFGHIJKLMNOP", "xoxb-1234-abcd", "hf_abcdefghijklmnopqrstuvwxyz012345",
                                   "https://user:hunter2@example.com/x", "ghp_abcdefghijklmnopqrstuvwxyz0123"])
def test_a_secret_looking_value_is_refused_and_never_repeated(value: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_command(f"{CODE} env.REMOTE={value}")
    assert "looks like a token, key or password" in caught.value.message and value not in caught.value.message


def test_own_code_runs_on_images_older_than_the_bots_scripts_need() -> None:
    older = [c for c in training_combinations() if c.transformers in ("4.17.0", "4.6.1")]
    assert older, "the installed SDK knows no image older than 4.26"
    spec = parse_command(f"{CODE} transformers_version=4.17.0")
    assert (spec.transformers_version, spec.pytorch_version, spec.py_version) == ("4.17.0", "1.10.2", "py38")
    with pytest.raises(SpecError, match="bot's training scripts need transformers 4.26 or newer.*run your own script"):
        parse_command("bert-squad transformers_version=4.17.0")

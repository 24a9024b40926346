"""Own code owns its arguments and its channels (issue 23): with code=, model/dataset/task are optional and
nothing of the bot's is added; test_data=, validation_data= and channel.NAME= become fit() inputs; any hp.*
value that names a path on the local backend obeys the local-path rule; checkpoint_minutes= is refused where
nothing would act on it; the final ``eval_loss = 0.2`` lines are metrics."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs.errors import SpecError
from jobs.planning.grammar import parse_command
from jobs.planning.images import image_packages
from jobs.planning.local_paths import check_local_paths
from jobs.planning.metrics import METRIC_DEFINITIONS, MetricScanner
from jobs.planning.own_code import checkpoint_words, script_saving
from jobs.planning.plan import build_plan
from jobs.planning.plan_text import render_plan_text
from jobs.planning.spec import spec_from_fields
from jobs.settings import Settings

CODE = "code=git+https://github.com/acme/models.git@main entry=scripts/train.py"
COMMIT = {"code_commit": "a" * 40}


def plan_of(text: str, **update: object):  # noqa: ANN201
    return build_plan(parse_command(text).model_copy(update={**COMMIT, **update}), bucket="b", lineage_id="l")


def test_own_code_needs_no_model_dataset_or_task_and_gets_none_of_the_bots_arguments() -> None:
    plan = plan_of(f"{CODE} spot=yes hp.model_id=distilbert-base-uncased hp.epochs=1")
    hps = plan.estimator["hyperparameters"]
    assert hps == {"model_id": "distilbert-base-uncased", "epochs": 1}  # exactly what was typed: no output_dir
    assert plan.spec.model is None and plan.spec.dataset is None and plan.spec.task is None
    assert "the script's own model on the script's own data" in render_plan_text(plan)


def test_the_card_never_claims_a_batch_it_cannot_read_from_a_teams_script() -> None:
    # hp.train_batch_size is the script's own name: the bot cannot know what batch it makes.
    own = render_plan_text(plan_of(f"{CODE} hp.train_batch_size=16"))
    assert ("Batch: the script's own (it is given neither per_device_train_batch_size nor "
            "gradient_accumulation_steps); relaunches stay on 1 GPU an instance, so it stays the same") in own
    assert "global batch" not in own
    named = render_plan_text(plan_of(f"{CODE} hp.per_device_train_batch_size=16"))
    assert "Batch: global batch 16 (per-device 16 x 1 GPU x 1 instance x accumulation 1)" in named


def test_the_bots_scripts_still_need_a_model_a_dataset_and_a_task() -> None:
    with pytest.raises(SpecError, match="Say which model to train"):
        parse_command("dataset=squad")
    with pytest.raises(SpecError, match="Say which data to train on"):
        parse_command("model=bert-base-uncased")


def test_a_named_preset_is_the_only_way_its_hyperparameters_reach_own_code() -> None:
    assert "per_device_train_batch_size" not in plan_of(f"{CODE} spot=yes").estimator["hyperparameters"]
    assert plan_of(f"distilbert-spot {CODE}").estimator["hyperparameters"]["per_device_train_batch_size"] == 32


def test_channels_become_the_estimators_inputs_in_order() -> None:
    plan = plan_of(f"{CODE} train_data=s3://d/train test_data=s3://d/test validation_data=s3://d/val "
                   "channel.extra=s3://d/extra")
    assert plan.inputs == {"train": "s3://d/train", "test": "s3://d/test", "validation": "s3://d/val",
                           "extra": "s3://d/extra"}
    assert "Channels: train s3://d/train, test s3://d/test, validation s3://d/val, extra s3://d/extra" in \
        render_plan_text(plan)


@pytest.mark.parametrize(("token", "message"), [
    ("channel.train=s3://d/x", "given twice"),
    ("channel.9x=s3://d/x", "is not a channel name"),
    ("channel.extra=http://d/x", "channel.extra must be an s3:// prefix or a local folder"),
    ("channel.Extra=s3://d/x channel.extra=s3://d/y", "would both be SM_CHANNEL_EXTRA"),
    ("test_data=-rf", "test_data '-rf' may not start with -"),
    ("validation_data=data/val", "validation_data must be an s3:// prefix or a local folder"),
])
def test_bad_channels_are_one_sentence(token: str, message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_command(f"{CODE} train_data=s3://d/train {token}")


def test_a_local_path_in_any_own_code_hyperparameter_obeys_the_local_path_rule(tmp_path: Path) -> None:
    settings = Settings(trainbot_home=tmp_path / "home", trainbot_local_data_dirs=(str(tmp_path / "data"),))
    (tmp_path / "data").mkdir()
    check_local_paths(parse_command(f"{CODE} hp.model_id={tmp_path}/data/tiny"), settings, backend="local")
    for token in ("hp.model_id=/root", f"test_data={tmp_path}/elsewhere", "channel.extra=/etc"):
        with pytest.raises(SpecError, match="outside the folders local jobs may read"):
            check_local_paths(parse_command(f"{CODE} {token}"), settings, backend="local")
    check_local_paths(parse_command(f"{CODE} hp.model_id=/root"), settings, backend="sagemaker")  # the container's


def test_checkpoint_minutes_is_refused_where_nothing_would_act_on_it() -> None:
    # Without spot it acts all the same: the entry's clock and a CheckpointConfig (checkpoints were asked for).
    on_demand = plan_of(f"{CODE} checkpoint_minutes=5", code_trainer=True, code_saves="x")
    assert on_demand.estimator["environment"] == {"TRAINBOT_USER_ENTRY": "train.py", "TRAINBOT_CHECKPOINT_MINUTES": "5"}
    assert on_demand.estimator["entry_point"] == "trainbot_spot_entry.py"
    assert on_demand.estimator["checkpoint_s3_uri"] == "s3://b/trainbot/l/checkpoints"
    # Once the pinned entry is read (jobs.planning.reader) and it builds no Trainer:
    fields = parse_command(f"{CODE} spot=yes checkpoint_minutes=5").model_dump()
    with pytest.raises(SpecError, match="needs a script that builds a transformers Trainer"):
        spec_from_fields({**fields, "code_trainer": False, "code_saves": "its own torch.save checkpoints"})
    spot = plan_of(f"{CODE} spot=yes checkpoint_minutes=0.5", code_trainer=True, code_saves="a checkpoint each epoch")
    assert spot.estimator["environment"]["TRAINBOT_CHECKPOINT_MINUTES"] == "0.5"


def test_the_checkpoint_line_says_what_saves_the_script() -> None:
    assert script_saving("Trainer(args=TrainingArguments(save_strategy='epoch'))") == \
        (True, 'a checkpoint each epoch (save_strategy="epoch")')
    assert script_saving("for step in loop:\n    torch.save(model.state_dict(), path)") == \
        (False, "its own torch.save checkpoints")
    assert "at most 10 min" in checkpoint_words(spot=True, minutes=10, trainer=True, saves="x")
    assert checkpoint_words(spot=False, minutes=None, trainer=False, saves="x") == "Checkpoints: your script's own: x."
    line = render_plan_text(plan_of(f"{CODE} spot=yes", code_trainer=False, code_saves="its own torch.save checkpoints"))
    assert ("Checkpoints: your script's own: its own torch.save checkpoints; SageMaker keeps /opt/ml/checkpoints "
            "across interruptions") in line


@pytest.mark.parametrize(("line", "name", "value"), [
    ("eval_loss = 0.2", "eval_loss", 0.2),
    ("eval_accuracy = 0.91", "eval_accuracy", 0.91),
    ("  eval_f1 = 88.1", "eval_f1", 88.1),
])
def test_a_scripts_final_key_value_lines_are_caught(line: str, name: str, value: float) -> None:
    assert (name, value, None) in MetricScanner.of().scan(line)
    regex = next(d["Regex"] for d in METRIC_DEFINITIONS if d["Name"] == name)
    assert float(re.search(regex, line).group(1)) == value  # type: ignore[union-attr]


def test_progress_lines_are_not_read_as_a_loss() -> None:
    assert MetricScanner.of().scan("[progress] step=5 max_steps=60 loss=0.69 eta_s=3") == []


def test_the_image_table_names_the_runtime() -> None:
    image = image_packages("4.26.0", "1.13.1", "py39")
    assert image is not None and image.label() == "transformers 4.26.0 runtime, as the training image"
    assert dict(image.packages) == {"transformers": "4.26.0", "datasets": "2.9.0", "evaluate": "0.4.0",
                                    "accelerate": "0.16.0", "scikit-learn": "1.2.1", "safetensors": "0.3.1"}
    assert image.loads_without_weights_only  # torch 1.13 loaded checkpoints without weights_only

"""What may reach a training script: only names the task's script takes (with the nearest name for a typo),
never what drives SageMaker's launcher, the job's own folders or anything leaving the account; values are
plain text for every key."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.errors import SpecError
from jobs.planning.grammar import keys, parse_command, topic_help
from jobs.planning.hyperparameters import (
    KNOWN_HYPERPARAMETERS,
    check_plain_text,
    check_reserved,
    check_script_argument,
    check_script_hyperparameters,
    script_arguments,
)
from jobs.planning.plan import build_plan
from jobs.planning.presets import PRESETS
from jobs.planning.spec import JobSpec, spec_from_fields

BASE = "distilbert-spot"


def refusal(call: Any, *args: Any) -> str:
    with pytest.raises(SpecError) as caught:
        call(*args)
    message = caught.value.message
    assert "\n" not in message and message.endswith((".", "?")), message
    return message


# ---------------------------------------------------------------- reserved, whatever the script


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("sagemaker_mpi_custom_mpi_options", "drive SageMaker's launcher"),
        ("sagemaker_distributed_dataparallel_enabled", "drive SageMaker's launcher"),
        ("SageMaker_Program", "drive SageMaker's launcher"),
        ("mp_parameters", "come from partitions="),
        ("output_dir", "sets the job's output"),
        ("overwrite_output_dir", "sets the job's output"),
        ("checkpoint_dir", "sets the job's output"),
        ("resume_from_checkpoint", "sets the job's output"),
        ("logging_dir", "sets the job's output"),
        ("model_dir", "sets the job's output"),
        ("train_dir", "sets the job's output"),
        ("test_dir", "sets the job's output"),
        ("output_data_dir", "sets the job's output"),
        ("push_to_hub", "never sends the model or data outside"),
        ("push_to_hub_token", "never sends the model or data outside"),
        ("hub_model_id", "never sends the model or data outside"),
        ("hub_token", "never sends the model or data outside"),
        ("Hub_Strategy", "never sends the model or data outside"),
        ("trackio_space_id", "never sends the model or data outside"),
    ],
)
def test_reserved_names_are_refused_whatever_the_value(name: str, words: str) -> None:
    for value in (None, "x", "false"):
        message = refusal(check_reserved, name, value)
        assert message.startswith(f"hp.{name} is refused: ") and words in message


@pytest.mark.parametrize("value", ["none", "tensorboard", " TensorBoard ", "None"])
def test_report_to_may_stay_inside(value: str) -> None:
    check_reserved("report_to", value)


@pytest.mark.parametrize("value", ["wandb", "all", "tensorboard,wandb", '["wandb"]', "mlflow", "true"])
def test_report_to_anything_else_is_refused(value: str) -> None:
    assert "hp.report_to may be none or tensorboard" in refusal(check_reserved, "report_to", value)


@pytest.mark.parametrize(
    ("value", "code"),
    [("a\x00b", "U+0000"), ("\x1b[31m", "U+001B"), ("a\x7f", "U+007F"), ("\x85", "U+0085"),
     ("x\u202ey", "U+202E"), ("\ud800", "U+D800"), ("tab\there", "U+0009"), ("\x0b", "U+000B")],
)
def test_values_are_plain_text(value: str, code: str) -> None:
    message = refusal(check_reserved, "run_name", value)
    assert message.startswith("hp.run_name has a control character") and code in message


def test_a_value_may_not_pose_as_another_argument() -> None:
    assert "may not start with --" in refusal(check_reserved, "run_name", "--output_dir=/tmp/x")
    for value in ("-1", "a -- b", "-x LD_PRELOAD=/tmp/x.so", "caf\u00e9 \u2603"):
        check_reserved("run_name", value)


def test_a_name_alone_is_checked_without_a_value() -> None:
    check_reserved("report_to")
    check_reserved("anything_a_team_script_takes")


# ---------------------------------------------------------------- the script's own arguments


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("learning_rat", "did you mean hp.learning_rate?"),
        ("Learning_Rate", "did you mean hp.learning_rate?"),
        ("warmup_step", "did you mean hp.warmup_steps?"),
        ("per_device_train_batch", "did you mean hp.per_device_train_batch_size?"),
        ("docstride", "did you mean hp.doc_stride?"),
    ],
)
def test_a_typo_gets_the_nearest_name(name: str, hint: str) -> None:
    message = refusal(check_script_argument, name, "question-answering")
    assert message == f"hp.{name} is not an argument of the question-answering script (train_qa.py): {hint}"


def test_a_name_no_script_takes_says_what_hp_takes() -> None:
    message = refusal(check_script_argument, "zzzz", "text-classification")
    assert "train_classification.py" in message and "TrainingArguments" in message


def test_the_hint_never_offers_a_reserved_name() -> None:
    assert "did you mean" not in refusal(check_script_argument, "output_dirs", "question-answering")
    assert "did you mean" not in refusal(check_script_argument, "model_name_or_pat", "question-answering")


def test_script_arguments_hold_no_reserved_name() -> None:
    for task in ("question-answering", "text-classification", "text-generation", None):
        for name in script_arguments(task):
            check_reserved(name)


#: Typed keys only the LLM script (text-generation) takes: its adapter's settings.
LLM_ONLY = {"use_lora", "lora_r", "lora_alpha", "lora_dropout"}


def test_every_typed_key_and_preset_value_is_an_argument_of_its_script() -> None:
    for name in KNOWN_HYPERPARAMETERS:
        check_script_argument(name, "text-generation")
        if name in LLM_ONLY:
            with pytest.raises(SpecError):
                check_script_argument(name, "question-answering")
            continue
        check_script_argument(name, "question-answering")
        check_script_argument(name, "text-classification")
    for fields in PRESETS.values():
        check_script_hyperparameters(fields.get("hyperparameters", {}), fields["task"])


def test_the_scripts_own_arguments_and_training_arguments_of_both_lines_pass() -> None:
    for name in ("doc_stride", "n_best_size", "num_labels", "tokenizer_name", "seed", "optim", "eval_strategy",
                 "evaluation_strategy", "warmup_ratio", "group_by_length", "eval_on_start"):
        check_script_argument(name, "question-answering")
        check_script_argument(name, "text-classification")


# ---------------------------------------------------------------- through the grammar and the spec


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("hp.sagemaker_mpi_custom_mpi_options=-x", "hp.sagemaker_mpi_custom_mpi_options is refused"),
        (f"{BASE} 'hp.sagemaker_mpi_custom_mpi_options=-x LD_PRELOAD=/tmp/x.so'", "drive SageMaker's launcher"),
        (f"{BASE} hp.sagemaker_distributed_dataparallel_enabled=true", "drive SageMaker's launcher"),
        (f"{BASE} hp.push_to_hub=true", "never sends the model or data outside"),
        (f"{BASE} hp.hub_model_id=me/x", "never sends the model or data outside"),
        (f"{BASE} hp.report_to=wandb", "hp.report_to may be none or tensorboard"),
        (f"{BASE} hp.logging_dir=/tmp", "sets the job's output"),
        (f"{BASE} hp.checkpoint_dir=/tmp", "sets the job's output"),
        (f"{BASE} hp.learning_rat=0.1", "did you mean hp.learning_rate?"),
        (f"{BASE} hp.run_name=--output_dir", "may not start with --"),
    ],
)
def test_the_grammar_refuses_with_one_sentence(text: str, words: str) -> None:
    assert words in refusal(parse_command, text)


KEY_VALUES = {"task": "qa", "model": "bert", "dataset": "squad", "train_data": "s3://b/p", "instance_type": "ml.g5.xlarge",
              "spot": "yes", "max_run": "2h", "lr_scheduler_type": "cosine", "epochs": "2"}


@pytest.mark.parametrize("key", sorted(KEY_VALUES))
@pytest.mark.parametrize("char", ["\x00", "\x1f", "\x7f", "\x9b"])
def test_every_key_refuses_control_characters(key: str, char: str) -> None:
    canonical = keys()[key].name
    message = refusal(parse_command, f"{BASE} '{key}={KEY_VALUES[key]}{char}'")
    assert message.startswith(f"{canonical} has a control character (U+{ord(char):04X})")


def test_hp_values_refuse_control_characters_too() -> None:
    assert refusal(parse_command, f"{BASE} 'hp.run_name=a\x00b'").startswith("hp.run_name has a control character")
    assert "plain text" in refusal(check_plain_text, "model", "a\x00")


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"hyperparameters": {"sagemaker_program": "evil.py"}}, "drive SageMaker's launcher"),
        ({"hyperparameters": {"learning_rat": 0.1}}, "did you mean hp.learning_rate?"),
        ({"hyperparameters": {"report_to": "comet_ml"}}, "none or tensorboard"),
        ({"hyperparameters": {"run_name": "a\x00"}}, "control character"),
        ({"model": "--output_dir"}, "may not start with -"),
        ({"dataset": "squad:-x"}, "may not start with -"),
        ({"dataset_revision": "-v"}, "may not start with -"),
    ],
)
def test_spec_input_from_json_follows_the_same_rules(fields: dict[str, Any], words: str) -> None:
    base: dict[str, Any] = {"task": "question-answering", "model": "bert-base-uncased", "dataset": "squad"}
    assert words in refusal(spec_from_fields, {**base, **fields})


def test_the_task_decides_once_the_spec_is_whole() -> None:
    data = {"task": "text-classification", "model": "m", "dataset": "imdb", "hyperparameters": {"num_labels": 3}}
    assert spec_from_fields(data).hyperparameters == {"num_labels": 3}


def test_every_hyperparameter_a_plan_sends_is_one_the_script_takes() -> None:
    for text in (BASE, "bert-squad dataset_revision=v2 hp.seed=1", "roberta-mnli epochs=1", f"{BASE} hp.report_to=none"):
        spec = parse_command(text)
        hps = build_plan(spec, bucket="b", lineage_id="l").estimator["hyperparameters"]
        check_script_hyperparameters(hps, spec.task)
    assert build_plan(parse_command("bert-squad dataset_revision=v2"), bucket="b", lineage_id="l").estimator[
        "hyperparameters"]["dataset_revision"] == "v2"


def test_a_stored_spec_stays_readable_but_never_plans() -> None:
    data = parse_command(BASE).model_dump(mode="json")
    data["hyperparameters"]["note"] = "saved before hp.NAME was checked"
    spec = JobSpec.model_validate(data)  # as the store reads its rows back
    with pytest.raises(SpecError, match="hp.note is not an argument of the text-classification script"):
        build_plan(spec, bucket="b", lineage_id="l")


def test_help_says_what_hp_takes() -> None:
    text = topic_help("hp.x")
    assert "training script" in text and "sagemaker_" in text

"""Fast in-process checks: argument handling, data channels, checkpoint choice, SQuAD scoring, metric lines."""

from __future__ import annotations

import json
from pathlib import Path

import compat
import data_channels
import metrics_log
import numpy as np
import pytest
import qa_postprocess
import script_arguments
import train_classification
import trainbot_checkpoint_folders

from jobs.planning.metrics import METRIC_DEFINITIONS, PROGRESS_DEFINITIONS, parse_metric_line
from tests.training.conftest import run_script, script_env


def test_booleans_accept_sagemaker_strings_and_bare_flags() -> None:
    script, args = script_arguments.parse_args(
        ["--model_name_or_path", "m", "--do_train", "True", "--do_eval", "False", "--pad_to_max_length",
         "--output_dir", "/tmp/x"], prog="t")
    assert args.do_train is True and args.do_eval is False and script.pad_to_max_length is True


def test_sagemaker_arguments_are_ignored_and_defaults_applied() -> None:
    script, args = script_arguments.parse_args(
        ["--model_name_or_path", "m", "--sagemaker_program", "train_qa.py", "--sagemaker_region=us-east-1",
         "--max_steps", "7"], prog="t")
    assert args.max_steps == 7 and args.do_train and args.do_eval  # neither given: both
    assert script.checkpoint_dir == "/opt/ml/checkpoints"
    assert args.report_to in ([], ["none"], "none") or not args.report_to


def test_unknown_argument_is_named() -> None:
    with pytest.raises(script_arguments.UsageError, match="--bogus"):
        script_arguments.parse_args(["--model_name_or_path", "m", "--bogus", "1"], prog="t")


def test_missing_model_is_a_usage_error() -> None:
    with pytest.raises(script_arguments.UsageError, match="model_name_or_path"):
        script_arguments.parse_args(["--max_steps", "3"], prog="t")


def test_renamed_training_arguments_of_either_version_are_accepted() -> None:
    _, args = script_arguments.parse_args(
        ["--model_name_or_path", "m", "--evaluation_strategy", "steps", "--eval_steps", "5", "--no_cuda", "True",
         "--warmup_ratio", "0.1", "--logging_dir", "/tmp/logs", "--overwrite_output_dir", "True"], prog="t")
    strategy = getattr(args, "eval_strategy", None) or args.evaluation_strategy
    assert str(getattr(strategy, "value", strategy)) == "steps"
    assert getattr(args, "use_cpu", None) or getattr(args, "no_cuda", None)


def test_translate_argv_both_directions() -> None:
    old = {"evaluation_strategy", "no_cuda", "warmup_ratio", "warmup_steps"}
    new = {"eval_strategy", "use_cpu", "warmup_steps"}
    assert compat.translate_argv(["--eval_strategy", "epoch"], old) == ["--evaluation_strategy", "epoch"]
    assert compat.translate_argv(["--evaluation_strategy=no"], new) == ["--eval_strategy=no"]
    assert compat.translate_argv(["--warmup_ratio", "0.1"], new) == ["--warmup_steps", "0.1"]
    assert compat.translate_argv(["--logging_dir", "x", "--seed", "1"], new) == ["--seed", "1"]


def test_channels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = script_arguments.ScriptArguments(model_name_or_path="m")
    for name in ("SM_CHANNEL_TRAIN", "SM_CHANNEL_TEST", "SM_CHANNEL_TRAINING", "SM_CHANNEL_VALIDATION"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(script_arguments.UsageError, match="SM_CHANNEL_TRAIN"):
        data_channels.load_splits(script, True, True)
    monkeypatch.setenv("SM_CHANNEL_TRAIN", str(tmp_path / "nope"))
    with pytest.raises(script_arguments.UsageError, match="not a folder"):
        data_channels.load_splits(script, True, True)
    train = tmp_path / "train"
    train.mkdir()
    monkeypatch.setenv("SM_CHANNEL_TRAIN", str(train))
    with pytest.raises(script_arguments.UsageError, match="no \\*.jsonl"):
        data_channels.load_splits(script, True, False)
    (train / "a.jsonl").write_text('{"text": "x", "label": 1}\n\n{"text": "y", "label": 0}\n')
    (train / "b.json").write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": "c d", "qas": [
        {"id": "1", "question": "q", "answers": [{"text": "d", "answer_start": 2}]}]}]}]}))
    records, _ = data_channels.load_splits(script, True, False)
    assert len(records) == 3 and records[2]["answers"] == {"text": ["d"], "answer_start": [2]}
    with pytest.raises(script_arguments.UsageError, match="SM_CHANNEL_TEST"):
        data_channels.load_splits(script, True, True)
    script.dataset_name = "squad"
    monkeypatch.delenv("SM_CHANNEL_TRAIN")
    with pytest.raises(script_arguments.UsageError, match="datasets"):
        data_channels.load_splits(script, True, True)


def _checkpoint(root: Path, step: int, state: str | None) -> Path:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"x")
    if state is not None:
        (path / "trainer_state.json").write_text(state)
    return path


def test_resume_picks_newest_complete_checkpoint(tmp_path: Path) -> None:
    assert trainbot_checkpoint_folders.find_resume_checkpoint(tmp_path / "none") == (None, [])
    good = _checkpoint(tmp_path, 20, json.dumps({"global_step": 20}))
    _checkpoint(tmp_path, 5, json.dumps({"global_step": 5}))
    torn = _checkpoint(tmp_path, 30, '{"global_st')
    missing = _checkpoint(tmp_path, 40, None)
    (tmp_path / "checkpoint-50-tmp").mkdir()
    assert trainbot_checkpoint_folders.find_resume_checkpoint(tmp_path) == (good, [missing, torn])


def test_squad_normalisation_and_scores() -> None:
    assert qa_postprocess.normalize_answer("The  Cat, sat!") == "cat sat"
    assert qa_postprocess.exact_match_score("the cat", "Cat") == 1.0
    assert qa_postprocess.f1_score("black cat", "the cat") == pytest.approx(2 / 3)
    examples = [{"id": "a", "answers": {"text": ["x", "big dog"]}}, {"id": "b", "answers": {"text": ["y"]}}]
    scores = qa_postprocess.squad_metrics(examples, {"a": "big dog", "b": "z"})
    assert scores == {"exact_match": 50.0, "f1": 50.0}


def test_postprocess_picks_best_valid_span() -> None:
    examples = [{"id": "e", "context": "hello big world"}]
    offsets = [[None, (0, 5), (6, 9), (10, 15), None]]
    start = np.array([[9.0, 1.0, 5.0, 0.0, 0.0]])  # CLS is best but not in the context
    end = np.array([[9.0, 0.0, 1.0, 4.0, 0.0]])
    preds = qa_postprocess.postprocess_predictions(examples, [0], offsets, start, end, max_answer_length=5)
    assert preds == {"e": "big world"}
    short = qa_postprocess.postprocess_predictions(examples, [0], offsets, start, end, max_answer_length=1)
    assert short == {"e": "big"}


def test_classification_metrics_two_and_three_classes() -> None:
    two = train_classification.compute_metrics((np.array([[0, 1], [1, 0], [0, 1], [0, 1]]), np.array([1, 0, 0, 1])))
    assert two == {"accuracy": 0.75, "f1": pytest.approx(0.8)}
    three = train_classification.compute_metrics((np.eye(3), np.array([0, 1, 1])))
    assert set(three) == {"accuracy"}


def test_metric_lines_match_the_plans_definitions() -> None:
    import re

    logs = {name: value for name, value in zip(metrics_log.METRIC_NAMES, [0.69, 5e-05, 1, 0.0, -1.5, 100.0, 99.5,
                                                                      0.5, 1e-12, 12.3, 4000.25, 2.5e5], strict=True)}
    lines = metrics_log.metric_lines(logs, step=10)
    assert len(lines) == len(metrics_log.METRIC_NAMES)
    for line in lines:
        parsed = parse_metric_line(line)
        assert parsed is not None and parsed[2] == 10, line
        assert parsed[1] == pytest.approx(logs[parsed[0]], rel=1e-5)
        assert any(re.search(d["Regex"], line) for d in METRIC_DEFINITIONS if d["Name"] == parsed[0]), line
    assert set(metrics_log.METRIC_NAMES) == {d["Name"] for d in METRIC_DEFINITIONS} - {d["Name"] for d in PROGRESS_DEFINITIONS}


@pytest.mark.parametrize("script", ["train_qa.py", "train_classification.py"])
def test_bad_arguments_give_one_line_and_exit_2(script: str, assets) -> None:
    result = run_script(script, ["--model_name_or_path", str(assets.model_dir), "--bogus", "1"],
                        script_env(*assets.channels_for("squad")))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--bogus" in result.stderr and "Traceback" not in result.stderr


def test_missing_channel_gives_one_line_and_exit_2(assets, tmp_path: Path) -> None:
    result = run_script("train_qa.py", ["--model_name_or_path", str(assets.model_dir), "--output_dir",
                                        str(tmp_path)], script_env(None, None))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "SM_CHANNEL_TRAIN" in result.stderr
    eval_missing = run_script("train_qa.py", ["--model_name_or_path", str(assets.model_dir), "--do_eval", "True",
                                              "--output_dir", str(tmp_path)], script_env(assets.squad_train, None))
    assert eval_missing.returncode == 2 and "SM_CHANNEL_TEST" in eval_missing.stderr
    assert eval_missing.stderr.strip().count("\n") == 0


def test_the_whole_lineage_train_loss_weights_each_logged_loss_by_its_steps() -> None:
    # A run logged at 10 and 20, was killed, resumed from a checkpoint at 25 (logged there too) and ended at 40.
    history = [{"loss": 0.7, "step": 10}, {"loss": 0.5, "step": 20}, {"loss": 0.4, "step": 25},
               {"eval_loss": 0.3, "step": 25}, {"loss": 0.2, "step": 40}, {"train_loss": 0.1, "step": 40}]
    assert metrics_log.lineage_train_loss(history) == pytest.approx((7 + 5 + 2 + 3) / 40)
    assert metrics_log.lineage_train_loss([]) is None


def test_label_names_come_from_the_data_or_the_class_label() -> None:
    tc = train_classification
    rows = [{"text": "a", "label": "pos"}, {"text": "b", "label": "neg"}]
    assert tc.label_names([rows, [{"text": "c", "label": "meh"}]], []) == ["meh", "neg", "pos"]
    assert tc.label_names([[{"text": "a", "label": 1}]], ["neg", "pos"]) == ["neg", "pos"]  # a ClassLabel's
    assert tc.label_names([[{"text": "a", "label": 1}]], []) == []
    with pytest.raises(script_arguments.UsageError, match="mix"):
        tc.label_names([rows + [{"text": "d", "label": 0}]], [])

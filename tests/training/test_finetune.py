"""Fine-tunes to completion on the generated data: beats a trivial baseline, writes the SageMaker outputs,
and every metric line it prints is one the plan's metric definitions capture."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import data_channels
import pytest
import qa_postprocess

from jobs.planning.plan import METRIC_DEFINITIONS, parse_metric_line
from tests.training.conftest import CLS_FAST, QA_FAST, run_script, script_env


def _assert_metric_lines_captured(stdout: str, required: set[str]) -> dict[str, float]:
    lines = [line for line in stdout.splitlines() if line.startswith("[metric]")]
    assert lines, stdout
    seen: dict[str, float] = {}
    for line in lines:
        parsed = parse_metric_line(line)
        assert parsed is not None, line
        name, value, step = parsed
        assert step is not None
        matching = [d for d in METRIC_DEFINITIONS if d["Name"] == name and re.search(d["Regex"], line)]
        assert matching, f"no metric definition captures {line!r}"
        assert float(re.search(matching[0]["Regex"], line).group(1)) == pytest.approx(value)
        seen[name] = value
    assert required <= set(seen), set(seen)
    return seen


@pytest.fixture(scope="module")
def qa_run(assets, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    root = tmp_path_factory.mktemp("qa")
    env = script_env(*assets.channels_for("squad"), SM_MODEL_DIR=str(root / "model"),
                     SM_OUTPUT_DATA_DIR=str(root / "data"))
    args = ["--model_name_or_path", str(assets.model_dir), "--output_dir", str(root / "out"),
            "--checkpoint_dir", str(root / "ckpt"), *QA_FAST, "--per_device_train_batch_size", "32",
            "--learning_rate", "3e-3", "--max_steps", "200", "--warmup_ratio", "0.05", "--logging_steps", "20",
            "--save_steps", "100", "--save_total_limit", "1", "--max_eval_samples", "200",
            "--do_train", "True", "--do_eval", "True", "--do_predict", "True", "--sagemaker_program", "train_qa.py"]
    return run_script("train_qa.py", args, env, timeout=240), root


def test_qa_finetune_beats_trivial_baseline(qa_run, assets) -> None:
    result, root = qa_run
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((root / "data" / "metrics.json").read_text())
    # Trivial baseline: the first word of the context, and the most common answer.
    examples = data_channels.read_channel(assets.squad_test)[:200]
    first_word = qa_postprocess.squad_metrics(examples, {e["id"]: e["context"].split()[0] for e in examples})
    common = Counter(e["answers"]["text"][0] for e in examples).most_common(1)[0][0]
    majority = qa_postprocess.squad_metrics(examples, {e["id"]: common for e in examples})
    baseline = max(first_word["f1"], majority["f1"])
    assert baseline < 15
    assert metrics["eval_exact_match"] >= 50 and metrics["eval_f1"] >= baseline + 40, metrics
    assert metrics["train_loss"] > 0 and metrics["train_runtime"] > 0
    predictions = json.loads((root / "data" / "predictions.json").read_text())
    assert len(predictions) == 200


def test_qa_writes_model_where_sagemaker_expects(qa_run) -> None:
    result, root = qa_run
    model = root / "model"
    assert (model / "model.safetensors").exists() and (model / "config.json").exists()
    assert (model / "tokenizer.json").exists() or (model / "vocab.txt").exists()
    assert not (model / "pytorch_model.bin").exists()
    assert not (root / "out").exists()  # the final model goes to SM_MODEL_DIR, checkpoints to --checkpoint_dir
    assert [p.name for p in (root / "ckpt").glob("checkpoint-*")] == ["checkpoint-200"]  # save_total_limit 1
    assert (root / "ckpt" / "trainbot-furthest-step.json").is_file()  # how far the run got, for a resume
    from transformers import AutoModelForQuestionAnswering

    AutoModelForQuestionAnswering.from_pretrained(str(model))


def test_qa_metric_lines_are_captured_by_the_plan(qa_run) -> None:
    result, _ = qa_run
    seen = _assert_metric_lines_captured(
        result.stdout,
        {"loss", "learning_rate", "epoch", "grad_norm", "eval_loss", "eval_exact_match", "eval_f1",
         "train_loss", "train_runtime", "train_samples_per_second"},
    )
    assert seen["eval_exact_match"] >= 50
    progress = [line for line in result.stdout.splitlines() if line.startswith("[progress]")]
    assert len(progress) == 10
    assert re.fullmatch(r"\[progress\] step=200 max_steps=200 loss=[0-9.e-]+ eta_s=0", progress[-1])


def test_mnli_finetune_beats_majority_baseline(assets, tmp_path: Path) -> None:
    args = ["--model_name_or_path", str(assets.model_dir), "--output_dir", str(tmp_path / "out"),
            "--checkpoint_dir", str(tmp_path / "ckpt"), *CLS_FAST, "--learning_rate", "2e-3",
            "--max_steps", "120", "--logging_steps", "40", "--save_steps", "1000", "--do_train", "True",
            "--do_eval", "True", "--fp16", "False"]
    result = run_script("train_classification.py", args, script_env(*assets.channels_for("mnli")))
    assert result.returncode == 0, result.stderr[-3000:]
    labels = [r["label"] for r in data_channels.read_channel(assets.mnli_test)]
    majority = Counter(labels).most_common(1)[0][1] / len(labels)
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["eval_accuracy"] >= majority + 0.2, (metrics, majority)
    _assert_metric_lines_captured(result.stdout, {"loss", "eval_accuracy", "eval_loss", "train_loss"})
    assert "eval_f1" not in metrics  # three classes
    assert (tmp_path / "out" / "model.safetensors").exists()


def test_imdb_reports_accuracy_and_f1(assets, tmp_path: Path) -> None:
    args = ["--model_name_or_path", str(assets.model_dir), "--output_dir", str(tmp_path / "out"),
            "--checkpoint_dir", str(tmp_path / "ckpt"), *CLS_FAST, "--learning_rate", "2e-3",
            "--max_steps", "60", "--logging_steps", "30", "--save_steps", "1000"]
    result = run_script("train_classification.py", args, script_env(*assets.channels_for("imdb")))
    assert result.returncode == 0, result.stderr[-3000:]
    seen = _assert_metric_lines_captured(result.stdout, {"eval_accuracy", "eval_f1"})
    assert seen["eval_accuracy"] >= 0.8 and seen["eval_f1"] >= 0.8

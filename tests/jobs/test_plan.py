"""The launch plan: the estimator's arguments exactly as the SDK takes them, metrics, tags, text."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from jobs.planning.grammar import parse_command
from jobs.planning.metrics import PROGRESS_DEFINITIONS
from jobs.planning.plan import (
    ENTRY_POINTS,
    METRIC_DEFINITIONS,
    METRIC_NAMES,
    build_plan,
    checkpoint_uri,
    parse_metric_line,
    training_source_dir,
)
from jobs.planning.plan_text import render_plan_text


def estimator(text: str, **kwargs: Any) -> dict[str, Any]:
    return build_plan(parse_command(text), bucket="my-bucket", lineage_id="bert-squad-1a2b3c4d", **kwargs).estimator


def test_data_parallel_estimator() -> None:
    est = estimator("bert-squad", launched_by="U123", origin="slack:C42")
    assert est == {
        "entry_point": "train_qa.py",
        "source_dir": training_source_dir(),
        "instance_type": "ml.p3.16xlarge",
        "instance_count": 2,
        "transformers_version": "4.28.1",
        "pytorch_version": "2.0.0",
        "py_version": "py310",
        "hyperparameters": {
            "model_name_or_path": "bert-large-uncased-whole-word-masking",
            "dataset_name": "squad",
            "do_train": True,
            "do_eval": True,
            "fp16": True,
            "per_device_train_batch_size": 4,
            "per_device_eval_batch_size": 4,
            "num_train_epochs": 2,
            "max_seq_length": 384,
            "max_steps": 100,
            "pad_to_max_length": True,
            "doc_stride": 128,
            # 100 steps: a loss every 5 (20 points), an evaluation every quarter (cadence.py)
            "logging_steps": 5,
            "eval_strategy": "steps",
            "eval_steps": 25,
        },
        "distribution": {"smdistributed": {"dataparallel": {"enabled": True}}},
        "volume_size": 200,
        "use_spot_instances": False,
        "max_run": 86400,
        "checkpoint_s3_uri": "s3://my-bucket/trainbot/bert-squad-1a2b3c4d/checkpoints",
        "checkpoint_local_path": "/opt/ml/checkpoints",
        "output_path": "s3://my-bucket/trainbot/bert-squad-1a2b3c4d/output",
        "code_location": "s3://my-bucket/trainbot/bert-squad-1a2b3c4d/code",
        "metric_definitions": METRIC_DEFINITIONS,
        "tags": [
            {"Key": "trainbot:lineage", "Value": "bert-squad-1a2b3c4d"},
            {"Key": "trainbot:launched-by", "Value": "U123"},
            {"Key": "trainbot:origin", "Value": "slack:C42"},
            {"Key": "trainbot:preset", "Value": "bert-squad"},
        ],
    }


def test_model_parallel_distribution() -> None:
    est = estimator("roberta-mnli")
    assert est["entry_point"] == "train_classification.py"
    assert est["distribution"] == {
        "smdistributed": {
            "modelparallel": {
                "enabled": True,
                "parameters": {
                    "microbatches": 4,
                    "placement_strategy": "spread",
                    "pipeline": "interleaved",
                    "optimize": "speed",
                    "partitions": 4,
                    "ddp": True,
                },
            }
        },
        "mpi": {"enabled": True, "processes_per_host": 8},
    }
    assert est["hyperparameters"]["dataset_name"] == "glue"
    assert est["hyperparameters"]["dataset_config_name"] == "mnli"


def test_ddp_distribution() -> None:
    est = estimator("bert-squad distribution=ddp")
    assert est["distribution"] == {"torch_distributed": {"enabled": True}}
    assert est["pytorch_version"] == "2.8.0"


def test_no_distribution_and_spot() -> None:
    est = estimator("distilbert-spot")
    assert "distribution" not in est
    assert est["use_spot_instances"] is True
    assert (est["max_run"], est["max_wait"]) == (1000, 3600)
    assert est["hyperparameters"]["save_steps"] == 100
    assert est["hyperparameters"]["dataset_name"] == "imdb"
    assert "max_wait" not in estimator("bert-squad")


def test_train_data_becomes_the_train_channel() -> None:
    plan = build_plan(parse_command("model=m train_data=s3://b/data task=qa"), bucket="b", lineage_id="x")
    assert plan.inputs == {"train": "s3://b/data"}
    assert "dataset_name" not in plan.estimator["hyperparameters"]
    assert plan.to_json()["inputs"] == {"train": "s3://b/data"}


def test_lineages_never_share_checkpoints() -> None:
    assert checkpoint_uri("b", "one") == "s3://b/trainbot/one/checkpoints"
    assert checkpoint_uri("b", "one") != checkpoint_uri("b", "two")


def test_unconfigured_bucket_uses_placeholders() -> None:
    plan = build_plan(parse_command("bert-squad"), bucket="", lineage_id="<lineage>")
    assert plan.estimator["checkpoint_s3_uri"] == "s3://<TRAINBOT_BUCKET>/trainbot/<lineage>/checkpoints"
    assert plan.estimator["tags"][0] == {"Key": "trainbot:lineage", "Value": "_lineage_"}
    assert [t["Key"] for t in plan.estimator["tags"]] == ["trainbot:lineage", "trainbot:preset"]


def test_training_source_dir_holds_the_entry_points() -> None:
    folder = Path(training_source_dir())
    assert folder.is_absolute() and folder.name == "training"
    for script in ENTRY_POINTS.values():
        assert (folder / script).is_file()


def test_to_json_is_plain_data() -> None:
    data = build_plan(parse_command("distilbert-spot"), bucket="b", lineage_id="l").to_json()
    assert set(data) == {"spec", "estimator", "cost", "forecast", "batch", "fallbacks"}
    assert data["batch"]["global_batch"] == 32 and data["fallbacks"]["order"] == "same-count"
    assert json.loads(json.dumps(data)) == data
    assert all("usd" in key for key, value in data["cost"].items() if isinstance(value, float))
    assert {"seconds", "usd", "basis"} <= set(data["forecast"]) and data["forecast"]["basis"] == "physics"
    assert data["spec"]["spot"] is True


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        ("bert-squad", ["Distribution: data parallel", "$56.30/hour", "Forecast: about 9 min, about $5.89 (physics",
                        "worst case $13,567.68: 6 attempts x 24h on 2 x ml.p4de.24xlarge at on-demand",
                        "Batch: global batch 64 (per-device 4 x 8 GPUs x 2 instances x accumulation 1)",
                        "Relaunches (TRAINBOT_RECOVERY_POLICY=same-count): ml.p4d.24xlarge (on-demand), "
                        "ml.p4de.24xlarge (on-demand), ml.p3dn.24xlarge (on-demand); then from the top again",
                        "  not used: ml.g5.48xlarge, ml.g6.48xlarge, ml.g6e.48xlarge, ml.p5.48xlarge, ml.p5e.48xlarge, "
                        "ml.p5en.48xlarge: smdistributed runs only on",
                        "  not used: ml.p6-b200.48xlarge: the transformers 4.28.1 / PyTorch 2.0.0 image is built on "
                        "CUDA 11.8; the NVIDIA B200 needs CUDA 12.8 or newer"]),
        ("bert-squad max_steps=none", ["Forecast: about 28 min, about $24 (physics"]),
        ("roberta-mnli", ["model parallel", "8 processes a host", "partitions 4"]),
        ("distilbert-spot", ["Spot: yes", "worst case $6.38: 6 attempts x 16m40s on 1 x ml.p3.2xlarge",
                             "spot savings about 70%",
                             "ml.g6e.xlarge (spot), ml.g6.xlarge (spot), ml.g5.xlarge (spot), ml.g4dn.xlarge (spot)"]),
    ],
)
def test_render_plan_text(text: str, lines: list[str]) -> None:
    rendered = render_plan_text(build_plan(parse_command(text), bucket="", lineage_id="<lineage>"))
    for line in lines:
        assert line in rendered


class TestMetrics:
    def test_definitions_in_sdk_form(self) -> None:
        assert [d["Name"] for d in METRIC_DEFINITIONS] == [*METRIC_NAMES, *(d["Name"] for d in PROGRESS_DEFINITIONS)]
        for d in METRIC_DEFINITIONS:
            assert set(d) == {"Name", "Regex"}
            assert re.compile(d["Regex"]).groups == 1

    @pytest.mark.parametrize(
        ("line", "name", "value"),
        [
            ("[metric] loss=0.6931 step=10", "loss", 0.6931),
            ("[metric] eval_loss=0.5 step=3", "eval_loss", 0.5),
            ("[metric] train_loss=1.2e-3 step=5", "train_loss", 0.0012),
            ("[metric] learning_rate=3e-05 step=5", "learning_rate", 3e-05),
            ("[metric] epoch=1.0 step=100", "epoch", 1.0),
            ("[metric] grad_norm=12.5 step=7", "grad_norm", 12.5),
            ("[metric] eval_exact_match=71.2 step=100", "eval_exact_match", 71.2),
            ("[metric] eval_f1=80.05 step=100", "eval_f1", 80.05),
            ("[metric] eval_accuracy=0.91 step=100", "eval_accuracy", 0.91),
            ("[metric] train_runtime=123.4 step=100", "train_runtime", 123.4),
            ("[metric] train_samples_per_second=55.5 step=100", "train_samples_per_second", 55.5),
            ("[metric] loss=-1.5E+2 step=1", "loss", -150.0),
        ],
    )
    def test_each_regex_matches_its_own_line_only(self, line: str, name: str, value: float) -> None:
        for d in METRIC_DEFINITIONS:
            match = re.search(d["Regex"], line)
            if d["Name"] == name:
                assert match is not None and float(match.group(1)) == pytest.approx(value)
            else:
                assert match is None, (d["Name"], line)
        assert parse_metric_line(line) == (name, pytest.approx(value), int(line.rsplit("=", 1)[1]))

    @pytest.mark.parametrize(
        "line",
        ["", "loss=0.5 step=1", "[metric] lossy=0.5 step=1", "[metric] loss=abc step=1", "[metric] loss=1.2.3 step=1",
         "[metrics] loss=0.5 step=1", "{'lossy': 0.5}", "{'eval_loss_x': 0.5}"],
    )
    def test_other_lines_are_not_metrics(self, line: str) -> None:
        assert parse_metric_line(line) is None

    def test_the_progress_line_gives_the_step_series(self) -> None:
        line = "[progress] step=120 max_steps=2738 loss=0.91 eta_s=640"
        matches = {d["Name"]: re.search(d["Regex"], line) for d in METRIC_DEFINITIONS}
        assert {name for name, match in matches.items() if match} == {"step"}
        assert matches["step"] is not None and matches["step"].group(1) == "120"
        assert parse_metric_line(line) is None  # not a [metric] line: the report never shows it

    def test_line_inside_a_log_prefix(self) -> None:
        assert parse_metric_line("2024-01-01 algo-1 [metric] eval_f1=88.1 step=9\n") == ("eval_f1", 88.1, 9)
        assert parse_metric_line("[metric] loss=0.25") == ("loss", 0.25, None)


def test_the_sdk_accepts_every_estimator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Build the real HuggingFace estimator from each plan: its own validation must pass."""
    boto3 = pytest.importorskip("boto3")
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    huggingface = pytest.importorskip("sagemaker.huggingface")
    session_module = pytest.importorskip("sagemaker.session")
    session = session_module.Session(boto_session=boto3.Session(region_name="us-east-1"), default_bucket="b")
    for text in ("bert-squad", "roberta-mnli", "distilbert-spot", "bert-squad distribution=ddp", "model=m dataset=squad"):
        est = build_plan(parse_command(text), bucket="b", lineage_id="l-1").estimator
        built = huggingface.HuggingFace(role="arn:aws:iam::123456789012:role/trainbot", sagemaker_session=session, **est)
        assert built.distribution == est.get("distribution", {})
        assert "huggingface-pytorch-training" in built.training_image_uri()

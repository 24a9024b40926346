"""The three recipes of DESIGN.md, reproduced field by field."""

from __future__ import annotations

import pytest

from jobs.planning.grammar import parse_command
from jobs.planning.presets import PRESETS, preset_fields, preset_names
from jobs.planning.spec import spec_from_fields


def test_names() -> None:
    assert preset_names() == ["bert-squad", "roberta-mnli", "distilbert-spot", "llm-lora", "llm-fsdp"]


def test_bert_squad() -> None:
    spec = parse_command("/train bert-squad")
    assert spec.preset == "bert-squad"
    assert spec.task == "question-answering"
    assert spec.model == "bert-large-uncased-whole-word-masking"
    assert spec.dataset == "squad"
    assert spec.instance_type == "ml.p3.16xlarge"
    assert spec.instance_count == 2
    assert spec.volume_size == 200
    assert spec.distribution == "data"
    assert spec.spot is False
    assert spec.max_wait is None
    assert (spec.transformers_version, spec.pytorch_version, spec.py_version) == ("4.28.1", "2.0.0", "py310")
    assert spec.hyperparameters == {
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
    }
    assert spec.mp_parameters is None and spec.processes_per_host is None


def test_roberta_mnli() -> None:
    spec = parse_command("/train roberta-mnli")
    assert spec.task == "text-classification"
    assert spec.model == "roberta-large"
    assert spec.dataset == "mnli"
    assert spec.instance_type == "ml.p3.16xlarge"
    assert spec.instance_count == 1  # the notebook's one instance
    assert spec.volume_size == 200
    assert spec.distribution == "model"
    assert spec.processes_per_host == 8
    assert spec.mp_parameters == {
        "microbatches": 4,
        "placement_strategy": "spread",
        "pipeline": "interleaved",
        "optimize": "speed",
        "partitions": 4,
        "ddp": True,
    }
    assert spec.hyperparameters == {
        "per_device_train_batch_size": 16,
        "per_device_eval_batch_size": 16,
        "do_train": True,
        "do_eval": True,
        "do_predict": True,
        "num_train_epochs": 2,
        "max_steps": 500,
    }
    assert spec.spot is False


def test_distilbert_spot() -> None:
    spec = parse_command("/train distilbert-spot")
    assert spec.task == "text-classification"
    assert spec.model == "distilbert-base-uncased"
    assert spec.dataset == "imdb"
    assert spec.instance_type == "ml.p3.2xlarge"
    assert spec.instance_count == 1
    assert spec.distribution == "none"
    assert spec.spot is True
    assert spec.max_run == 1000
    assert spec.max_wait == 3600
    assert spec.hyperparameters["num_train_epochs"] == 1
    assert spec.hyperparameters["per_device_train_batch_size"] == 32
    assert spec.hyperparameters["save_steps"] >= 1  # checkpointing on


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_fields_are_copies(name: str) -> None:
    fields = preset_fields(name)
    fields["hyperparameters"]["num_train_epochs"] = 99
    assert PRESETS[name]["hyperparameters"]["num_train_epochs"] != 99
    assert spec_from_fields(preset_fields(name)) == parse_command(name)


def test_the_plans_match_the_notebooks_estimators() -> None:
    from jobs.planning.plan import build_plan

    def estimator(text: str) -> dict:
        return build_plan(parse_command(text), bucket="b", lineage_id="l").estimator

    squad, mnli, spot = estimator("bert-squad"), estimator("roberta-mnli"), estimator("distilbert-spot")
    assert (squad["volume_size"], mnli["volume_size"]) == (200, 200)
    assert mnli["debugger_hook_config"] is False and "debugger_hook_config" not in squad
    assert spot["volume_size"] == 30  # sized to DistilBERT: SageMaker's default is plenty
    assert estimator("distilbert-spot model=bert-large-uncased")["volume_size"] > 30  # sized to the model
    assert estimator("distilbert-spot volume_size=75")["volume_size"] == 75

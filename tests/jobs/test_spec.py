"""JobSpec: the contract fields, every cross-field rule (valid and invalid), the SDK version table, instances."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pydantic
import pytest

from jobs.errors import BadInput, SpecError
from jobs.planning import versions
from jobs.planning.instances import instance_info, instance_names
from jobs.planning.spec import JobSpec, dataset_hyperparameters, spec_from_fields

CONTRACT_FIELDS = [
    "task", "model", "dataset", "instance_type", "instance_count", "distribution", "spot", "max_run",
    "max_wait", "hyperparameters", "transformers_version", "pytorch_version", "py_version",
]


def fields(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"model": "bert-base-uncased", "dataset": "squad"}
    base.update(overrides)
    return base


def test_contract_json_fields_come_first_and_round_trip() -> None:
    spec = spec_from_fields(fields(spot=True, hyperparameters={"run_name": "x"}))
    data = spec.model_dump(mode="json")
    assert list(data)[: len(CONTRACT_FIELDS)] == CONTRACT_FIELDS
    assert JobSpec.model_validate(data) == spec
    assert JobSpec.model_validate_json(spec.model_dump_json()) == spec


def test_defaults() -> None:
    spec = spec_from_fields(fields())
    assert (spec.task, spec.instance_type, spec.instance_count, spec.distribution) == (
        "question-answering", "ml.p3.2xlarge", 1, "none")
    assert (spec.spot, spec.max_run, spec.max_wait, spec.max_restarts, spec.on_demand_fallback) == (
        False, 86400, None, 5, False)
    assert (spec.transformers_version, spec.pytorch_version, spec.py_version) == ("4.28.1", "2.0.0", "py310")
    assert (spec.mp_parameters, spec.processes_per_host, spec.preset) == (None, None, None)


def test_frozen_and_no_extra_fields() -> None:
    spec = spec_from_fields(fields())
    with pytest.raises(pydantic.ValidationError):
        spec.instance_count = 3  # type: ignore[misc]
    with pytest.raises(SpecError, match="colour is not a job field"):
        spec_from_fields(fields(colour="blue"))


def test_spec_error_is_bad_input_with_exit_code_2() -> None:
    with pytest.raises(SpecError) as caught:
        spec_from_fields(fields(instance_count="many"))
    assert isinstance(caught.value, BadInput)
    assert caught.value.exit_code == 2


def test_spot_defaults_max_wait_and_checkpointing() -> None:
    spec = spec_from_fields(fields(spot=True, max_run=1000))
    assert spec.max_wait == 2000
    assert spec.hyperparameters["save_steps"] == 100
    short = spec_from_fields(fields(spot=True, hyperparameters={"max_steps": 40}))
    assert short.hyperparameters["save_steps"] == 10
    kept = spec_from_fields(fields(spot=True, hyperparameters={"save_steps": 7}))
    assert kept.hyperparameters["save_steps"] == 7


def test_spot_max_wait_default_stays_within_28_days() -> None:
    spec = spec_from_fields(fields(spot=True, max_run=20 * 86400))
    assert spec.max_wait == 28 * 86400


def test_model_parallel_defaults_from_the_roberta_preset() -> None:
    spec = spec_from_fields(fields(dataset="mnli", distribution="model", instance_type="ml.p3.16xlarge",
                                   instance_count=2, mp_parameters={"partitions": 2}))
    assert spec.processes_per_host == 8
    assert spec.mp_parameters == {"microbatches": 4, "placement_strategy": "spread", "pipeline": "interleaved",
                                  "optimize": "speed", "partitions": 2, "ddp": True}


def test_hyperparameter_text_from_json_is_typed() -> None:
    spec = spec_from_fields(fields(hyperparameters={"num_train_epochs": "2", "fp16": "yes", "run_name": "3"}))
    assert spec.hyperparameters == {"num_train_epochs": 2, "fp16": True, "run_name": "3"}


VALID_RULES: list[dict[str, Any]] = [
    fields(instance_count=16, distribution="ddp"),
    fields(instance_type="ml.p3.16xlarge", instance_count=2, distribution="data"),
    fields(instance_type="ml.p3dn.24xlarge", distribution="data"),
    fields(instance_type="ml.p4d.24xlarge", distribution="data"),
    fields(instance_type="ml.p4de.24xlarge", distribution="data", transformers_version="4.36.0"),
    fields(instance_type="ml.g5.12xlarge", instance_count=2, distribution="ddp"),
    fields(instance_type="ml.g5.xlarge", distribution="ddp"),
    fields(instance_type="ml.p3.16xlarge", distribution="model"),
    fields(instance_type="ml.g5.12xlarge", distribution="model", processes_per_host=4),
    fields(spot=True, max_run=3600, max_wait=3600),
    fields(instance_type="ml.g5.xlarge", hyperparameters={"bf16": True}),
    fields(hyperparameters={"fp16": True, "bf16": False}),
    fields(transformers_version="4.56.2", pytorch_version="2.8.0", py_version="py312"),
    fields(train_data="s3://bucket/prefix", dataset=None, task="question-answering"),
    fields(dataset="someone/reviews:default", task="text-classification"),
    fields(max_restarts=0),
    fields(max_run=28 * 86400),
]


@pytest.mark.parametrize("data", VALID_RULES)
def test_valid_combinations(data: dict[str, Any]) -> None:
    spec_from_fields({k: v for k, v in data.items() if v is not None})


INVALID_RULES: list[tuple[dict[str, Any], str]] = [
    (fields(instance_type="ml.p99.huge"), "Unknown instance type"),
    (fields(instance_type="ml.trn1.32xlarge"), "Neuron"),
    (fields(instance_count=0), "between 1 and 16"),
    (fields(instance_count=17, distribution="ddp"), "between 1 and 16"),
    (fields(instance_count=2), "needs distribution=ddp or fsdp (or the article's data or model)"),
    (fields(distribution="data"), "runs only on ml.p3.16xlarge"),
    (fields(instance_type="ml.g5.48xlarge", distribution="data"), "use distribution=ddp"),
    (fields(instance_type="ml.p3.16xlarge", distribution="data", transformers_version="4.46.1"), "PyTorch 2.2 or older"),
    (fields(instance_type="ml.p3.16xlarge", distribution="model", transformers_version="4.56.2"), "PyTorch 2.2 or older"),
    (fields(distribution="model"), "multi-GPU"),
    (fields(instance_type="ml.p3.16xlarge", distribution="model", processes_per_host=16), "between 1 and the 8 GPU"),
    (fields(instance_type="ml.p3.16xlarge", distribution="model", mp_parameters={"partitions": 3}), "must divide"),
    (fields(instance_type="ml.p3.16xlarge", distribution="model", mp_parameters={"pipeline": "fast"}), "mp.pipeline must be one of"),
    (fields(instance_type="ml.p3.16xlarge", distribution="model", mp_parameters={"microbatches": 0}), "mp.microbatches takes a whole number"),
    (fields(instance_type="ml.p3.16xlarge", distribution="model", mp_parameters={"ddp": "maybe"}), "mp.ddp takes yes or no"),
    (fields(instance_type="ml.p3.16xlarge", distribution="model", mp_parameters={"warp": 1}), "not a model-parallel parameter"),
    (fields(instance_type="ml.p3.16xlarge", distribution="model", mp_parameters={"default_partition": 4}), "less than partitions"),
    (fields(mp_parameters={"partitions": 2}), "need distribution=model"),
    (fields(processes_per_host=2), "need distribution=model"),
    (fields(spot=True, max_run=3600, max_wait=1800), "at least max_run"),
    (fields(max_wait=3600), "max_wait only applies to spot jobs"),
    (fields(max_run=0), "between 1 second and 28 days"),
    (fields(max_run=28 * 86400 + 1), "28 days"),
    (fields(spot=True, max_run=60, max_wait=29 * 86400), "at most 28 days"),
    (fields(transformers_version="4.99.0", pytorch_version="2.0.0", py_version="py310"), "no Hugging Face training container"),
    (fields(transformers_version="4.28.1", pytorch_version="2.0.0", py_version="py39"), "no Hugging Face training container"),
    (fields(transformers_version="4.17.0"), "transformers 4.26 or newer"),
    (fields(hyperparameters={"fp16": True, "bf16": True}), "cannot both be on"),
    (fields(hyperparameters={"bf16": True}), "bf16=yes needs an A100"),
    (fields(hyperparameters={"model_name_or_path": "x"}), "set by trainbot"),
    (fields(hyperparameters={"dataset_name": "x"}), "use dataset="),
    (fields(hyperparameters={"bad name": 1}), "not valid"),
    (fields(hyperparameters={"max_steps": 1.5}), "takes a int value"),
    (fields(hyperparameters={"max_steps": True}), "takes a int value"),
    (fields(hyperparameters={"fp16": 1}), "takes a bool value"),
    (fields(hyperparameters={"learning_rate": 5}), "at most 1"),
    (fields(hyperparameters={"warmup_ratio": 1.5}), "at most 1"),
    (fields(hyperparameters={"other": float("inf")}), "unusable value"),
    (fields(hyperparameters={"other": "x" * 3000}), "unusable value"),
    (fields(hyperparameters={f"h{i}": i for i in range(101)}), "at most 100 hyperparameters"),
    (fields(task="text-classification"), "dataset=squad is question-answering data"),
    (fields(dataset="imdb", task="question-answering"), "change one of them"),
    (fields(model="has space"), "not a usable name"),
    (fields(model=""), "not a usable name"),
    (fields(train_data="http://x"), "train_data must be an s3:// prefix"),
    (fields(preset="nope"), "Unknown preset"),
    (fields(max_restarts=21), "max_restarts must be between 0 and 20"),
    (fields(task="translation"), "task must be one of"),
    (fields(distribution="pipeline"), "distribution must be one of"),
    ({"dataset": "squad"}, "Say which model"),
    ({"model": "m"}, "Say which data"),
    ({"model": "m", "dataset": "x/y"}, "Say which task"),
]


@pytest.mark.parametrize(("data", "message"), INVALID_RULES)
def test_invalid_combinations(data: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        spec_from_fields(data)
    assert message in caught.value.message
    assert "\n" not in caught.value.message


def test_dataset_hyperparameters() -> None:
    assert dataset_hyperparameters("squad") == {"dataset_name": "squad"}
    assert dataset_hyperparameters("mnli") == {"dataset_name": "glue", "dataset_config_name": "mnli"}
    assert dataset_hyperparameters("imdb") == {"dataset_name": "imdb"}
    assert dataset_hyperparameters("owner/data:cfg") == {"dataset_name": "owner/data", "dataset_config_name": "cfg"}
    assert dataset_hyperparameters("owner/data") == {"dataset_name": "owner/data"}


class TestVersions:
    def test_defaults_per_distribution(self) -> None:
        for distribution in ("none", "data", "model"):
            assert versions.default_versions(distribution) == ("4.28.1", "2.0.0", "py310")
        newest = versions.sdk_training_combinations()[-1].as_tuple()  # ddp: the newest image the SDK knows
        assert versions.default_versions("ddp") == newest
        assert newest[1] in versions.torch_distributed_pytorch_versions()
        # fsdp: the newest of all, the image beyond the SDK's tables (the Trainer's FSDP settings improve with each)
        assert versions.default_versions("fsdp") == versions.training_combinations()[-1].as_tuple() == (
            "5.3.0", "2.9.0", "py312")

    def test_read_from_the_installed_sdk(self) -> None:
        assert versions.sdk_folder() is not None
        assert "ml.p3.16xlarge" in versions.dataparallel_instance_types()
        assert "ml.p3dn.24xlarge" in versions.dataparallel_instance_types()
        assert "ml.p4d.24xlarge" in versions.dataparallel_instance_types()
        assert "local_gpu" not in versions.dataparallel_instance_types()
        assert max(versions.dataparallel_pytorch_versions(), key=versions.version_key) == "2.2.0"

    def test_data_parallel_stops_at_pytorch_2_2(self) -> None:
        for combo in versions.supported_combinations("data"):
            assert versions.version_key(combo.pytorch) <= (2, 2, 0)
            assert versions.version_key(combo.transformers) >= (4, 26)

    def test_validate(self) -> None:
        versions.validate_versions("4.28.1", "2.0.0", "py310", "data")
        with pytest.raises(SpecError, match="PyTorch 2.2 or older"):
            versions.validate_versions("4.56.2", "2.8.0", "py312", "data")
        versions.validate_versions("4.56.2", "2.8.0", "py312", "ddp")

    def test_complete_partial_versions(self) -> None:
        assert versions.complete_versions("4.36", None, None, "none") == ("4.36.0", "2.1.0", "py310")
        assert versions.complete_versions(None, "2.1", None, "ddp") == ("4.36.0", "2.1.0", "py310")

    def test_inference_supported(self) -> None:
        assert versions.inference_supported("4.28.1", "2.0.0")
        assert versions.inference_supported("4.37.0", "2.1.0")
        assert not versions.inference_supported("4.56.2", "2.8.0")

    def test_sagemaker_is_never_imported(self) -> None:
        code = (
            "import sys; from jobs.planning.grammar import parse_command; from jobs.planning.plan import build_plan; "
            "from jobs.planning.versions import inference_supported; inference_supported('4.28.1', '2.0.0'); "
            "build_plan(parse_command('bert-squad'), bucket='', lineage_id='x'); "
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('sagemaker', 'boto3', 'botocore', 'slack_bolt', 'slack_sdk', 'apscheduler', 'torch')]; "
            "assert not bad, bad"
        )
        subprocess.run([sys.executable, "-c", code], check=True)


class TestInstances:
    def test_families_and_gpus(self) -> None:
        families = {instance_info(name).family for name in instance_names()}
        assert {"p3", "p3dn", "p4d", "p4de", "p5", "g4dn", "g5", "g6", "trn1"} <= families
        p3 = instance_info("ml.p3.16xlarge")
        assert (p3.gpus, p3.gpu_memory_gb, p3.total_gpu_memory_gb, p3.vcpus) == (8, 16, 128, 64)
        assert instance_info("p4de.24xlarge").gpu_memory_gb == 80
        assert instance_info("ml.p3.2xlarge").gpus == 1

    def test_unknown_suggests_the_nearest(self) -> None:
        with pytest.raises(SpecError, match="did you mean ml.g5.2xlarge"):
            instance_info("ml.g5.2xlarg")

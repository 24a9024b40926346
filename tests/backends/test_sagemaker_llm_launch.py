"""What SageMaker receives for today's recipes (moto; the CreateTrainingJob requests as sent, since moto drops
MetricDefinitions and Environment): the LLM presets and distribution=fsdp on the newest Hugging Face image, which
the SDK's tables lack and which goes by its URI, each request compared with the one the SDK's own
``HuggingFace(...)`` sends for the same arguments."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from jobs.backends.sagemaker.session import build_sdk_session
from jobs.planning import versions
from tests.support.moto_server import (  # noqa: F401
    CallRecorder,
    MotoAws,
    moto_aws_module,
    moto_server,
    plan_for,
    sagemaker_backend,
)

NEWEST = "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-training:2.9.0-transformers5.3.0-gpu-py312-cu130-ubuntu22.04"
RECIPES = {
    "lora": "llm-lora",
    "fsdp": "llm-fsdp",
    "bert-fsdp": "bert-squad distribution=fsdp instance_type=ml.p4d.24xlarge transformers_version=5.3",
    "classic-5.3": "distilbert-spot transformers_version=5.3 instance_type=ml.g5.xlarge",
}
#: Names whose values are the job's own by construction (its name, and where its code was uploaded).
_PER_JOB = ("sagemaker_job_name", "sagemaker_submit_directory")


@dataclass(frozen=True)
class Launched:
    aws: MotoAws
    requests: dict[str, dict[str, Any]]
    plans: dict[str, Any]


@pytest.fixture(scope="module")
def launched(moto_aws_module: MotoAws) -> Iterator[Launched]:  # noqa: F811
    recorder = CallRecorder()
    backend = sagemaker_backend(moto_aws_module, moto_aws_module.boto_session(recorders=[recorder]))
    plans = {key: plan_for(text, f"today-{key}") for key, text in RECIPES.items()}
    for key, plan in plans.items():
        backend.launch(f"today-{key}-1", plan)
    yield Launched(moto_aws_module, {key: recorder.by_name(f"today-{key}-1") for key in RECIPES}, plans)


def _hps(request: dict[str, Any]) -> dict[str, Any]:
    return {key: json.loads(value) for key, value in request["HyperParameters"].items()}


def _sdk_request(aws: MotoAws, job_name: str, estimator: dict[str, Any]) -> dict[str, Any]:
    """CreateTrainingJob as the SDK sends it for ``HuggingFace(**estimator).fit()``."""
    from botocore.config import Config
    from sagemaker.huggingface import HuggingFace

    recorder = CallRecorder()
    sdk = build_sdk_session(aws.boto_session(recorders=[recorder]), bucket=aws.bucket,
                            config=Config(retries={"max_attempts": 1}))
    HuggingFace(**estimator, role=aws.role_arn, sagemaker_session=sdk).fit(wait=False, logs=False, job_name=job_name)
    return recorder.by_name(job_name)


def _comparable(request: dict[str, Any]) -> dict[str, Any]:
    return {
        "AlgorithmSpecification": request["AlgorithmSpecification"],
        "HyperParameters": {k: v for k, v in request["HyperParameters"].items() if k not in _PER_JOB},
        "ResourceConfig": request["ResourceConfig"],
        "StoppingCondition": request["StoppingCondition"],
        "EnableManagedSpotTraining": request.get("EnableManagedSpotTraining"),
        "CheckpointConfig": request.get("CheckpointConfig"),
        "Tags": request.get("Tags"),
    }


@pytest.mark.parametrize("key", ["lora", "fsdp"])
def test_each_llm_preset_is_the_request_the_sdk_sends_for_its_arguments(launched: Launched, key: str) -> None:
    plan = launched.plans[key]
    # The plan names the image beyond the SDK's tables with a placeholder; the backend fills in its region.
    assert plan.estimator["image_uri"] == NEWEST.replace("us-east-1", "<region>")
    estimator = {**plan.estimator, "image_uri": NEWEST}
    expected = _sdk_request(launched.aws, f"today-sdk-{key}-1", estimator)
    assert _comparable(launched.requests[key]) == _comparable(expected)


def test_the_newest_image_goes_by_its_uri_and_the_job_records_its_versions(launched: Launched) -> None:
    assert versions.beyond_sdk(versions.Combination("5.3.0", "2.9.0", "py312")) is not None  # not in the SDK's tables
    for key, request in launched.requests.items():
        assert request["AlgorithmSpecification"]["TrainingImage"] == NEWEST, key
        tags = {tag["Key"]: tag["Value"] for tag in request["Tags"]}
        assert tags["trainbot:image"] == "transformers5.3.0-pt2.9.0-py312", key


def test_llm_lora_is_one_l40s_on_spot_with_an_adapter_and_checkpoints(launched: Launched) -> None:
    request, plan = launched.requests["lora"], launched.plans["lora"]
    assert request["ResourceConfig"] == {"InstanceType": "ml.g6e.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100}
    assert request["EnableManagedSpotTraining"] is True
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 14400, "MaxWaitTimeInSeconds": 28800}
    assert request["CheckpointConfig"] == {"S3Uri": plan.checkpoint_uri, "LocalPath": "/opt/ml/checkpoints"}
    hps = _hps(request)
    assert hps["sagemaker_program"] == "train_sft.py"
    assert "sagemaker_distributed_dataparallel_enabled" not in hps and "sagemaker_torch_distributed_enabled" not in hps
    assert {k: hps[k] for k in ("bf16", "gradient_checkpointing", "lora_r", "lora_alpha", "checkpoint_minutes")} == {
        "bf16": True, "gradient_checkpointing": True, "lora_r": 16, "lora_alpha": 32, "checkpoint_minutes": 10.0}
    assert hps["model_name_or_path"] == "Qwen/Qwen2.5-7B-Instruct" and hps["dataset_name"] == "trl-lib/Capybara"
    names = {d["Name"] for d in request["AlgorithmSpecification"]["MetricDefinitions"]}
    assert {"loss", "eval_loss", "train_tokens_per_second"} <= names


def test_fsdp_is_torchrun_on_every_gpu_with_the_trainers_fsdp_settings(launched: Launched) -> None:
    for key, instance, count in (("fsdp", "ml.p5.48xlarge", 2), ("bert-fsdp", "ml.p4d.24xlarge", 2)):
        request = launched.requests[key]
        hps = _hps(request)
        assert request["ResourceConfig"]["InstanceType"] == instance
        assert request["ResourceConfig"]["InstanceCount"] == count
        assert hps["sagemaker_torch_distributed_enabled"] is True  # the toolkit's torchrun, every GPU a process
        assert "sagemaker_distributed_dataparallel_enabled" not in hps and "sagemaker_mpi_enabled" not in hps
        assert hps["fsdp"] == "full_shard auto_wrap"
        assert json.loads(hps["fsdp_config"]) == {"activation_checkpointing": True}
        assert hps["gradient_checkpointing"] is False  # FSDP's activation checkpointing instead (never both)
    assert _hps(launched.requests["fsdp"])["use_lora"] is False


def test_fsdp_refuses_an_image_without_the_trainers_fsdp_settings_in_one_sentence() -> None:
    from jobs.errors import SpecError
    from jobs.planning.grammar import parse_command

    with pytest.raises(SpecError) as refused:
        parse_command("bert-squad distribution=fsdp instance_type=ml.p4d.24xlarge transformers_version=4.28.1")
    assert "cannot run distribution=fsdp" in str(refused.value) and "4.36" in str(refused.value)
    assert "5.3.0/pt2.9.0/py312" in str(refused.value)

"""What SageMaker receives when the backend launches each recipe: the CreateTrainingJob request as sent
(moto drops MetricDefinitions and more), and the code tarball really uploaded to the bucket."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from jobs.planning.plan import METRIC_DEFINITIONS, checkpoint_uri
from tests.support.moto_server import (
    CallRecorder,
    MotoAws,
    plan_for,
    sagemaker_backend,
)

IMAGE_REPOSITORY = "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-training"
RECIPES = {
    "bert": "bert-squad",
    "roberta": "roberta-mnli",
    "spot": "distilbert-spot",
    "ddp": "distilbert-spot distribution=ddp instances=2 instance_type=ml.p3.16xlarge spot=no",
    "spot2": "distilbert-spot",  # a second lineage of the same recipe
}


@dataclass(frozen=True)
class Launched:
    aws: MotoAws
    requests: dict[str, dict[str, Any]]  # recipe key -> CreateTrainingJob body as sent
    plans: dict[str, Any]


@pytest.fixture(scope="module")
def launched(moto_aws_module: MotoAws) -> Iterator[Launched]:
    recorder = CallRecorder()
    backend = sagemaker_backend(moto_aws_module, moto_aws_module.boto_session(recorders=[recorder]))
    plans = {key: plan_for(text, f"launch-{key}") for key, text in RECIPES.items()}
    for key, plan in plans.items():
        backend.launch(f"launch-{key}-1", plan)
    yield Launched(moto_aws_module, {key: recorder.by_name(f"launch-{key}-1") for key in RECIPES}, plans)


def _hp(request: dict[str, Any], name: str) -> Any:
    """The SDK JSON-encodes every hyperparameter value."""
    return json.loads(request["HyperParameters"][name])


def test_every_recipe_runs_the_hugging_face_training_image_of_its_versions(launched: Launched) -> None:
    for key, request in launched.requests.items():
        spec = launched.plans[key].spec
        image = request["AlgorithmSpecification"]["TrainingImage"]
        tag = f"{spec.pytorch_version}-transformers{spec.transformers_version}-gpu-{spec.py_version}-"
        assert image.startswith(f"{IMAGE_REPOSITORY}:{tag}"), (key, image)
    assert "transformers4.28.1" in launched.requests["bert"]["AlgorithmSpecification"]["TrainingImage"]


def test_the_entry_point_and_the_uploaded_code_are_what_the_job_runs(launched: Launched) -> None:
    s3 = launched.aws.client("s3")
    for key, request in launched.requests.items():
        program = _hp(request, "sagemaker_program")
        assert program == {"bert": "train_qa.py"}.get(key, "train_classification.py")
        submit = _hp(request, "sagemaker_submit_directory")
        bucket, _, object_key = submit.removeprefix("s3://").partition("/")
        assert bucket == launched.aws.bucket and object_key.startswith(f"trainbot/launch-{key}/code/")
        tarball = s3.get_object(Bucket=bucket, Key=object_key)["Body"].read()
        with tarfile.open(fileobj=io.BytesIO(tarball)) as archive:
            assert program in archive.getnames()


def test_data_parallel_enables_smdistributed_dataparallel(launched: Launched) -> None:
    request = launched.requests["bert"]
    assert _hp(request, "sagemaker_distributed_dataparallel_enabled") is True
    assert "sagemaker_mpi_enabled" not in request["HyperParameters"]
    assert request["ResourceConfig"] == {
        "InstanceType": "ml.p3.16xlarge",
        "InstanceCount": 2,
        "VolumeSizeInGB": 200,
    }


def test_model_parallel_runs_mpi_with_the_articles_parameters(launched: Launched) -> None:
    request = launched.requests["roberta"]
    assert _hp(request, "sagemaker_mpi_enabled") is True
    assert _hp(request, "sagemaker_mpi_num_of_processes_per_host") == 8
    assert _hp(request, "mp_parameters") == {
        "microbatches": 4,
        "placement_strategy": "spread",
        "pipeline": "interleaved",
        "optimize": "speed",
        "partitions": 4,
        "ddp": True,
    }
    assert _hp(request, "sagemaker_distributed_dataparallel_enabled") is False


def test_ddp_runs_torchrun(launched: Launched) -> None:
    request = launched.requests["ddp"]
    assert _hp(request, "sagemaker_torch_distributed_enabled") is True
    assert "sagemaker_mpi_enabled" not in request["HyperParameters"]
    assert request["ResourceConfig"]["InstanceCount"] == 2
    assert not request.get("EnableManagedSpotTraining", False)


def test_managed_spot_sets_spot_the_wait_and_the_lineages_checkpoints(launched: Launched) -> None:
    request = launched.requests["spot"]
    assert request["EnableManagedSpotTraining"] is True
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 1000, "MaxWaitTimeInSeconds": 3600}
    assert request["ResourceConfig"]["InstanceType"] == "ml.p3.2xlarge"
    assert request["ResourceConfig"]["InstanceCount"] == 1
    assert request["CheckpointConfig"] == {
        "S3Uri": checkpoint_uri(launched.aws.bucket, "launch-spot"),
        "LocalPath": "/opt/ml/checkpoints",
    }


def test_two_lineages_never_share_checkpoints(launched: Launched) -> None:
    uris = {key: request["CheckpointConfig"]["S3Uri"] for key, request in launched.requests.items()}
    assert len(set(uris.values())) == len(uris)
    assert uris["spot"] != uris["spot2"]


def test_on_demand_jobs_have_no_max_wait(launched: Launched) -> None:
    for key in ("bert", "roberta", "ddp"):
        stopping = launched.requests[key]["StoppingCondition"]
        assert stopping == {"MaxRuntimeInSeconds": launched.plans[key].spec.max_run}
        assert not launched.requests[key].get("EnableManagedSpotTraining", False)


def test_metric_definitions_and_tags_are_sent(launched: Launched) -> None:
    for key, request in launched.requests.items():
        assert request["AlgorithmSpecification"]["MetricDefinitions"] == METRIC_DEFINITIONS
        tags = {tag["Key"]: tag["Value"] for tag in request["Tags"]}
        assert tags["trainbot:lineage"] == f"launch-{key}"
        assert tags["trainbot:launched-by"] == "U1"


def test_the_role_and_output_are_the_configured_ones(launched: Launched) -> None:
    for key, request in launched.requests.items():
        assert request["RoleArn"] == launched.aws.role_arn
        assert (
            request["OutputDataConfig"]["S3OutputPath"]
            == f"s3://{launched.aws.bucket}/trainbot/launch-{key}/output"
        )
        assert "InputDataConfig" not in request  # no train_data: the scripts load the hub dataset


def test_the_job_exists_on_sagemaker_after_launch(launched: Launched) -> None:
    described = launched.aws.client("sagemaker").describe_training_job(TrainingJobName="launch-spot-1")
    assert described["EnableManagedSpotTraining"] is True


def test_train_data_becomes_the_train_channel(moto_aws: MotoAws) -> None:
    recorder = CallRecorder()
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[recorder]))
    data = f"s3://{moto_aws.bucket}/datasets/reviews/"
    backend.launch("channel-1", plan_for(f"distilbert-spot train_data={data}", "channel"))
    channels = recorder.last["InputDataConfig"]
    assert [channel["ChannelName"] for channel in channels] == ["train"]
    assert channels[0]["DataSource"]["S3DataSource"]["S3Uri"] == data

"""Deploying a job that trained on (moto's) SageMaker: the CreateModel, CreateEndpointConfig and
CreateEndpoint requests as sent, the endpoint followed to InService, /predict answered by moto's
sagemaker-runtime, /undeploy deleting endpoint and config and keeping the model.

A bert-squad job is launched once through JobService and the real SageMakerBackend; moto creates it
Completed, and the watcher records its S3ModelArtifacts, which is what the deploy must serve.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.backends import get_backend

from jobs.backends.sagemaker.endpoints import SageMakerEndpoints, remember_valid_configs
from jobs.endpoints.port import EndpointStatus
from jobs.endpoints.service import EndpointService
from jobs.errors import ConfigError
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
from jobs.lineage import LineageStatus
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import Store
from tests.support.clock import FakeClock
from tests.support.moto_server import (  # noqa: F401  (fixtures)
    ACCOUNT_ID,
    REGION,
    CallRecorder,
    ErrorAnswer,
    MotoAws,
    moto_aws_module,
    moto_server,
    sagemaker_backend,
)

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
INFERENCE_IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-inference"
OPERATIONS = (
    "CreateModel",
    "CreateEndpointConfig",
    "CreateEndpoint",
    "DeleteEndpoint",
    "DeleteEndpointConfig",
)


@dataclass
class Rig:
    aws: MotoAws
    store: Store
    clock: FakeClock
    lineage_id: str
    artifacts: str  # the training job's S3ModelArtifacts, as SageMaker (moto) reports it
    service: EndpointService
    sent: dict[str, CallRecorder]
    invoked: CallRecorder

    def request(self, operation: str, key: str, name: str) -> dict[str, Any]:
        found = [call for call in self.sent[operation].calls if call.get(key) == name]
        assert found, f"no {operation} for {name}; sent {self.sent[operation].calls}"
        return found[-1]

    def notes(self, kind: str) -> list[dict[str, Any]]:
        return [n.payload for n in self.store.outbox.due_notifications(limit=500) if n.kind == kind]


@pytest.fixture(scope="module")
def rig(moto_aws_module: MotoAws, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:  # noqa: F811
    aws, home = moto_aws_module, tmp_path_factory.mktemp("sm-endpoints")
    clock = FakeClock(datetime.now(timezone.utc))
    store = Store(f"sqlite:///{home / 'trainbot.db'}", clock=clock)
    store.migrate()
    settings = Settings(trainbot_bucket=aws.bucket, trainbot_role_arn=aws.role_arn, trainbot_home=home)
    remember_valid_configs()  # the SDK would check its config against its schema ~20 times a launch
    training = sagemaker_backend(aws)
    jobs = JobService(
        store=store,
        backend=training,
        settings=settings,
        clock=clock,
        new_lineage_id=lambda spec: f"ep-{datetime.now():%H%M%S%f}",
    )
    lineage = jobs.launch("bert-squad", actor=ALICE)
    clock.advance(1)
    Watcher(store, training, clock, settings).poll_once()  # moto made it Completed
    artifacts = aws.client("sagemaker").describe_training_job(TrainingJobName=f"{lineage.id}-1")
    sent = {op: CallRecorder(op) for op in OPERATIONS}
    invoked = CallRecorder("InvokeEndpoint", service="sagemaker-runtime")
    session = aws.boto_session(recorders=[*sent.values(), invoked])
    backend = SageMakerEndpoints(session, role_arn=aws.role_arn, bucket=aws.bucket, region=aws.region)
    service = EndpointService(store=store, backend=backend, settings=settings, clock=clock)
    yield Rig(
        aws, store, clock, lineage.id, artifacts["ModelArtifacts"]["S3ModelArtifacts"], service, sent, invoked
    )


def moto_endpoint(name: str) -> Any:
    return get_backend("sagemaker")[ACCOUNT_ID][REGION].endpoints[name]


def queue_runtime_answer(aws: MotoAws, body: Any) -> None:
    """moto's sagemaker-runtime answers InvokeEndpoint from a queue set through its API."""
    results = {
        "results": [
            {
                "Body": json.dumps(body),
                "ContentType": "application/json",
                "InvokedProductionVariant": "AllTraffic",
                "CustomAttributes": "",
            }
        ]
    }
    request = urllib.request.Request(
        f"{aws.endpoint_url}/moto-api/static/sagemaker/endpoint-results",
        data=json.dumps(results).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request).read()


def test_the_job_completed_with_its_model_recorded(rig: Rig) -> None:
    lineage = rig.store.get_lineage(rig.lineage_id)
    assert lineage.status is LineageStatus.COMPLETED
    assert lineage.latest_attempt is not None and lineage.latest_attempt.model_artifacts == rig.artifacts
    assert rig.artifacts.startswith(f"s3://{rig.aws.bucket}/") and rig.artifacts.endswith(
        "/output/model.tar.gz"
    )


def test_deploy_sends_the_hugging_face_inference_model_of_the_jobs_artifacts(rig: Rig) -> None:
    options = {"instance_type": "ml.g4dn.2xlarge", "instance_count": "2", "name": "sm-realtime"}
    endpoint = rig.service.deploy(rig.lineage_id, options=options, actor=ALICE)
    model = rig.request("CreateModel", "ModelName", endpoint.model_name)
    container = model["PrimaryContainer"]
    assert container["Image"].startswith(f"{INFERENCE_IMAGE}:2.0.0-transformers4.28.1-gpu-py310-")
    assert container["ModelDataUrl"] == rig.artifacts
    assert container["Environment"]["HF_TASK"] == "question-answering"
    assert model["ExecutionRoleArn"] == rig.aws.role_arn
    config = rig.request("CreateEndpointConfig", "EndpointConfigName", "sm-realtime")
    [variant] = config["ProductionVariants"]
    assert (variant["InstanceType"], variant["InitialInstanceCount"]) == ("ml.g4dn.2xlarge", 2)
    assert variant["ModelName"] == endpoint.model_name
    created = rig.request("CreateEndpoint", "EndpointName", "sm-realtime")
    assert created["EndpointConfigName"] == "sm-realtime"
    assert endpoint.status is EndpointStatus.CREATING  # wait=False: the deploy did not wait


def test_the_endpoint_is_followed_to_in_service_and_announced_with_links(rig: Rig) -> None:
    name = rig.service.deploy(rig.lineage_id, options={"name": "sm-follow"}, actor=ALICE).name
    moto_endpoint(name).endpoint_status = "Creating"  # moto creates endpoints InService at once
    assert name not in rig.service.poll_once().ready
    assert rig.service.get(name).remote_status == "Creating"
    moto_endpoint(name).endpoint_status = "InService"
    assert name in rig.service.poll_once().ready
    assert rig.service.get(name).status is EndpointStatus.IN_SERVICE
    [note] = [n for n in rig.notes("endpoint_ready") if n["endpoint"] == name]
    assert note["console_url"] == (
        f"https://{REGION}.console.aws.amazon.com/sagemaker/home?region={REGION}#/endpoints/{name}"
    )
    assert (
        note["invocation_url"]
        == f"https://runtime.sagemaker.{REGION}.amazonaws.com/endpoints/{name}/invocations"
    )
    assert f"--endpoint-name {name}" in note["cli"] and note["lineage_id"] == rig.lineage_id


def test_predict_is_answered_by_the_runtime_with_the_json_sent(rig: Rig) -> None:
    name = rig.service.deploy(rig.lineage_id, options={"name": "sm-predict"}, actor=ALICE).name
    queue_runtime_answer(rig.aws, {"score": 0.91, "start": 12, "end": 16, "answer": "kalo"})
    answer = rig.service.predict(
        name, {"question": "What is the city?", "context": "the city is kalo ."}, actor=ALICE
    )
    assert (answer["answer"], answer["score"]) == ("kalo", 0.91)
    sent = [
        call
        for call in rig.invoked.calls
        if call == {"inputs": {"question": "What is the city?", "context": "the city is kalo ."}}
    ]
    assert len(sent) == 1


def test_undeploy_deletes_endpoint_and_config_and_keeps_the_model(rig: Rig) -> None:
    endpoint = rig.service.deploy(rig.lineage_id, options={"name": "sm-undeploy"}, actor=ALICE)
    rig.service.undeploy(endpoint.name, actor=ALICE)
    assert rig.request("DeleteEndpoint", "EndpointName", "sm-undeploy")
    assert rig.request("DeleteEndpointConfig", "EndpointConfigName", "sm-undeploy")
    sagemaker = rig.aws.client("sagemaker")
    for call in (
        lambda: sagemaker.describe_endpoint(EndpointName="sm-undeploy"),
        lambda: sagemaker.describe_endpoint_config(EndpointConfigName="sm-undeploy"),
    ):
        with pytest.raises(ClientError):
            call()
    assert sagemaker.describe_model(ModelName=endpoint.model_name)["ModelName"] == endpoint.model_name
    assert rig.service.get("sm-undeploy").status is EndpointStatus.DELETED
    again = rig.service.deploy(
        rig.lineage_id, options={"name": "sm-undeploy"}, actor=ALICE
    )  # the name is free
    assert again.model_name != endpoint.model_name


def test_serverless_sends_memory_and_concurrency_and_no_instances(rig: Rig) -> None:
    options = {"serverless": "yes", "memory_mb": "3072", "name": "sm-serverless"}
    endpoint = rig.service.deploy(rig.lineage_id, options=options, actor=ALICE)
    [variant] = rig.request("CreateEndpointConfig", "EndpointConfigName", "sm-serverless")[
        "ProductionVariants"
    ]
    assert variant["ServerlessConfig"] == {"MemorySizeInMB": 3072, "MaxConcurrency": 5}
    assert "InstanceType" not in variant and "InitialInstanceCount" not in variant
    image = rig.request("CreateModel", "ModelName", endpoint.model_name)["PrimaryContainer"]["Image"]
    assert image.startswith(f"{INFERENCE_IMAGE}:2.0.0-transformers4.28.1-cpu-py310-")


def test_a_failed_endpoint_is_reported_and_its_config_removed(rig: Rig) -> None:
    name = rig.service.deploy(rig.lineage_id, options={"name": "sm-failed"}, actor=ALICE).name
    moto_endpoint(name).endpoint_status = "Failed"
    moto_endpoint(
        name
    ).failure_reason = (
        "The primary container for production variant AllTraffic did not pass the ping health check."
    )
    assert name in rig.service.poll_once().failed
    [note] = [n for n in rig.notes("endpoint_failed") if n["endpoint"] == name]
    assert "did not pass the ping health check" in note["text"]
    assert rig.request("DeleteEndpointConfig", "EndpointConfigName", name)


def test_an_aws_refusal_is_one_sentence_and_leaves_the_endpoint_failed(rig: Rig) -> None:
    denied = ErrorAnswer(
        "CreateModel", "AccessDeniedException", "not authorized to perform sagemaker:CreateModel"
    )
    session = rig.aws.boto_session(recorders=[denied])
    backend = SageMakerEndpoints(session, role_arn=rig.aws.role_arn, bucket=rig.aws.bucket, region=REGION)
    service = EndpointService(store=rig.store, backend=backend, settings=Settings(), clock=rig.clock)
    with pytest.raises(
        ConfigError, match="AWS denied CreateModel while trying to deploy endpoint sm-denied"
    ) as err:
        service.deploy(rig.lineage_id, options={"name": "sm-denied"}, actor=ALICE)
    assert "\n" not in err.value.message and denied.sent >= 1
    assert service.get("sm-denied").status is EndpointStatus.FAILED

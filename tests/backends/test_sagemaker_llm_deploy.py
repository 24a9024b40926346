"""Serving what llm-lora fine-tuned, on (moto's) SageMaker: two llm-lora jobs trained (moto makes them
Completed), the first deployed on the SDK's Text Generation Inference image, asked with prompt=, registered as
a model package, and the second promoted into its endpoint in place.

The image is compared with what the SDK's own ``get_huggingface_llm_image_uri`` resolves; moto lacks
UpdateEndpoint, which tests/support/update_endpoint.py checks against botocore's service model (Stubber), and
its endpoint configs know no instance type newer than ml.g4dn (not even ml.g5): here they are checked against
botocore's ProductionVariantInstanceType instead, the list SageMaker's API itself publishes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest

from jobs.backends.sagemaker.endpoints import SageMakerEndpoints, remember_valid_configs
from jobs.backends.sagemaker.registry import SageMakerRegistry
from jobs.endpoints.service import EndpointService
from jobs.errors import BadInput
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
from jobs.planning import versions
from jobs.records import Actor
from jobs.registry.service import RegistryService
from jobs.settings import Settings
from jobs.store.store import Store
from tests.backends.test_sagemaker_endpoints import queue_runtime_answer
from tests.support.clock import FakeClock
from tests.support.moto_server import (  # noqa: F401  (fixtures)
    CallRecorder,
    MotoAws,
    moto_aws_module,
    moto_server,
    sagemaker_backend,
    set_training_job_state,
)
from tests.support.update_endpoint import UpdateEndpointStub

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
OPERATIONS = ("CreateModel", "CreateEndpointConfig", "CreateModelPackage")


@dataclass
class Rig:
    aws: MotoAws
    store: Store
    service: EndpointService
    registry: RegistryService
    updates: UpdateEndpointStub
    sent: dict[str, CallRecorder]
    invoked: CallRecorder
    first: str
    second: str
    classic: str  # distilbert-spot on the newest training image (transformers 5.3)

    def request(self, operation: str, key: str, value: str) -> dict[str, Any]:
        found = [call for call in self.sent[operation].calls if call.get(key) == value]
        assert found, f"no {operation} with {key}={value}; sent {self.sent[operation].calls}"
        return found[-1]


def _service_model_instance_types() -> frozenset[str]:
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return frozenset(model.shape_for("ProductionVariantInstanceType").enum)


@pytest.fixture(scope="module")
def rig(moto_aws_module: MotoAws, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:  # noqa: F811
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.models import FakeEndpointConfig

    known = _service_model_instance_types()

    def validate(self: Any, instance_type: str) -> None:
        if instance_type not in known:
            raise ValidationError(message=f"Value '{instance_type}' at 'instanceType' is not an instance type")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FakeEndpointConfig, "validate_instance_type", validate)
        yield from _rig(moto_aws_module, tmp_path_factory)


def _rig(aws: MotoAws, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    home = tmp_path_factory.mktemp("sm-llm")
    clock = FakeClock(datetime.now(timezone.utc))
    store = Store(f"sqlite:///{home / 'trainbot.db'}", clock=clock)
    store.migrate()
    settings = Settings(trainbot_bucket=aws.bucket, trainbot_role_arn=aws.role_arn, trainbot_home=home)
    remember_valid_configs()
    training = sagemaker_backend(aws)
    counter = iter(range(1, 100))
    jobs = JobService(store=store, backend=training, settings=settings, clock=clock,
                      new_lineage_id=lambda spec: f"llm-{datetime.now():%H%M%S%f}-{next(counter)}")
    lineages = []
    for loss in (1.31, 1.12):
        lineage = jobs.launch("llm-lora registry=chat-line", actor=ALICE)
        set_training_job_state(f"{lineage.id}-1", "Completed", final_metrics={"eval_loss": loss})
        lineages.append(lineage.id)
    lineages.append(jobs.launch("distilbert-spot transformers_version=5.3 instance_type=ml.g5.xlarge", actor=ALICE).id)
    clock.advance(1)
    Watcher(store, training, clock, settings).poll_once()
    sent = {op: CallRecorder(op) for op in OPERATIONS}
    invoked = CallRecorder("InvokeEndpoint", service="sagemaker-runtime")
    updates = UpdateEndpointStub()
    session = aws.boto_session(recorders=[*sent.values(), invoked])
    updates.attach(session)
    backend = SageMakerEndpoints(session, role_arn=aws.role_arn, bucket=aws.bucket, region=aws.region)
    registry = RegistryService(store=store, remote=SageMakerRegistry(backend), settings=settings, clock=clock)
    service = EndpointService(store=store, backend=backend, settings=settings, clock=clock, registry=registry)
    yield Rig(aws, store, service, registry, updates, sent, invoked, *lineages)


def tgi_image(aws: MotoAws) -> str:
    """What the SDK itself resolves for its newest TGI image in this region."""
    from sagemaker.huggingface import get_huggingface_llm_image_uri

    return str(get_huggingface_llm_image_uri("huggingface", region=aws.region,
                                             version=versions.text_generation_server_version()))


def test_deploy_serves_the_merged_model_on_tgi_on_a_gpu_its_weights_fit(rig: Rig) -> None:
    endpoint = rig.service.deploy(rig.first, options={"name": "chat"}, actor=ALICE)
    model = rig.request("CreateModel", "ModelName", endpoint.model_name)
    container = model["PrimaryContainer"]
    assert container["Image"] == tgi_image(rig.aws)
    assert "huggingface-pytorch-tgi-inference" in container["Image"]
    assert container["ModelDataUrl"] == rig.store.get_lineage(rig.first).latest_attempt.model_artifacts
    env = container["Environment"]  # beside the SDK's own SAGEMAKER_* variables; no HF_TASK (TGI has none)
    assert (env["HF_MODEL_ID"], env["SM_NUM_GPUS"]) == ("/opt/ml/model", "1") and "HF_TASK" not in env
    [variant] = rig.request("CreateEndpointConfig", "EndpointConfigName", "chat")["ProductionVariants"]
    # Qwen2.5-7B's bf16 weights (~15 GB) twice over: the 24 GB A10G is too small, one 48 GB L40S is not.
    assert (variant["InstanceType"], variant["InitialInstanceCount"]) == ("ml.g6e.xlarge", 1)
    assert endpoint.framework.startswith("Hugging Face TGI ")


def test_a_transformers_5_model_deploys_on_the_inference_image_newer_than_the_sdks(rig: Rig) -> None:
    """The SDK's inference images stop at transformers 4.51.3, which cannot read what transformers 5 saves."""
    endpoint = rig.service.deploy(rig.classic, options={"name": "reviews"}, actor=ALICE)
    image = rig.request("CreateModel", "ModelName", endpoint.model_name)["PrimaryContainer"]["Image"]
    assert image == ("763104351884.dkr.ecr.us-east-1.amazonaws.com/huggingface-pytorch-inference:"
                     "2.6.0-transformers5.5.3-gpu-py312-cu124-ubuntu22.04")
    serverless = rig.service.deploy(rig.classic, options={"name": "reviews-sl", "serverless": "yes"}, actor=ALICE)
    image = rig.request("CreateModel", "ModelName", serverless.model_name)["PrimaryContainer"]["Image"]
    assert image.endswith(":2.6.0-transformers5.5.3-cpu-py312-ubuntu22.04")
    assert "transformers 5.5.3" in (endpoint.framework_note or "")


def test_a_four_gpu_type_shards_the_model_over_its_gpus(rig: Rig) -> None:
    endpoint = rig.service.deploy(rig.first, options={"name": "chat-wide", "instance_type": "ml.g6e.12xlarge"},
                                  actor=ALICE)
    container = rig.request("CreateModel", "ModelName", endpoint.model_name)["PrimaryContainer"]
    assert container["Environment"]["SM_NUM_GPUS"] == "4"


def test_a_type_too_small_or_serverless_is_refused_before_anything_is_made(rig: Rig) -> None:
    made = len(rig.sent["CreateModel"].calls)
    with pytest.raises(BadInput, match="needs about 30 GB of GPU memory.*ml.g4dn.xlarge has 16 GB.*ml.g6e.xlarge"):
        rig.service.deploy(rig.first, options={"name": "chat-small", "instance_type": "ml.g4dn.xlarge"}, actor=ALICE)
    with pytest.raises(BadInput, match="serverless"):
        rig.service.deploy(rig.first, options={"name": "chat-sl", "serverless": "yes"}, actor=ALICE)
    assert len(rig.sent["CreateModel"].calls) == made


def test_predict_sends_the_prompt_as_tgi_takes_it_and_answers_the_generated_text(rig: Rig) -> None:
    name = rig.service.deploy(rig.first, options={"name": "chat-ask"}, actor=ALICE).name
    chat = {"object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "the sky is blue ."}, "finish_reason": "stop"}]}
    queue_runtime_answer(rig.aws, chat)  # TGI's chat completion, as it answers messages on /invocations
    answer = rig.service.predict(name, {"prompt": "what colour is the sky ?", "max_new_tokens": "20"}, actor=ALICE)
    assert answer["answer"] == "the sky is blue ." and answer["score"] is None
    assert rig.invoked.calls[-1] == {"messages": [{"role": "user", "content": "what colour is the sky ?"}],
                                     "max_tokens": 20}
    with pytest.raises(BadInput, match='prompt="..."'):
        rig.service.predict(name, {"text": "a review"}, actor=ALICE)


def test_the_model_is_registered_with_the_tgi_container_and_promoted_in_place(rig: Rig) -> None:
    package = rig.registry.register(rig.first)
    assert package is not None and package.group_name == "chat-line"
    sent = rig.request("CreateModelPackage", "ModelPackageGroupName", "chat-line")
    [container] = sent["InferenceSpecification"]["Containers"]
    assert container["Image"] == tgi_image(rig.aws) and container["Environment"]["HF_MODEL_ID"] == "/opt/ml/model"
    assert sent["Task"] == "TEXT_GENERATION"
    assert sent["CustomerMetadataProperties"]["trainbot:metric:eval_loss"] == "1.31"

    rig.service.deploy(rig.first, options={"name": "chat-prod"}, actor=ALICE)
    rig.service.poll_once()  # moto's endpoints are InService at once
    plan = rig.service.promotions.plan(rig.second, "chat-prod", options={}, actor=ALICE)
    revision = rig.service.promotions.promote(plan, actor=ALICE)
    model = rig.request("CreateModel", "ModelName", revision.model_name)["PrimaryContainer"]
    assert model["Image"] == tgi_image(rig.aws)
    assert model["ModelDataUrl"] == rig.store.get_lineage(rig.second).latest_attempt.model_artifacts
    assert rig.updates.last_for("chat-prod")["EndpointConfigName"] == revision.config_name
    rig.service.poll_once()
    assert rig.service.get("chat-prod").lineage_id == rig.second

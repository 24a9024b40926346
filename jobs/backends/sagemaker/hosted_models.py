"""What a hosted model is made of on SageMaker: the SDK's ``HuggingFaceModel`` arguments for a deploy (the job's
model.tar.gz and the inference image's versions and task; for Text Generation Inference, the model's folder in the
container and the GPUs to shard it over) and ``deploy``'s own (instances, or serverless). Pure functions of the
request: the endpoints backend (endpoints.py) builds the models and calls the SDK."""

from __future__ import annotations

from typing import Any

from jobs.backends.sagemaker.endpoint_updates import endpoint_tags
from jobs.endpoints.port import DeployRequest
from jobs.errors import BackendError, SpecError
from jobs.planning.instances import instance_info

#: Where SageMaker unpacks model.tar.gz in the container: TGI loads the merged model from there.
TGI_MODEL_DIR = "/opt/ml/model"


def model_arguments(request: DeployRequest, *, role: str) -> dict[str, Any]:
    """HuggingFaceModel's arguments: the job's model.tar.gz, the inference image's versions, the task; for TGI the
    model's folder in the container and the GPUs to shard it over (its image is given apart)."""
    arguments: dict[str, Any] = {
        "model_data": request.model_data,
        "role": role,
        "name": request.model_name,
        "env": {"HF_TASK": request.task} if request.task else {},  # a team's handler decides what it serves
    }
    if request.framework is None:
        raise BackendError(f"No inference framework was chosen for {request.name}; this is a bug in the bot.")
    if request.framework.text_generation:
        arguments["env"] = {"HF_MODEL_ID": TGI_MODEL_DIR, "SM_NUM_GPUS": str(_gpus(request.instance_type))}
        return arguments
    arguments.update(
        transformers_version=request.framework.transformers,
        pytorch_version=request.framework.pytorch,
        py_version=request.framework.py,
    )
    return arguments


def runs_on_gpu(request: DeployRequest) -> bool:
    """A GPU type's image, unless serverless (CPU) or a type the bot's table says has no GPU."""
    if request.serverless:
        return False
    try:
        return instance_info(request.instance_type).gpus > 0
    except SpecError:
        return not request.instance_type.startswith(("ml.m", "ml.c", "ml.r", "ml.t"))


def _gpus(instance_type: str) -> int:
    """The type's GPUs (TGI shards the model over them); 1 for a type the bot's table lacks."""
    try:
        return max(1, instance_info(instance_type).gpus)
    except SpecError:
        return 1


def deploy_arguments(request: DeployRequest) -> dict[str, Any]:
    """HuggingFaceModel.deploy's arguments; never waits for the endpoint. The SDK puts the tags on the model,
    the endpoint config and the endpoint it makes (iam-policy.json scopes updates and deletes by them)."""
    arguments: dict[str, Any] = {"endpoint_name": request.name, "wait": False, "tags": endpoint_tags(request.name)}
    if request.serverless:
        from sagemaker.serverless import ServerlessInferenceConfig

        arguments["serverless_inference_config"] = ServerlessInferenceConfig(
            memory_size_in_mb=request.memory_mb, max_concurrency=request.max_concurrency
        )
    else:
        arguments.update(initial_instance_count=request.instance_count, instance_type=request.instance_type)
    return arguments

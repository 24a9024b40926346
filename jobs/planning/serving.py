"""Which Hugging Face inference image serves a trained model: the training versions when an image exists for
them, else the nearest one; a fine-tuned causal LM (text-generation, its adapter merged in by the training
script) is served by Text Generation Inference, the newest TGI image the SDK knows, on a GPU with room for its
weights. The endpoints deploy on it and the registry records it with a model package."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.errors import BadInput
from jobs.planning import images, versions
from jobs.planning.instances import InstanceType, instance_info, instance_names
from jobs.planning.workload import model_shape

TEXT_GENERATION = "text-generation"
TGI = "tgi"
#: The GPU memory a TGI endpoint wants, as a multiple of the bf16 weights: the KV cache and CUDA graphs need room.
TGI_MEMORY_FACTOR = 2.0
#: Where a text-generation model is served, smallest first (all GPU types TGI runs on).
TGI_INSTANCES = ("ml.g5.2xlarge", "ml.g6e.xlarge", "ml.g6e.12xlarge", "ml.g6e.48xlarge", "ml.p5.48xlarge")
_BF16_BYTES = 2


@dataclass(frozen=True)
class Framework:
    """The inference container's versions (SageMaker); the local backend uses what is installed."""

    transformers: str
    pytorch: str
    py: str
    server: str = ""  # "": the Hugging Face inference toolkit; TGI: Text Generation Inference (its version below)
    version: str = ""
    by_uri: bool = False  # an inference image newer than the SDK's tables (data/training_images.json)

    @property
    def text_generation(self) -> bool:
        return self.server == TGI

    def label(self) -> str:
        if self.text_generation:
            return f"Hugging Face TGI {self.version} (Text Generation Inference)"
        return f"transformers {self.transformers} / PyTorch {self.pytorch} / {self.py}"


@dataclass(frozen=True)
class FrameworkChoice:
    framework: Framework
    note: str | None  # said on the reply when it differs from the training versions


def choose_framework(transformers: str, pytorch: str, py: str, task: str | None = None) -> FrameworkChoice:
    """The training versions when a Hugging Face inference image exists for them, else the nearest one
    that has an image (the same transformers line first, then the closest version); TGI for text generation."""
    if task == TEXT_GENERATION:
        return _text_generation_server(transformers, pytorch, py)
    if versions.inference_supported(transformers, pytorch):
        return FrameworkChoice(Framework(transformers, pytorch, _py_for(transformers, pytorch, py)), None)
    combos = (*versions.inference_combinations(),
              *(versions.Combination(i.transformers, i.pytorch, i.py) for i in images.inference_images()))
    if not combos:
        raise BadInput(
            f"The SageMaker SDK here lists no Hugging Face inference images, so transformers {transformers} / "
            f"PyTorch {pytorch} cannot be deployed: upgrade the sagemaker package."
        )
    best = min(combos, key=lambda c: _distance(c, transformers, pytorch))
    by_uri = best not in versions.inference_combinations()
    chosen = Framework(best.transformers, best.pytorch, best.py, by_uri=by_uri)
    note = (
        f"There is no Hugging Face inference image for the training versions (transformers {transformers} / "
        f"PyTorch {pytorch}); deploying on the nearest one, {chosen.label()}."
    )
    return FrameworkChoice(chosen, note)


def _py_for(transformers: str, pytorch: str, py: str) -> str:
    pys = [
        c.py
        for c in versions.inference_combinations()
        if (c.transformers, c.pytorch) == (transformers, pytorch)
    ]
    return py if py in pys or not pys else pys[-1]


def _number(version: str) -> int:
    parts = (list(versions.version_key(version)) + [0, 0, 0])[:3]
    return parts[0] * 1_000_000 + parts[1] * 1_000 + parts[2]


def _distance(combo: versions.Combination, transformers: str, pytorch: str) -> tuple[int, int, int]:
    # Closest transformers first, then closest PyTorch; on a tie the newer image.
    return (
        abs(_number(combo.transformers) - _number(transformers)),
        abs(_number(combo.pytorch) - _number(pytorch)),
        -_number(combo.transformers),
    )


def _text_generation_server(transformers: str, pytorch: str, py: str) -> FrameworkChoice:
    version = versions.text_generation_server_version()
    if version is None:
        raise BadInput("The SageMaker SDK here lists no Text Generation Inference (TGI) image, so a text-generation "
                       "model cannot be deployed: upgrade the sagemaker package.")
    framework = Framework(transformers, pytorch, py, server=TGI, version=version)
    return FrameworkChoice(framework, f"Served by {framework.label()}, the merged model loaded from the job's output.")


def weights_gb(model: str | None) -> float:
    """The bf16 weights of ``model``, embeddings included, in GB (a guess from its name when unknown)."""
    shape = model_shape(model or "")
    return shape.parameters * 1.15 * _BF16_BYTES / 1e9


def text_generation_instance(model: str | None) -> str:
    """The smallest GPU type whose memory holds the model's weights TGI_MEMORY_FACTOR times over."""
    wanted = weights_gb(model) * TGI_MEMORY_FACTOR
    for name in TGI_INSTANCES:
        if instance_info(name).total_gpu_memory_gb >= wanted:
            return name
    return TGI_INSTANCES[-1]


def check_text_generation_instance(model: str | None, instance_type: str) -> None:
    """BadInput when a known type has no GPU or too little GPU memory for the model (unknown types pass)."""
    if instance_type not in instance_names():
        return
    info: InstanceType = instance_info(instance_type)
    wanted = weights_gb(model) * TGI_MEMORY_FACTOR
    if info.is_trainium or info.total_gpu_memory_gb < wanted:
        suggestion = text_generation_instance(model)
        raise BadInput(
            f"{model or 'This model'} needs about {wanted:.0f} GB of GPU memory to be served (its bf16 weights "
            f"twice over); {info.name} has {info.total_gpu_memory_gb} GB: use instance_type={suggestion}."
        )

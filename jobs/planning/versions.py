"""Framework combinations the bot can launch: the installed SageMaker SDK's, read offline without importing
it, and the newer images of ``data/training_images.json`` (``jobs.planning.images``) that the SDK 2.x tables,
frozen since its maintenance began, lack (launched by ``image_uri``).

The SDK ships its image-URI tables as JSON (``sagemaker/image_uri_config/huggingface.json``) and its
distribution limits as module constants (``sagemaker/fw_utils.py``). Both are read as files: importing the
SDK is slow, noisy and forbidden in ``jobs/``. Everything is cached at first use.

Distribution modes: ``ddp`` and ``fsdp`` (torchrun, the SDK's ``torch_distributed``) are today's; ``data``
(smdistributed dataparallel, last released for PyTorch 2.4.1 on P4) and ``model`` (SMP v1, archived
2023-12) are the article's, kept for its presets (``LEGACY_DISTRIBUTIONS``).
"""

from __future__ import annotations

import ast
import importlib.util
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jobs.errors import SpecError
from jobs.planning import images
from jobs.planning.instances import InstanceType

#: The bot's training scripts use Trainer APIs of transformers >= 4.26; a team's own script may use any image.
TRAINING_MIN_TRANSFORMERS = (4, 26)
#: The data-parallel, model-parallel and single-process default: the newest HF container with
#: smdistributed dataparallel that also deploys with the default inference image.
SMDISTRIBUTED_DEFAULT = ("4.28.1", "2.0.0", "py310")

# Used only when the SDK's own files cannot be read (the values of sagemaker 2.257).
_FALLBACK_DATAPARALLEL_INSTANCES = ("ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4d.24xlarge", "ml.p4de.24xlarge")
_FALLBACK_DATAPARALLEL_PYTORCH = ("1.13.1", "2.0.0", "2.0.1", "2.1.0", "2.1.2", "2.2.0")
_FALLBACK_TORCH_DISTRIBUTED_PYTORCH = ("1.13.1", "2.0.0", "2.0.1", "2.1.0", "2.1.2", "2.2.0", "2.3.0", "2.3.1")
_FALLBACK_TRAINING = {"4.28.1": {"2.0.0": ("py310",)}}
_FALLBACK_IMAGE_CUDA = {("4.28.1", "2.0.0"): "11.8"}
#: The Trainer's FSDP settings the plan writes (``fsdp_config`` as JSON text with ``activation_checkpointing``)
#: need transformers 4.36 (its 4.36.0 image is the first with PyTorch 2.1, whose FSDP the Trainer's auto-wrap uses).
FSDP_MIN_TRANSFORMERS = (4, 36)
FSDP_MIN_PYTORCH = (2, 1)
#: The article's modes, kept for its presets; the plan and card call them legacy.
LEGACY_DISTRIBUTIONS = ("data", "model")
#: The packages the LLM script (text-generation) needs from its image.
LLM_PACKAGES = ("trl", "peft")


@dataclass(frozen=True)
class Combination:
    """One HF training (or inference) container: transformers, PyTorch and Python versions."""

    transformers: str
    pytorch: str
    py: str

    def as_tuple(self) -> tuple[str, str, str]:
        return (self.transformers, self.pytorch, self.py)


def version_key(version: str) -> tuple[int, ...]:
    """``"4.28.1"`` -> ``(4, 28, 1)``; non-numeric parts count as 0."""
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


@cache
def sdk_folder() -> Path | None:
    """The installed ``sagemaker`` package folder, found without importing it."""
    try:
        spec = importlib.util.find_spec("sagemaker")
    except (ImportError, ValueError):
        return None
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


@cache
def _image_config(name: str) -> dict[str, Any]:
    folder = sdk_folder()
    path = folder / "image_uri_config" / f"{name}.json" if folder else None
    if path is None or not path.is_file():
        return {}
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _combinations(scope: str) -> tuple[Combination, ...]:
    versions: dict[str, Any] = _image_config("huggingface").get(scope, {}).get("versions", {})
    if not versions and scope == "training":
        versions = {t: {f"pytorch{p}": {"py_versions": list(pys)} for p, pys in pt.items()}
                    for t, pt in _FALLBACK_TRAINING.items()}
    found = [
        Combination(transformers, key.removeprefix("pytorch"), py)
        for transformers, block in versions.items()
        for key, entry in block.items()
        if key.startswith("pytorch") and isinstance(entry, dict)
        for py in entry.get("py_versions", [])
    ]
    found.sort(key=lambda c: (version_key(c.transformers), version_key(c.pytorch), version_key(c.py[2:])))
    return tuple(found)


@cache
def sdk_training_combinations() -> tuple[Combination, ...]:
    """Every PyTorch HF training container the SDK knows, oldest first."""
    return _combinations("training")


@cache
def training_combinations() -> tuple[Combination, ...]:
    """Every PyTorch HF training container the bot can launch: the SDK's, then the newer ones of the data file
    (by image_uri), oldest first."""
    found = list(sdk_training_combinations())
    found += [Combination(i.transformers, i.pytorch, i.py) for i in images.beyond_sdk_images()
              if Combination(i.transformers, i.pytorch, i.py) not in found]
    found.sort(key=lambda c: (version_key(c.transformers), version_key(c.pytorch), version_key(c.py[2:])))
    return tuple(found)


def beyond_sdk(combo: Combination) -> images.ImagePackages | None:
    """The data file's row of an image the SDK's tables lack (launched by image_uri); None for the SDK's own."""
    if combo in sdk_training_combinations():
        return None
    found = images.image_packages(*combo.as_tuple())
    return found if found is not None and found.beyond_sdk else None


def training_image_uri(transformers: str, pytorch: str, py: str, region: str) -> str | None:
    """The URI the estimator gets for an image beyond the SDK's tables; None: the SDK resolves it itself."""
    row = beyond_sdk(Combination(transformers, pytorch, py))
    return row.image_uri(region) if row is not None else None


@cache
def inference_combinations() -> tuple[Combination, ...]:
    """Every PyTorch HF inference container the SDK knows, oldest first."""
    return _combinations("inference")


@cache
def image_cuda_version(transformers: str, pytorch: str) -> str | None:
    """The CUDA version of the HF training image for these versions (``"11.8"`` from its
    ``container_version`` ``cu118-ubuntu20.04``); None when the SDK's tables do not say."""
    block = _image_config("huggingface").get("training", {}).get("versions", {}).get(transformers, {})
    entry = block.get(f"pytorch{pytorch}") if isinstance(block, dict) else None
    if entry is None:
        row = next((i for i in images.known_images() if (i.transformers, i.pytorch) == (transformers, pytorch)), None)
        if row is not None and row.cuda:
            return row.cuda
    tag = str((entry or {}).get("container_version", {}).get("gpu", "")) if isinstance(entry, dict) else ""
    digits = tag.split("-", 1)[0].removeprefix("cu")
    if not tag.startswith("cu") or not digits.isdigit() or len(digits) < 3:
        return _FALLBACK_IMAGE_CUDA.get((transformers, pytorch))
    return f"{digits[:-1]}.{digits[-1]}"


def cuda_mismatch(transformers: str, pytorch: str, info: InstanceType) -> str | None:
    """Why the image of these versions cannot run on ``info``'s accelerator (its CUDA too old, or too new for an
    old GPU); None when it can, or when the CUDA is unknown."""
    cuda = image_cuda_version(transformers, pytorch)
    if cuda is None:
        return None
    image = f"the transformers {transformers} / PyTorch {pytorch} image is built on CUDA {cuda}"
    if info.min_cuda and version_key(cuda) < version_key(info.min_cuda):
        return f"{image}; the {info.accelerator} needs CUDA {info.min_cuda} or newer"
    if info.max_cuda and version_key(cuda) > version_key(info.max_cuda):
        return f"{image}, which no longer builds for the {info.accelerator} (CUDA {info.max_cuda} was the last)"
    return None


@cache
def _fw_utils_constants() -> dict[str, Any]:
    folder = sdk_folder()
    path = folder / "fw_utils.py" if folder else None
    if path is None or not path.is_file():
        return {}
    values: dict[str, Any] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return values


@cache
def dataparallel_instance_types() -> tuple[str, ...]:
    """Instance types smdistributed dataparallel runs on (the SDK's own list)."""
    found = _fw_utils_constants().get("SM_DATAPARALLEL_SUPPORTED_INSTANCE_TYPES")
    names = found or _FALLBACK_DATAPARALLEL_INSTANCES
    return tuple(n for n in names if n.startswith("ml."))


@cache
def dataparallel_pytorch_versions() -> tuple[str, ...]:
    found = _fw_utils_constants().get("SM_DATAPARALLEL_SUPPORTED_FRAMEWORK_VERSIONS", {}).get("pytorch")
    return tuple(found or _FALLBACK_DATAPARALLEL_PYTORCH)


@cache
def torch_distributed_pytorch_versions() -> tuple[str, ...]:
    found = _fw_utils_constants().get("TORCH_DISTRIBUTED_GPU_SUPPORTED_FRAMEWORK_VERSIONS")
    return tuple(found or _FALLBACK_TORCH_DISTRIBUTED_PYTORCH)


def _allowed(combo: Combination, distribution: str, own: bool) -> bool:
    if not own and version_key(combo.transformers)[:2] < TRAINING_MIN_TRANSFORMERS:
        return False  # the bot's scripts need it; a team's own script runs on any image the SDK knows
    row = beyond_sdk(combo)
    if row is not None:  # the data file says which modes the image runs
        return distribution in (row.distributions or ("none",))
    if distribution == "fsdp":
        return (combo.pytorch in torch_distributed_pytorch_versions()
                and version_key(combo.transformers)[:2] >= FSDP_MIN_TRANSFORMERS
                and version_key(combo.pytorch)[:2] >= FSDP_MIN_PYTORCH)
    if distribution in ("data", "model"):
        # smdistributed (data and model parallel) stops at PyTorch 2.2 containers.
        return combo.pytorch in dataparallel_pytorch_versions()
    if distribution == "ddp":
        return combo.pytorch in torch_distributed_pytorch_versions()
    return True


@cache
def supported_combinations(distribution: str, own: bool = False) -> tuple[Combination, ...]:
    """The training containers usable for ``distribution`` by the SDK and by ``training/`` (``own``: by a team's
    own script, which needs no transformers 4.26)."""
    return tuple(c for c in training_combinations() if _allowed(c, distribution, own))


@cache
def default_versions(distribution: str) -> tuple[str, str, str]:
    """(transformers, pytorch, py): 4.28.1/2.0.0/py310; for ``ddp`` the newest combination the SDK knows; for
    ``fsdp`` the newest of all (the FSDP settings improve with each)."""
    usable = supported_combinations(distribution)
    if not usable:
        return SMDISTRIBUTED_DEFAULT
    if distribution == "ddp":
        known = [c for c in usable if c in sdk_training_combinations()]
        return (known or list(usable))[-1].as_tuple()
    if distribution == "fsdp":
        return usable[-1].as_tuple()
    preferred = Combination(*SMDISTRIBUTED_DEFAULT)
    return preferred.as_tuple() if preferred in usable else usable[-1].as_tuple()


def _resolve_transformers(version: str) -> str:
    aliases: dict[str, str] = _image_config("huggingface").get("training", {}).get("version_aliases", {})
    return aliases.get(version, version)


def complete_versions(
    transformers: str | None, pytorch: str | None, py: str | None, distribution: str, *, llm: bool = False,
    own: bool = False,
) -> tuple[str, str, str]:
    """Fill in what the person left out: the newest usable combination that matches what they gave; ``llm``:
    among the images that ship TRL and PEFT (the LLM script's), the newest unless told otherwise."""
    if transformers is None and pytorch is None and py is None and not llm:
        return default_versions(distribution)
    if transformers is not None:
        transformers = _resolve_transformers(transformers)
    matches = [c for c in supported_combinations(distribution, own) if _matches(c, transformers, pytorch, py)]
    if llm:
        matches = [c for c in matches if ships_llm_packages(c)] or matches  # validate_llm_image says why
    if not matches:
        _explain_no_match(transformers, pytorch, py, distribution, own)
    default = Combination(*default_versions(distribution))
    return (default if default in matches and not llm else matches[-1]).as_tuple()


def ships_llm_packages(combo: Combination) -> bool:
    """Whether the data file says this image ships TRL and PEFT (what the LLM script imports)."""
    row = images.image_packages(*combo.as_tuple())
    return row is not None and row.ships(*LLM_PACKAGES)


def validate_llm_image(transformers: str, pytorch: str, py: str) -> None:
    """SpecError unless the image ships TRL and PEFT, which the LLM script (text-generation) runs on."""
    if ships_llm_packages(Combination(transformers, pytorch, py)):
        return
    usable = [c for c in training_combinations() if ships_llm_packages(c)]
    raise SpecError(
        f"task=text-generation fine-tunes with TRL and PEFT, which the transformers {transformers} / PyTorch "
        f"{pytorch} image does not ship: choose one of {_listing(tuple(usable))} (transformers_version=).",
        field=VERSIONS_FIELD,
    )


def _matches(combo: Combination, transformers: str | None, pytorch: str | None, py: str | None) -> bool:
    """Whether ``combo`` fits what was given; ``2.1`` matches ``2.1.0``."""
    return (
        _same(transformers, combo.transformers) and _same(pytorch, combo.pytorch) and py in (None, combo.py)
    )


def _same(given: str | None, actual: str) -> bool:
    return given is None or given == actual or actual.startswith(given + ".")


#: What a refusal of the versions is about (a form shows it there, not under distribution).
VERSIONS_FIELD = "transformers_version"


def _explain_no_match(
    transformers: str | None, pytorch: str | None, py: str | None, distribution: str, own: bool
) -> None:
    known = [c for c in training_combinations() if _matches(c, transformers, pytorch, py)]
    if known:
        raise SpecError(_unsupported_message(known[-1], distribution, own), field=VERSIONS_FIELD)
    given = ", ".join(f"{label} {value}" for label, value in
                      (("transformers", transformers), ("PyTorch", pytorch), ("Python", py)) if value)
    raise SpecError(
        f"There is no Hugging Face training container with {given} for distribution={distribution} (neither the "
        f"SageMaker SDK nor the bot's image table has one): choose one of "
        f"{_listing(supported_combinations(distribution, own))}.", field=VERSIONS_FIELD
    )


def validate_versions(transformers: str, pytorch: str, py: str, distribution: str, *, own: bool = False) -> None:
    """SpecError unless the SDK has this training container and it suits ``distribution`` and the script (the
    bot's need transformers 4.26; ``own``: a team's own script, which runs on any image the SDK knows)."""
    combo = Combination(transformers, pytorch, py)
    if combo in supported_combinations(distribution, own):
        return
    if combo not in training_combinations():
        raise SpecError(
            f"There is no Hugging Face training container for transformers {transformers}, "
            f"PyTorch {pytorch}, {py}: choose one of {_listing(supported_combinations(distribution, own))}.",
            field=VERSIONS_FIELD,
        )
    raise SpecError(_unsupported_message(combo, distribution, own), field=VERSIONS_FIELD)


def _unsupported_message(combo: Combination, distribution: str, own: bool = False) -> str:
    label = f"transformers {combo.transformers} / PyTorch {combo.pytorch}"
    usable = _listing(supported_combinations(distribution, own))
    if not own and version_key(combo.transformers)[:2] < TRAINING_MIN_TRANSFORMERS:
        return (f"The bot's training scripts need transformers 4.26 or newer, not {combo.transformers}: choose one "
                f"of {usable}, or run your own script (code=), which may use any image the SDK knows.")
    reason = {
        "data": "smdistributed dataparallel (the article's, legacy) runs only on PyTorch 2.2 or older",
        "model": "smdistributed modelparallel (SMP v1, the article's, legacy) runs only on PyTorch 2.2 or older",
        "ddp": "torch_distributed (torchrun) is not supported on that PyTorch by the SDK",
        "fsdp": "the Trainer's FSDP settings need transformers 4.36 and PyTorch 2.1 or newer with torchrun",
    }.get(distribution, "that container is not supported")
    return f"{label} cannot run distribution={distribution}: {reason}; choose one of {usable}."


def _listing(combos: tuple[Combination, ...]) -> str:
    return ", ".join(f"{c.transformers}/pt{c.pytorch}/{c.py}" for c in combos) or "none"


@cache
def text_generation_server_version() -> str | None:
    """The newest Hugging Face Text Generation Inference (TGI) image the SDK knows
    (``image_uri_config/huggingface-llm.json``, what ``get_huggingface_llm_image_uri`` resolves); None without it."""
    found = list(_image_config("huggingface-llm").get("inference", {}).get("versions", {}))
    return max(found, key=version_key) if found else None


def inference_supported(transformers: str, pytorch: str) -> bool:
    """Whether the SDK has a Hugging Face PyTorch inference container for these versions."""
    transformers = _image_config("huggingface").get("inference", {}).get("version_aliases", {}).get(
        transformers, transformers
    )
    return any(c.transformers == transformers and c.pytorch == pytorch for c in inference_combinations())

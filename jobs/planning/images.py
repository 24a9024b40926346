"""What each Hugging Face training image ships: its transformers, datasets, evaluate, accelerate and
scikit-learn versions (and TRL and PEFT where it has them), read from one data file
(``data/training_images.json``, from the DLC release notes and Dockerfiles).

The local backend builds a virtual environment of these versions for a job with own code (a team's script
runs there as it would in the image, not on the bot's own transformers 5), and for the bot's LLM script; the
plan card names it. A row with ``image`` is an image the installed SDK's tables do not have: the plan launches
it by its URI (``image_uri``), which this module builds for a region from the DLC registries in the same file.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

IMAGES_FILE = Path(__file__).parent / "data" / "training_images.json"
#: What an image URI says where the region goes, when the plan is made without one.
REGION_PLACEHOLDER = "<region>"
#: torch 2.6 made ``torch.load(weights_only=True)`` the default; the images' older torch loaded a checkpoint's
#: RNG state (numpy arrays) without it, which 4.x-era Trainers rely on when they resume.
WEIGHTS_ONLY_DEFAULT_SINCE = (2, 6)


@dataclass(frozen=True)
class ImagePackages:
    """One training image's Python packages, as its release notes list them."""

    transformers: str
    pytorch: str
    py: str
    packages: tuple[tuple[str, str], ...]  # (name, version), in the data file's order
    era: tuple[str, ...]  # pins of their dependencies as the image's pip resolved them
    repository: str = ""  # set on images the SDK's tables lack: launched by image_uri
    tag: str = ""
    cuda: str = ""  # the CUDA the image is built on ("" : the SDK's tables say)
    distributions: tuple[str, ...] = ()  # distribution= values it runs ((): as the SDK's rules say)
    local: str | None = None  # why this image has no local runtime here (the builder refuses with it)
    lock: tuple[str, ...] = ()  # every package of a built runtime, name==version (constraints: no drift)

    @property
    def name(self) -> str:
        """The image in one word (``transformers5.3.0-pt2.9.0-py312``): what a job's ``trainbot:image`` tag says."""
        return f"transformers{self.transformers}-pt{self.pytorch}-{self.py}"

    @property
    def key(self) -> str:
        """The runtime's folder name: the image, and a digest of what it installs, so a changed row builds a new
        runtime beside the old one instead of replacing one that jobs may be running on."""
        digest = hashlib.sha256("\n".join([cpu_torch(), *self.requirements(), *toolkit_requirements(),
                                            *self.lock]).encode()).hexdigest()[:8]
        return f"{self.name}-{digest}"

    @property
    def loads_without_weights_only(self) -> bool:
        """Whether the image's torch loaded checkpoints with ``weights_only=False`` by default."""
        return _version_key(self.pytorch)[:2] < WEIGHTS_ONLY_DEFAULT_SINCE

    @property
    def beyond_sdk(self) -> bool:
        """An image the SDK's tables do not have: the estimator gets its URI."""
        return bool(self.repository and self.tag)

    def ships(self, *names: str) -> bool:
        """Whether the image has every one of these packages installed."""
        have = {name for name, _ in self.packages}
        return all(name in have for name in names)

    def package_version(self, name: str) -> str | None:
        return dict(self.packages).get(name)

    def image_uri(self, region: str) -> str:
        """``<account>.dkr.ecr.<region>.<domain>/<repository>:<tag>``; ``<region>`` for an unknown region."""
        if not self.beyond_sdk:
            raise ValueError(f"the SDK resolves the image of transformers {self.transformers} itself")
        return registry_uri(self.repository, self.tag, region)

    def image_label(self) -> str:
        """How the plan card names the image: its repository and tag."""
        return f"{self.repository}:{self.tag}"

    def requirements(self) -> list[str]:
        """``name==version`` of each package, then the era's pins."""
        return [f"{name}=={version}" for name, version in self.packages] + list(self.era)

    def label(self) -> str:
        """How the card names the local runtime."""
        return f"transformers {self.transformers} runtime, as the training image"


@cache
def _data() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(IMAGES_FILE.read_text(encoding="utf-8"))
    return loaded


LOCKS_DIR = Path(__file__).parent / "data" / "runtime_locks"


@cache
def known_images() -> tuple[ImagePackages, ...]:
    """Every row of the data file (keys this bot does not read are left alone: see its "schema")."""
    return tuple(_image(row) for row in _data()["images"])


def _image(row: dict[str, Any]) -> ImagePackages:
    image = row.get("image") or {}
    return ImagePackages(
        transformers=row["transformers"], pytorch=row["pytorch"], py=row["py"],
        packages=tuple((str(k), str(v)) for k, v in row["packages"].items()), era=tuple(row.get("era", ())),
        repository=str(image.get("repository", "")), tag=str(image.get("tag", "")), cuda=str(row.get("cuda", "")),
        distributions=tuple(str(d) for d in row.get("distributions", ())),
        local=row.get("local"), lock=_lock(row.get("lock")),
    )


@dataclass(frozen=True)
class InferenceImage:
    """A Hugging Face PyTorch inference image newer than the SDK's tables (served by its URI)."""

    transformers: str
    pytorch: str
    py: str
    repository: str
    gpu_tag: str
    cpu_tag: str

    def image_uri(self, region: str, *, gpu: bool) -> str:
        return registry_uri(self.repository, self.gpu_tag if gpu else self.cpu_tag, region)


@cache
def inference_images() -> tuple[InferenceImage, ...]:
    return tuple(
        InferenceImage(transformers=row["transformers"], pytorch=row["pytorch"], py=row["py"],
                       repository=row["image"]["repository"], gpu_tag=row["image"]["gpu_tag"],
                       cpu_tag=row["image"]["cpu_tag"])
        for row in _data().get("inference_images", ())
    )


def inference_image(transformers: str, pytorch: str) -> InferenceImage | None:
    return next((i for i in inference_images() if (i.transformers, i.pytorch) == (transformers, pytorch)), None)


def registry_uri(repository: str, tag: str, region: str) -> str:
    """``<account>.dkr.ecr.<region>.<domain>/<repository>:<tag>`` from the DLC registries; ``<region>`` when the
    plan is made without one."""
    registries = _data().get("dlc_registries", {})
    where = region or REGION_PLACEHOLDER
    account = str(registries.get("regions", {}).get(region, registries.get("default", "")))
    domain = next((d for prefix, d in registries.get("domains", {}).items() if region.startswith(prefix)),
                  "amazonaws.com")
    return f"{account}.dkr.ecr.{where}.{domain}/{repository}:{tag}"


def beyond_sdk_images() -> tuple[ImagePackages, ...]:
    """The images the plan launches by URI (the SDK's tables lack them), oldest first."""
    return tuple(i for i in known_images() if i.beyond_sdk)


def _lock(name: object) -> tuple[str, ...]:
    if not isinstance(name, str) or not name:
        return ()
    lines = (LOCKS_DIR / name).read_text(encoding="utf-8").splitlines()
    return tuple(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def cpu_torch() -> str:
    """The torch requirement of every runtime: this machine's CPU build (the images' CUDA builds cannot run here)."""
    return str(_data()["cpu_torch"])


def toolkit_requirements() -> list[str]:
    """The code the images run scripts with (``train``): the training toolkit and its PyTorch entry point."""
    return [str(r) for r in _data()["toolkit"]]


def image_packages(transformers: str, pytorch: str, py: str) -> ImagePackages | None:
    """The packages of the image with these versions; None when the data file has no row for it."""
    for image in known_images():
        if (image.transformers, image.pytorch, image.py) == (transformers, pytorch, py):
            return image
    return None


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def known_listing() -> str:
    return ", ".join(f"{i.transformers}/pt{i.pytorch}/{i.py}" for i in known_images())

"""What each Hugging Face training image ships: its transformers, datasets, evaluate, accelerate and
scikit-learn versions, read from one data file (``data/training_images.json``, from the DLC release notes).

The local backend builds a virtual environment of these versions for a job with own code (a team's script
runs there as it would in the image, not on the bot's own transformers 5); the plan card names it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jobs.planning.versions import version_key

IMAGES_FILE = Path(__file__).parent / "data" / "training_images.json"
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
    local: str | None = None  # why this image has no local runtime here (the builder refuses with it)
    lock: tuple[str, ...] = ()  # every package of a built runtime, name==version (constraints: no drift)

    @property
    def key(self) -> str:
        """The runtime's folder name: the image, and a digest of what it installs, so a changed row builds a new
        runtime beside the old one instead of replacing one that jobs may be running on."""
        digest = hashlib.sha256("\n".join([cpu_torch(), *self.requirements(), *toolkit_requirements(),
                                            *self.lock]).encode()).hexdigest()[:8]
        return f"transformers{self.transformers}-pt{self.pytorch}-{self.py}-{digest}"

    @property
    def loads_without_weights_only(self) -> bool:
        """Whether the image's torch loaded checkpoints with ``weights_only=False`` by default."""
        return version_key(self.pytorch)[:2] < WEIGHTS_ONLY_DEFAULT_SINCE

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
    return tuple(
        ImagePackages(
            transformers=row["transformers"], pytorch=row["pytorch"], py=row["py"],
            packages=tuple((str(k), str(v)) for k, v in row["packages"].items()), era=tuple(row.get("era", ())),
            local=row.get("local"), lock=_lock(row.get("lock")),
        )
        for row in _data()["images"]
    )


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


def known_listing() -> str:
    return ", ".join(f"{i.transformers}/pt{i.pytorch}/{i.py}" for i in known_images())

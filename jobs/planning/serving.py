"""Which Hugging Face inference image serves a trained model: the training versions when an image exists for
them, else the nearest one. The endpoints deploy on it and the registry records it with a model package."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.errors import BadInput
from jobs.planning import versions


@dataclass(frozen=True)
class Framework:
    """The inference container's versions (SageMaker); the local backend uses what is installed."""

    transformers: str
    pytorch: str
    py: str

    def label(self) -> str:
        return f"transformers {self.transformers} / PyTorch {self.pytorch} / {self.py}"


@dataclass(frozen=True)
class FrameworkChoice:
    framework: Framework
    note: str | None  # said on the reply when it differs from the training versions


def choose_framework(transformers: str, pytorch: str, py: str) -> FrameworkChoice:
    """The training versions when a Hugging Face inference image exists for them, else the nearest one
    that has an image (the same transformers line first, then the closest version)."""
    if versions.inference_supported(transformers, pytorch):
        return FrameworkChoice(Framework(transformers, pytorch, _py_for(transformers, pytorch, py)), None)
    combos = versions.inference_combinations()
    if not combos:
        raise BadInput(
            f"The SageMaker SDK here lists no Hugging Face inference images, so transformers {transformers} / "
            f"PyTorch {pytorch} cannot be deployed: upgrade the sagemaker package."
        )
    best = min(combos, key=lambda c: _distance(c, transformers, pytorch))
    chosen = Framework(best.transformers, best.pytorch, best.py)
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

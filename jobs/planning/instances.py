"""The SageMaker training instance types trainbot knows: GPU count and memory, read from data/instances.json."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jobs.errors import SpecError

DATA_FILE = Path(__file__).parent / "data" / "instances.json"


@dataclass(frozen=True)
class InstanceType:
    """One training instance type; ``gpus`` counts accelerators (Trainium chips on trn1)."""

    name: str
    family: str
    gpus: int
    gpu_memory_gb: int  # per accelerator
    vcpus: int
    memory_gb: int
    accelerator: str
    bf16: bool  # the accelerator computes in bfloat16 (Ampere and newer, Trainium)
    half_tflops: float = 0.0  # dense FP16/BF16 tensor peak per accelerator (data sheet; see the JSON's source)
    fp32_tflops: float = 0.0  # dense FP32 peak per accelerator
    min_cuda: str = ""  # the oldest CUDA that builds for the accelerator ("" : any the images ship)
    spot: bool = True  # managed spot may run on it (see the JSON's spot_source)
    max_cuda: str = ""  # the newest CUDA that still builds for the accelerator ("" : any)

    @property
    def total_gpu_memory_gb(self) -> int:
        return self.gpus * self.gpu_memory_gb

    @property
    def is_trainium(self) -> bool:
        return self.family.startswith("trn")


def family_of(name: str) -> str:
    """``ml.p3dn.24xlarge`` -> ``p3dn``."""
    parts = name.split(".")
    return parts[1] if len(parts) == 3 else ""


@cache
def _table() -> dict[str, InstanceType]:
    raw: dict[str, Any] = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    families: dict[str, Any] = raw["families"]
    table: dict[str, InstanceType] = {}
    for name, row in raw["types"].items():
        fam = families[family_of(name)]
        table[name] = InstanceType(
            name=name,
            family=family_of(name),
            gpus=int(row["gpus"]),
            gpu_memory_gb=int(fam["gpu_memory_gb"]),
            vcpus=int(row["vcpus"]),
            memory_gb=int(row["memory_gb"]),
            accelerator=str(fam["accelerator"]),
            bf16=bool(fam["bf16"]),
            half_tflops=float(fam["half_tflops"]),
            fp32_tflops=float(fam["fp32_tflops"]),
            min_cuda=str(fam.get("min_cuda", "")),
            spot=bool(fam.get("spot", True)),
            max_cuda=str(fam.get("max_cuda", "")),
        )
    return table


def instance_names() -> list[str]:
    """Every known type, in table order."""
    return list(_table())


def normalize_instance_name(name: str) -> str:
    """Accept ``p3.2xlarge`` and ``ML.P3.2XLARGE`` for ``ml.p3.2xlarge``."""
    name = name.strip().lower()
    return name if name.startswith("ml.") else f"ml.{name}"


def instance_info(name: str) -> InstanceType:
    """The row for ``name``; SpecError naming the nearest known type otherwise."""
    info = _table().get(normalize_instance_name(name))
    if info is None:
        raise SpecError(_unknown_message(name), field="instance_type")
    return info


def _unknown_message(name: str) -> str:
    close = difflib.get_close_matches(normalize_instance_name(name), instance_names(), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}? " if close else ""
    families = ", ".join(sorted({family_of(n) for n in instance_names()}))
    return (
        f"Unknown instance type {name[:40]!r}: {hint}"
        f"known families are {families} (e.g. ml.p3.2xlarge, ml.g5.xlarge)."
    )

"""The global batch of a run, and the settings that keep it on another number of accelerators.

A training step consumes ``per_device_train_batch_size x accelerators x instances x
gradient_accumulation_steps`` examples: the global batch. The learning-rate schedule counts steps, and a
resumed Trainer finds its place in the data by counting steps, so a relaunch that changes the global batch
trains another run than the one approved and lands elsewhere in the data. A relaunch on another accelerator
count therefore divides the per-device batch (or the accumulation) and, on fewer accelerators, raises the
accumulation; where no whole-number setting keeps the global batch, that type is not used.

The per-device batch is never raised above the approved one: it is what each accelerator's memory holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from jobs.planning.instances import instance_info

PER_DEVICE = "per_device_train_batch_size"
ACCUMULATION = "gradient_accumulation_steps"
#: TrainingArguments' defaults, what a script runs with when the plan does not say.
DEFAULT_PER_DEVICE = 8
DEFAULT_ACCUMULATION = 1
BOTH = frozenset({PER_DEVICE, ACCUMULATION})


class BatchNotKept(ValueError):
    """No whole-number per-device batch and accumulation keep the global batch; the message says why."""


@dataclass(frozen=True)
class BatchSettings:
    """One attempt's batch: per accelerator, accumulated steps, accelerators an instance, instances."""

    per_device: int
    accumulation: int
    accelerators: int
    instances: int

    @property
    def devices(self) -> int:
        return self.accelerators * self.instances

    @property
    def global_batch(self) -> int:
        return self.per_device * self.accumulation * self.devices

    def to_json(self) -> dict[str, int]:
        return {
            PER_DEVICE: self.per_device,
            ACCUMULATION: self.accumulation,
            "accelerators": self.accelerators,
            "instances": self.instances,
            "global_batch": self.global_batch,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchSettings:
        return cls(int(data[PER_DEVICE]), int(data[ACCUMULATION]), int(data["accelerators"]), int(data["instances"]))

    def hyperparameters(self) -> dict[str, int]:
        return {PER_DEVICE: self.per_device, ACCUMULATION: self.accumulation}

    def words(self) -> str:
        """``global batch 64 (per-device 4 x 8 GPUs x 2 instances x accumulation 1)``."""
        return (f"global batch {self.global_batch} (per-device {self.per_device} x {self.accelerators} "
                f"GPU{'s' if self.accelerators != 1 else ''} x {self.instances} instance"
                f"{'s' if self.instances != 1 else ''} x accumulation {self.accumulation}); relaunches keep it")


def batch_of(hyperparameters: Mapping[str, Any], accelerators: int, instances: int) -> BatchSettings:
    """The batch a plan's hyperparameters ask for on ``accelerators`` x ``instances``."""
    return BatchSettings(
        per_device=_whole(hyperparameters.get(PER_DEVICE), DEFAULT_PER_DEVICE),
        accumulation=_whole(hyperparameters.get(ACCUMULATION), DEFAULT_ACCUMULATION),
        accelerators=accelerators,
        instances=instances,
    )


def estimator_batch(estimator: Mapping[str, Any]) -> BatchSettings:
    """The batch an estimator's arguments train with on their instance type and count."""
    gpus = instance_info(str(estimator["instance_type"])).gpus
    return batch_of(estimator.get("hyperparameters") or {}, gpus, int(estimator.get("instance_count", 1)))


def with_batch(hyperparameters: Mapping[str, Any], batch: BatchSettings, approved: BatchSettings) -> dict[str, Any]:
    """``hyperparameters`` training with ``batch``: a setting is written where the plan had it or where it
    now differs from the approved one (a default left unsaid stays unsaid)."""
    out = dict(hyperparameters)
    for name, value in batch.hyperparameters().items():
        if name in out or value != approved.hyperparameters()[name]:
            out[name] = value
    return out


def stored_batch(launch_plan: Mapping[str, Any] | None, hyperparameters: Mapping[str, Any], instance_type: str,
                 instance_count: int) -> BatchSettings:
    """The approved batch of a lineage: its stored plan's (``LaunchPlan.stored()``), else read from the
    stored estimator, else (a lineage recorded before plans were stored) from its spec's fields."""
    if launch_plan and launch_plan.get("batch"):
        return BatchSettings.from_json(launch_plan["batch"])
    if launch_plan and launch_plan.get("estimator"):
        return estimator_batch(launch_plan["estimator"])
    return batch_of(hyperparameters, instance_info(instance_type).gpus, instance_count)


def used_batch(planned: BatchSettings, instance_type: str, per_device: int | None,
               accumulation: int | None) -> BatchSettings:
    """What an attempt on ``instance_type`` trained with, from its record (unrecorded: as planned)."""
    return BatchSettings(per_device or planned.per_device, accumulation or planned.accumulation,
                         instance_info(instance_type).gpus, planned.instances)


def _whole(value: object, default: int) -> int:
    if isinstance(value, bool) or value is None:
        return default
    try:
        number = int(str(value))
    except ValueError:
        return default
    return number if number >= 1 else default


def keep_global_batch(
    approved: BatchSettings, accelerators: int, *, adjustable: frozenset[str] = BOTH
) -> BatchSettings:
    """The settings that keep ``approved.global_batch`` on ``accelerators`` an instance (same instances).

    The largest per-device batch, at most the approved one, that divides what each accelerator must take
    a step; the accumulation makes up the rest. ``adjustable`` names the settings the script takes (a team's
    own script may take neither). BatchNotKept says why none fits."""
    if accelerators == approved.accelerators:
        return approved
    if not adjustable:
        raise BatchNotKept(
            f"the script takes no batch setting trainbot may change, so it keeps its {approved.accelerators} "
            f"GPU{'s' if approved.accelerators != 1 else ''} an instance (give it hp.{PER_DEVICE})"
        )
    devices = accelerators * approved.instances
    total = approved.global_batch
    gpus = f"{devices} GPU{'s' if devices != 1 else ''}"
    if total % devices:
        raise BatchNotKept(
            f"{gpus} cannot share the global batch of {total} in whole numbers "
            f"(it would take {total / devices:g} examples a GPU a step)"
        )
    share = total // devices
    for per_device in range(min(approved.per_device, share), 0, -1):
        accumulation, rest = divmod(share, per_device)
        if rest:
            continue
        if per_device != approved.per_device and PER_DEVICE not in adjustable:
            continue
        if accumulation != approved.accumulation and ACCUMULATION not in adjustable:
            continue
        return replace(approved, per_device=per_device, accumulation=accumulation, accelerators=accelerators)
    names = " or ".join(sorted(adjustable))
    raise BatchNotKept(
        f"keeping the global batch of {total} on {gpus} needs {share} examples a GPU a step, which the "
        f"script's {names} cannot give without a per-device batch above the planned {approved.per_device}"
    )


def change_words(planned: BatchSettings, used: BatchSettings) -> str:
    """``1 GPU as planned``, or ``4 GPUs, per-device batch 1 instead of 4, global batch 4 as planned``."""
    gpus = f"{used.accelerators} GPU{'s' if used.accelerators != 1 else ''}"
    if used.accelerators == planned.accelerators and used == planned:
        return f"{gpus} as planned"
    parts = [gpus]
    if used.per_device != planned.per_device:
        parts.append(f"per-device batch {used.per_device} instead of {planned.per_device}")
    if used.accumulation != planned.accumulation:
        parts.append(f"gradient accumulation {used.accumulation} instead of {planned.accumulation}")
    if used.global_batch == planned.global_batch:
        parts.append(f"global batch {planned.global_batch} as planned")
    else:  # never made by the bot; shown plainly should a stored attempt say so
        parts.append(f"global batch {used.global_batch} instead of {planned.global_batch}")
    return ", ".join(parts)

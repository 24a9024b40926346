"""Where a lineage's relaunches may run, in the order recovery tries them: a small named policy.

Capacity lost on one instance type is often there on another with the same accelerators. The orders, named
as SkyPilot names its recovery strategies and chosen by TRAINBOT_RECOVERY_POLICY:
- ``same-count`` (default): the planned type; then other types with the same accelerator count and at
  least the same accelerator memory (other families included: a 1-GPU ml.g5.xlarge for a 1-GPU
  ml.p3.2xlarge); then, for a spot job that allows it, the planned type on-demand;
- ``any-count``: the same, then types with more accelerators, on which the global batch is kept by dividing
  the per-device batch or the accumulation (jobs.planning.batch);
- ``same-type``: the planned type only (and on-demand, where the spot job allows it).

A type is used only where the lineage's image and distribution accept it: the Hugging Face training
images are GPU images (no Trainium), built for one CUDA (an L4 or H100 needs 11.8 or newer), smdistributed
runs only on the types the SDK lists, a bf16 plan needs bf16 hardware, model parallel keeps its GPU count,
and another count needs a whole-number batch setting that keeps the global batch. What is refused is kept
with the reason (``Fallbacks.skipped``), so the plan and the relaunch notes can say why.

One type a family and accelerator count: the smallest (cheapest) size, since the larger ones add host CPUs
and memory, not accelerators. Among equals, the types at least about as fast as the planned one come
first, cheapest for the work first (price / accelerator throughput at the plan's precision): a slower type
makes the rest take longer than forecast and may run into max_run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.planning import versions
from jobs.planning.batch import BOTH, BatchNotKept, BatchSettings, keep_global_batch
from jobs.planning.instances import InstanceType, instance_info, instance_names
from jobs.planning.prices import hourly_usd

if TYPE_CHECKING:
    from jobs.planning.spec import JobSpec

#: A type within this share of the planned type's throughput counts as about as fast.
_AS_FAST = 0.9


@dataclass(frozen=True)
class Candidate:
    """One place an attempt may run, with the batch settings it would use there."""

    instance_type: str
    spot: bool
    batch: BatchSettings

    def words(self) -> str:
        return f"{self.instance_type} ({'spot' if self.spot else 'on-demand'})"


@dataclass(frozen=True)
class Skipped:
    instance_type: str
    reason: str

    def line(self) -> str:
        return f"{self.instance_type}: {self.reason}"


@dataclass(frozen=True)
class Fallbacks:
    """A lineage's candidates in order (the planned type first) and the types refused, with why."""

    order: str
    candidates: tuple[Candidate, ...]
    skipped: tuple[Skipped, ...]

    def index(self, instance_type: str, spot: bool) -> int | None:
        for position, candidate in enumerate(self.candidates):
            if (candidate.instance_type, candidate.spot) == (instance_type, spot):
                return position
        return None

    def types(self) -> list[str]:
        return list(dict.fromkeys(c.instance_type for c in self.candidates))

    def lines(self) -> list[str]:
        """The plan's ``Relaunches ...`` line and, indented, the types not used and why."""
        planned = self.candidates[0]
        moves = [_candidate_words(c, planned.batch) for c in self.candidates[1:]]
        where = ", ".join(moves) if moves else f"{planned.instance_type} only"
        lines = [f"Relaunches (TRAINBOT_RECOVERY_POLICY={self.order}): {where}; then from the top again, "
                 "up to the restart cap"]
        by_reason: dict[str, list[str]] = {}
        for skip in self.skipped:
            by_reason.setdefault(skip.reason, []).append(skip.instance_type)
        lines += [f"  not used: {', '.join(names)}: {reason}" for reason, names in by_reason.items()]
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "candidates": [{"instance_type": c.instance_type, "spot": c.spot, **c.batch.to_json()}
                           for c in self.candidates],
            "skipped": [{"instance_type": s.instance_type, "reason": s.reason} for s in self.skipped],
        }


@dataclass(frozen=True)
class FallbackOrder:
    """A named recovery order (see the module docstring)."""

    name: str
    description: str
    other_types: bool  # other types with the planned accelerator count
    more_accelerators: bool  # then types with more accelerators, keeping the global batch

    def fallbacks(self, spec: JobSpec, approved: BatchSettings) -> Fallbacks:
        planned = spec.instance
        order = [Candidate(planned.name, spec.spot, approved)]
        same: list[tuple[tuple[Any, ...], Candidate]] = []
        more: list[tuple[tuple[Any, ...], Candidate]] = []
        skipped: list[Skipped] = []
        for info in _considered(planned, self.other_types, self.more_accelerators):
            reason = refusal(spec, planned, info)
            batch: BatchSettings | None = None
            if reason is None:
                try:
                    batch = keep_global_batch(approved, info.gpus, adjustable=adjustable(spec))
                except BatchNotKept as exc:
                    reason = str(exc)
            if reason is not None or batch is None:
                skipped.append(Skipped(info.name, reason or "not usable"))
                continue
            slower = _speed(spec, info) < _AS_FAST * _speed(spec, planned)
            key = (slower, _cost_of_work(spec, info), info.name)
            target = same if info.gpus == planned.gpus else more
            target.append(((info.gpus, *key), Candidate(info.name, spec.spot, batch)))
        order += [c for _, c in sorted(same, key=lambda pair: pair[0])]
        if spec.spot and spec.on_demand_fallback:
            order.append(Candidate(planned.name, False, approved))
        order += [c for _, c in sorted(more, key=lambda pair: pair[0])]
        return Fallbacks(self.name, tuple(order), tuple(skipped))


SAME_COUNT = FallbackOrder(
    "same-count",
    "the planned type, then types with its accelerator count and at least its accelerator memory, then on-demand",
    other_types=True, more_accelerators=False,
)
ANY_COUNT = FallbackOrder(
    "any-count",
    "as same-count, then types with more accelerators where the global batch can be kept",
    other_types=True, more_accelerators=True,
)
SAME_TYPE = FallbackOrder(
    "same-type", "the planned type only (then on-demand, where the spot job allows it)",
    other_types=False, more_accelerators=False,
)
ORDERS = {order.name: order for order in (SAME_COUNT, ANY_COUNT, SAME_TYPE)}
DEFAULT_ORDER = SAME_COUNT.name


def _candidate_words(candidate: Candidate, planned: BatchSettings) -> str:
    if candidate.batch.accelerators == planned.accelerators:
        return candidate.words()
    gpus = candidate.batch.accelerators
    return (f"{candidate.instance_type} ({'spot' if candidate.spot else 'on-demand'}; {gpus} GPUs, per-device batch "
            f"{candidate.batch.per_device}, accumulation {candidate.batch.accumulation})")


def fallback_order(name: str) -> FallbackOrder:
    try:
        return ORDERS[name]
    except KeyError:
        raise ValueError(f"unknown recovery policy {name!r}: choose one of {', '.join(ORDERS)}") from None


def adjustable(spec: JobSpec) -> frozenset[str]:
    """The batch settings a relaunch may change: the bot's scripts take both; a team's own script only
    those its plan passes (its other arguments are its own)."""
    if not spec.own_code:
        return BOTH
    return frozenset(name for name in BOTH if name in spec.hyperparameters)


def refusal(spec: JobSpec, planned: InstanceType, info: InstanceType) -> str | None:
    """Why ``info`` cannot run the lineage planned on ``planned``; None when it can (the batch aside)."""
    if info.is_trainium:
        return "Trainium needs the Neuron containers; the Hugging Face training image is a GPU image"
    if spec.spot and not info.spot:
        return "no managed spot on it (its capacity comes through training plans or on-demand)"
    if info.gpu_memory_gb < planned.gpu_memory_gb:
        return f"{info.gpu_memory_gb} GB a GPU, less than the planned {planned.gpu_memory_gb} GB"
    if spec.hyperparameters.get("bf16") is True and not info.bf16:
        return f"the plan trains in bf16, which the {info.accelerator} does not compute"
    cuda = versions.cuda_mismatch(spec.transformers_version, spec.pytorch_version, info)
    if cuda is not None:
        return cuda
    if spec.distribution in versions.LEGACY_DISTRIBUTIONS:
        accepted = versions.dataparallel_instance_types()
        if info.name not in accepted:
            return f"smdistributed runs only on {', '.join(accepted)}"
    if spec.distribution == "model" and info.gpus != planned.gpus:
        return (f"model parallel splits the model over {spec.processes_per_host} processes a host; "
                f"{info.gpus} GPUs would split it otherwise")
    return None


def _considered(planned: InstanceType, other_types: bool, more: bool) -> list[InstanceType]:
    """The smallest type of each family and accelerator count the order looks at, the planned one's aside."""
    if not other_types:
        return []
    smallest: dict[tuple[str, int], InstanceType] = {}
    for info in map(instance_info, instance_names()):
        if info.gpus < planned.gpus or (info.gpus > planned.gpus and not more):
            continue
        if (info.family, info.gpus) == (planned.family, planned.gpus):
            continue
        group = (info.family, info.gpus)
        if group not in smallest or hourly_usd(info.name) < hourly_usd(smallest[group].name):
            smallest[group] = info
    return sorted(smallest.values(), key=lambda info: (info.gpus, info.name))


def _half_precision(spec: JobSpec) -> bool:
    return spec.hyperparameters.get("fp16") is True or spec.hyperparameters.get("bf16") is True


def _speed(spec: JobSpec, info: InstanceType) -> float:
    """The type's peak at the plan's precision, all its accelerators together (TFLOP/s)."""
    return info.gpus * (info.half_tflops if _half_precision(spec) else info.fp32_tflops)


def _cost_of_work(spec: JobSpec, info: InstanceType) -> float:
    speed = _speed(spec, info)
    return hourly_usd(info.name) / speed if speed > 0 else float("inf")


def lineage_fallbacks(spec: JobSpec, approved: BatchSettings, order: str = DEFAULT_ORDER) -> Fallbacks:
    return fallback_order(order).fallbacks(spec, approved)

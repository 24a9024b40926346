"""How long a job will take and what it will cost, before it is launched.

Physics first: the job's floating-point work (jobs.planning.workload) divided by what the hardware does
(accelerators x their data-sheet peak x a utilization x a scaling efficiency), plus what SageMaker adds
around the training (provisioning, the image pull, the script's set-up, evaluation, the model upload).

The two constants that are not data-sheet figures are calibrated on the AWS / Hugging Face article's
measured runs of bert-large on SQuAD (2 epochs, fp16, batch 4 a GPU): one ml.p3.2xlarge took about 4 h,
2 x ml.p3.16xlarge with smdistributed dataparallel about 28 min. That fixes the utilization of a V100 in
mixed precision (~7.6% of its tensor peak: small batches, a Python training loop) and the efficiency of
data parallelism (0.95 a doubling of GPUs within an instance, 0.83 a doubling of instances over the network).

Then history: every completed run stores its measured training throughput and its start-up time (all
that is not training). A plan for the same backend, model, task and instance type scales the physics by
the measured / predicted ratio of those runs and takes their start-up time, and says so in its basis
("3 earlier runs").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs.planning.instances import instance_info
from jobs.planning.prices import SECONDS_PER_HOUR, hourly_usd
from jobs.planning.workload import Workload, workload_of

if TYPE_CHECKING:
    from jobs.planning.spec import JobSpec

#: Share of the data-sheet peak a Hugging Face Trainer job reaches (calibrated: see the module docstring).
HALF_PRECISION_UTILIZATION = 0.076
#: A causal LM's fine-tune in bf16 on today's GPUs keeps a far larger share of the peak than the article's BERT:
#: long sequences and large matrices, fused attention. 35% is the model FLOPs utilization commonly reported
#: for LoRA and full SFT of 7B-class models; each completed run's measurement corrects it (see history).
LLM_UTILIZATION = 0.35
#: FP32 runs a larger share of a smaller peak: mixed precision is ~2.5x faster than FP32 on a V100 for
#: BERT (NVIDIA's published BERT fine-tuning figures), which puts FP32 at ~24% of its peak.
FP32_UTILIZATION = 0.24
#: Data parallel scaling: per doubling of GPUs in one instance (NVLink) and of instances (the network).
INTRA_NODE_EFFICIENCY = 0.95
INTER_NODE_EFFICIENCY = 0.83
#: One process driving several GPUs (torch DataParallel, what the Trainer does without a distribution).
DATAPARALLEL_EFFICIENCY = 0.80

#: What SageMaker adds around the training script, in seconds. Provisioning is not billed; the rest is.
PROVISIONING_SECONDS = 150.0  # instances found and started ("Starting")
IMAGE_PULL_SECONDS = 180.0  # the Hugging Face training image, ~10 GB ("Downloading")
SCRIPT_START_SECONDS = 30.0  # Python, torch and transformers imported, the process group formed
DOWNLOAD_BYTES_PER_SECOND = 200e6  # the model from the hub
UPLOAD_BYTES_PER_SECOND = 50e6  # model.tar.gz compressed and put to S3
#: Examples a second the scripts tokenize (QA keeps offsets and splits long contexts: slower).
TOKENIZE_PER_SECOND = {"question-answering": 1500.0, "text-classification": 8000.0}
BYTES_PER_PARAMETER = 4  # the saved weights are fp32
LLM_BYTES_PER_PARAMETER = 2  # a causal LM's weights come and go in bf16
EMBEDDING_SHARE = 1.1  # embeddings add ~10% to an encoder's saved size

#: How many earlier runs a forecast learns from (the newest).
HISTORY_RUNS = 5


@dataclass(frozen=True)
class Hardware:
    """Where a job runs, as a forecast sees it: effective speed, start-up around the script, price."""

    label: str
    devices: int  # accelerators (or processes) that train together
    half_tflops: float  # effective TFLOP/s of one device in mixed precision
    fp32_tflops: float  # effective TFLOP/s of one device in FP32
    efficiency: float  # how much of devices x speed the job keeps (parallel overheads)
    startup_seconds: float  # before the script trains: provisioning, image, set-up
    unbilled_seconds: float  # the part of the wall time nobody pays for (provisioning)
    teardown_seconds: float  # after training: the model's upload
    hourly_usd: float  # every instance together, at the price this job pays
    on_demand_hourly_usd: float

    def flops_per_second(self, half_precision: bool) -> float:
        speed = self.half_tflops if half_precision else self.fp32_tflops
        return self.devices * speed * 1e12 * self.efficiency


@dataclass(frozen=True)
class ForecastTarget:
    """A backend's own run of a plan (the local backend's, scaled down to this machine)."""

    workload: Workload
    hardware: Hardware


@dataclass(frozen=True)
class PastRun:
    """One completed run of the same backend, model, task and instance type."""

    predicted_samples_per_second: float  # what physics said for it
    measured_samples_per_second: float  # what it did (the Trainer's train_samples_per_second)
    startup_seconds: float  # its wall time less its training time


@dataclass(frozen=True)
class Forecast:
    """Launch to end of one attempt, and its bill. ``seconds`` None: the work is unknown."""

    seconds: float | None
    usd: float | None
    basis: str  # "physics", "3 earlier runs", or why there is no forecast
    training_seconds: float | None = None
    startup_seconds: float | None = None  # everything that is not training
    samples_per_second: float | None = None  # the training throughput forecast
    physics_samples_per_second: float | None = None  # physics alone (what history is compared with)
    steps: int | None = None
    on_demand_usd: float | None = None  # the same seconds at on-demand prices
    tokens_per_second: float | None = None  # a causal LM's fine-tune: its throughput in tokens (all GPUs)

    def to_json(self) -> dict[str, Any]:
        data = {
            "seconds": _rounded(self.seconds, 0),
            "usd": _rounded(self.usd, 2),
            "basis": self.basis,
            "training_seconds": _rounded(self.training_seconds, 0),
            "startup_seconds": _rounded(self.startup_seconds, 0),
            "samples_per_second": _rounded(self.samples_per_second, 2),
            "steps": self.steps,
        }
        if self.tokens_per_second is not None:
            data["tokens_per_second"] = _rounded(self.tokens_per_second, 0)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Forecast:
        return cls(
            seconds=data.get("seconds"), usd=data.get("usd"), basis=str(data.get("basis", "")),
            training_seconds=data.get("training_seconds"), startup_seconds=data.get("startup_seconds"),
            samples_per_second=data.get("samples_per_second"), steps=data.get("steps"),
            tokens_per_second=data.get("tokens_per_second"),
        )


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def sagemaker_hardware(spec: JobSpec, workload: Workload) -> Hardware:
    """The spec's instances on SageMaker."""
    info = instance_info(spec.instance_type)
    per_node = max(1, info.gpus)
    nodes = spec.instance_count if spec.distribution != "none" else 1  # without one, hosts train copies
    startup = PROVISIONING_SECONDS + IMAGE_PULL_SECONDS + _setup_seconds(spec, workload)
    model_bytes = _model_bytes(workload)
    return Hardware(
        label=f"{spec.instance_count} x {info.name} ({spec.instance_count * info.gpus} x {info.accelerator})",
        devices=per_node * nodes,
        half_tflops=info.half_tflops * (LLM_UTILIZATION if workload.in_tokens else HALF_PRECISION_UTILIZATION),
        fp32_tflops=info.fp32_tflops * FP32_UTILIZATION,
        efficiency=scaling_efficiency(spec, per_node, nodes),
        startup_seconds=startup,
        unbilled_seconds=PROVISIONING_SECONDS,
        teardown_seconds=model_bytes / UPLOAD_BYTES_PER_SECOND,
        hourly_usd=hourly_usd(info.name, spot=spec.spot) * spec.instance_count,
        on_demand_hourly_usd=hourly_usd(info.name) * spec.instance_count,
    )


def _model_bytes(workload: Workload) -> float:
    per_parameter = LLM_BYTES_PER_PARAMETER if workload.in_tokens else BYTES_PER_PARAMETER
    return workload.model.parameters * EMBEDDING_SHARE * per_parameter


def _setup_seconds(spec: JobSpec, workload: Workload) -> float:
    model_bytes = _model_bytes(workload)
    examples = workload.train_examples + workload.eval_samples
    tokenize = examples / TOKENIZE_PER_SECOND.get(spec.task or "", 4000.0)
    return SCRIPT_START_SECONDS + model_bytes / DOWNLOAD_BYTES_PER_SECOND + tokenize


def scaling_efficiency(spec: JobSpec, per_node: int, nodes: int) -> float:
    """The share of (devices x speed) a parallel job keeps."""
    if spec.distribution == "none":
        return DATAPARALLEL_EFFICIENCY ** math.log2(per_node) if per_node > 1 else 1.0
    efficiency = INTRA_NODE_EFFICIENCY ** math.log2(per_node) * INTER_NODE_EFFICIENCY ** math.log2(max(1, nodes))
    if spec.distribution == "model":
        mp = spec.mp_parameters or {}
        partitions = max(1, _as_int(mp.get("partitions"), 1))
        microbatches = max(1, _as_int(mp.get("microbatches"), 1))
        # A pipeline of p stages fed m microbatches idles (p - 1) / (m + p - 1) of the time (GPipe).
        efficiency *= microbatches / (microbatches + partitions - 1)
    return efficiency


def _as_int(value: object, default: int) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def forecast(
    spec: JobSpec,
    *,
    history: Sequence[PastRun] = (),
    workload: Workload | None = None,
    hardware: Hardware | None = None,
) -> Forecast:
    """The forecast of one attempt of ``spec`` (``workload`` and ``hardware`` replace the spec's own,
    e.g. for a backend that runs a scaled-down version of it)."""
    work = workload or workload_of(spec)
    where = hardware or sagemaker_hardware(spec, work)
    if not work.sized:
        return Forecast(None, None, f"the size of {spec.data_label} is unknown (set max_steps)")
    physics = _samples_per_second(work, where)
    eval_seconds = work.eval_flops / where.flops_per_second(work.half_precision)
    overhead = where.startup_seconds + eval_seconds + where.teardown_seconds
    runs = list(history)[:HISTORY_RUNS]
    speed, basis = physics, "physics"
    if runs:
        ratio = statistics.median(r.measured_samples_per_second / r.predicted_samples_per_second for r in runs)
        speed = physics * ratio
        overhead = statistics.median(r.startup_seconds for r in runs)
        basis = f"{len(runs)} earlier run{'s' if len(runs) != 1 else ''}"
    training = work.train_samples / speed if speed > 0 else 0.0
    seconds = training + overhead
    billed = max(0.0, seconds - where.unbilled_seconds)
    return Forecast(
        seconds=seconds,
        usd=where.hourly_usd * billed / SECONDS_PER_HOUR,
        basis=basis,
        training_seconds=training,
        startup_seconds=overhead,
        samples_per_second=speed,
        physics_samples_per_second=physics,
        steps=work.steps or None,
        on_demand_usd=where.on_demand_hourly_usd * billed / SECONDS_PER_HOUR,
        tokens_per_second=speed * work.seq_len if work.in_tokens else None,
    )


def _samples_per_second(work: Workload, where: Hardware) -> float:
    return where.flops_per_second(work.half_precision) / work.flops_per_sample


# -- words --------------------------------------------------------------------------------------------


def about_duration(seconds: float) -> str:
    """``1680`` -> ``28 min``; ``14400`` -> ``4 h``; ``16200`` -> ``4 h 30 min``; ``42`` -> ``42 s``."""
    whole = int(round(seconds))
    if whole < 120:
        return f"{whole} s"
    minutes = int(round(seconds / 60.0))
    if minutes < 120:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    rest = int(round(rest / 10.0)) * 10  # hours long: to ten minutes
    if rest == 60:
        hours, rest = hours + 1, 0
    return f"{hours} h" + (f" {rest} min" if rest else "")


def about_usd(amount: float) -> str:
    """``25.4`` -> ``$25``; ``0.42`` -> ``$0.42``; ``1351.3`` -> ``$1,351``."""
    return f"${amount:,.2f}" if amount < 10 else f"${amount:,.0f}"


def summary(forecast: Forecast) -> str:
    """``about 28 min, about $24``; the reason when there is no forecast."""
    if forecast.seconds is None or forecast.usd is None:
        return f"no forecast: {forecast.basis}"
    return f"about {about_duration(forecast.seconds)}, about {about_usd(forecast.usd)}"

"""JobSpec -> what would be launched: the SDK ``HuggingFace`` estimator's arguments as plain data, and the cost.

No SDK import here: the backend turns ``LaunchPlan.estimator`` into ``HuggingFace(**estimator, role=...,
sagemaker_session=...)``.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jobs.planning import pricing
from jobs.planning.forecast import Forecast, PastRun, about_duration, forecast, summary
from jobs.planning.instances import instance_info
from jobs.planning.pricing import CostEstimate, usd
from jobs.planning.spec import JobSpec, dataset_hyperparameters

ENTRY_POINTS = {"question-answering": "train_qa.py", "text-classification": "train_classification.py"}
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
BUCKET_PLACEHOLDER = "<TRAINBOT_BUCKET>"
LINEAGE_PLACEHOLDER = "<lineage>"
TRAIN_CHANNEL = "train"

#: What the training scripts print, one line each: ``[metric] NAME=VALUE step=STEP``.
METRIC_NAMES = (
    "loss",
    "learning_rate",
    "epoch",
    "grad_norm",
    "eval_loss",
    "eval_exact_match",
    "eval_f1",
    "eval_accuracy",
    "train_loss",
    "train_runtime",
    "train_samples_per_second",
)
_NUMBER = r"([-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?)"
#: The step of the ``[progress] step=S max_steps=M ...`` lines: the live progress of a SageMaker job reads it.
PROGRESS_DEFINITIONS: list[dict[str, str]] = [{"Name": "step", "Regex": r"\[progress\] step=([0-9]+)"}]
METRIC_DEFINITIONS: list[dict[str, str]] = [
    {"Name": name, "Regex": rf"\[metric\] {name}={_NUMBER}"} for name in METRIC_NAMES
] + PROGRESS_DEFINITIONS
_METRIC_LINE = re.compile(
    r"\[metric\] (" + "|".join(METRIC_NAMES) + rf")={_NUMBER}(?: step=([0-9]+))?(?!\S)"
)
_TAG_VALUE_BAD = re.compile(r"[^\w\s.:/=+\-@]")

DISTRIBUTION_LABELS = {
    "none": "none (one process a GPU)",
    "data": "data parallel (smdistributed dataparallel)",
    "model": "model parallel (smdistributed modelparallel over MPI)",
    "ddp": "ddp (torch_distributed, torchrun)",
}


def parse_metric_line(line: str) -> tuple[str, float, int | None] | None:
    """``[metric] loss=0.69 step=10`` -> ``("loss", 0.69, 10)``; None for any other line."""
    match = _METRIC_LINE.search(line)
    if match is None:
        return None
    try:
        value = float(match.group(2))
    except ValueError:
        return None
    step = match.group(3)
    return match.group(1), value, int(step) if step is not None else None


@cache
def training_source_dir() -> str:
    """The absolute path of the ``training/`` folder (repo or installed), found without importing scripts."""
    try:
        spec = importlib.util.find_spec("training")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    folder = Path(locations[0]) if locations else Path(__file__).resolve().parents[2] / "training"
    return str(folder.resolve())


def job_prefix(bucket: str, lineage_id: str) -> str:
    return f"s3://{bucket or BUCKET_PLACEHOLDER}/trainbot/{lineage_id or LINEAGE_PLACEHOLDER}"


def checkpoint_uri(bucket: str, lineage_id: str) -> str:
    """One checkpoint prefix per lineage: two lineages never share one."""
    return f"{job_prefix(bucket, lineage_id)}/checkpoints"


@dataclass(frozen=True)
class LaunchPlan:
    """What would be launched for ``spec``: the estimator's arguments, the cost bounds and the forecast."""

    spec: JobSpec
    lineage_id: str
    estimator: dict[str, Any]
    cost: CostEstimate
    inputs: dict[str, str] | None = None  # fit() channels: {"train": train_data} when the spec names one
    forecast: Forecast | None = None  # the job on SageMaker, as planned
    # The run this bot's backend makes of the plan, where it is another (the local backend's scaled-down
    # run on this machine); None: the backend runs the plan as written.
    run_forecast: Forecast | None = None

    @property
    def own_forecast(self) -> Forecast | None:
        """The forecast of what will actually run."""
        return self.run_forecast or self.forecast

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "spec": self.spec.model_dump(mode="json"),
            "estimator": self.estimator,
            "cost": self.cost.to_json(),
        }
        if self.forecast is not None:
            data["forecast"] = self.forecast.to_json()
        if self.run_forecast is not None:
            data["run_forecast"] = self.run_forecast.to_json()
        if self.inputs:
            data["inputs"] = dict(self.inputs)
        return data


def build_plan(
    spec: JobSpec,
    *,
    bucket: str,
    lineage_id: str,
    launched_by: str = "",
    origin: str = "",
    history: Sequence[PastRun] = (),
    max_restarts: int | None = None,
    max_job_usd: float | None = None,
) -> LaunchPlan:
    """The plan of ``spec`` for lineage ``lineage_id``; an empty bucket gives placeholder URIs. ``history``:
    earlier SageMaker runs of the same model, task and instance type (newest first) the forecast learns
    from; ``max_restarts`` and ``max_job_usd``: the operator's caps on the lineage's worst case."""
    prefix = job_prefix(bucket, lineage_id)
    estimator: dict[str, Any] = {
        "entry_point": ENTRY_POINTS[spec.task],
        "source_dir": training_source_dir(),
        "instance_type": spec.instance_type,
        "instance_count": spec.instance_count,
        "transformers_version": spec.transformers_version,
        "pytorch_version": spec.pytorch_version,
        "py_version": spec.py_version,
        "hyperparameters": plan_hyperparameters(spec),
    }
    distribution = distribution_config(spec)
    if distribution is not None:
        estimator["distribution"] = distribution
    estimator["use_spot_instances"] = spec.spot
    estimator["max_run"] = spec.max_run
    if spec.spot:
        estimator["max_wait"] = spec.max_wait
    estimator.update(
        checkpoint_s3_uri=f"{prefix}/checkpoints",
        checkpoint_local_path=CHECKPOINT_LOCAL_PATH,
        output_path=f"{prefix}/output",
        code_location=f"{prefix}/code",
        metric_definitions=[dict(d) for d in METRIC_DEFINITIONS],
        tags=plan_tags(spec, lineage_id or LINEAGE_PLACEHOLDER, launched_by, origin),
    )
    inputs = {TRAIN_CHANNEL: spec.train_data} if spec.train_data else None
    cost = pricing.estimate(spec, max_restarts=max_restarts, max_job_usd=max_job_usd)
    return LaunchPlan(spec, lineage_id, estimator, cost, inputs, forecast=forecast(spec, history=history))


def plan_hyperparameters(spec: JobSpec) -> dict[str, str | int | float | bool]:
    """The spec's hyperparameters plus the model and dataset arguments the scripts read."""
    hps: dict[str, str | int | float | bool] = {"model_name_or_path": spec.model}
    if spec.train_data is None:
        hps.update(dataset_hyperparameters(spec.dataset))
        if spec.dataset_revision:
            hps["dataset_revision"] = spec.dataset_revision
    hps.update(spec.hyperparameters)
    return hps


def distribution_config(spec: JobSpec) -> dict[str, Any] | None:
    """The ``distribution`` argument exactly as the SDK takes it; None for one process a GPU."""
    if spec.distribution == "data":
        return {"smdistributed": {"dataparallel": {"enabled": True}}}
    if spec.distribution == "model":
        return {
            "smdistributed": {"modelparallel": {"enabled": True, "parameters": dict(spec.mp_parameters or {})}},
            "mpi": {"enabled": True, "processes_per_host": spec.processes_per_host},
        }
    if spec.distribution == "ddp":
        return {"torch_distributed": {"enabled": True}}
    return None


def plan_tags(spec: JobSpec, lineage_id: str, launched_by: str, origin: str) -> list[dict[str, str]]:
    """SageMaker tags: the lineage always; who launched it, from where and the preset when known."""
    pairs = [
        ("trainbot:lineage", lineage_id),
        ("trainbot:launched-by", launched_by),
        ("trainbot:origin", origin),
        ("trainbot:preset", spec.preset or ""),
    ]
    return [{"Key": key, "Value": _tag_value(value)} for key, value in pairs if value]


def _tag_value(value: str) -> str:
    return _TAG_VALUE_BAD.sub("_", value)[:256]


# ---------------------------------------------------------------- text


def render_plan_text(plan: LaunchPlan) -> str:
    """The plan as ``trainbot plan`` prints it: the job, where it runs, and what it costs."""
    spec, est = plan.spec, plan.estimator
    info = instance_info(spec.instance_type)
    title = f"Plan{' for ' + spec.preset if spec.preset else ''}: {spec.task}, {spec.model} on {plan.inputs and spec.train_data or spec.dataset}"
    lines = [
        title,
        f"Instances: {spec.instance_count} x {spec.instance_type} "
        f"({spec.instance_count * info.gpus} x {info.accelerator} {info.gpu_memory_gb} GB)",
        f"Distribution: {DISTRIBUTION_LABELS[spec.distribution]}{_mp_summary(spec)}",
        f"Framework: transformers {spec.transformers_version}, PyTorch {spec.pytorch_version}, {spec.py_version}",
        f"Entry point: {est['entry_point']} in {est['source_dir']}",
        "Hyperparameters: " + " ".join(f"{k}={v}" for k, v in est["hyperparameters"].items()),
        _spot_line(spec),
        f"Checkpoints: {est['checkpoint_s3_uri']}",
        f"Output: {est['output_path']}",
        *forecast_lines(plan),
        *cost_lines(plan.cost, spec),
    ]
    return "\n".join(lines)


def forecast_lines(plan: LaunchPlan) -> list[str]:
    """``Forecast: about 28 min, about $24 (physics: ...)`` and, for a scaled-down local run, its own."""
    lines = []
    if plan.forecast is not None:
        lines.append(f"Forecast: {summary(plan.forecast)}{_forecast_detail(plan.forecast)}")
    if plan.run_forecast is not None:
        lines.append(f"  this backend's run: {summary(plan.run_forecast)} ({plan.run_forecast.basis})")
    return lines


def _forecast_detail(f: Forecast) -> str:
    if f.seconds is None or f.training_seconds is None or f.startup_seconds is None:
        return ""
    rate = f"{f.samples_per_second:,.1f} samples/s" if f.samples_per_second else "-"
    return (f" ({f.basis}: {about_duration(f.training_seconds)} training at {rate}, "
            f"{about_duration(f.startup_seconds)} start-up, evaluation and upload)")


def _mp_summary(spec: JobSpec) -> str:
    if spec.distribution != "model":
        return ""
    params = ", ".join(f"{k} {v}" for k, v in (spec.mp_parameters or {}).items())
    return f"; {spec.processes_per_host} processes a host; {params}"


def _spot_line(spec: JobSpec) -> str:
    if not spec.spot:
        return f"Spot: no; max run {_duration(spec.max_run)}"
    fallback = "; may fall back to on-demand" if spec.on_demand_fallback else ""
    return (
        f"Spot: yes; max run {_duration(spec.max_run)}, max wait {_duration(spec.max_wait or 0)}; "
        f"up to {spec.max_restarts} relaunches{fallback}"
    )


def cost_lines(cost: CostEstimate, spec: JobSpec) -> list[str]:
    """``Cost: $X/hour ...``, the lineage's worst case and the spot price."""
    if cost.spot_hourly_usd is None:
        lines = [f"Cost: {usd(cost.hourly_usd)}/hour on-demand"]
    else:
        lines = [f"Cost: {usd(cost.spot_hourly_usd)}/hour at a typical spot price ({usd(cost.hourly_usd)}/hour "
                 f"on-demand; spot savings about {cost.spot_savings_pct:.0f}%)"]
    lines.append(f"  worst case {usd(cost.worst_case_usd)}: {worst_case_words(cost, spec)}")
    return lines


def worst_case_words(cost: CostEstimate, spec: JobSpec) -> str:
    """``6 attempts x 24h on ml.p3.16xlarge at on-demand`` (and the cap, when it lowered the figure)."""
    attempts = f"{cost.attempts} attempt{'s' if cost.attempts != 1 else ''}"
    text = f"{attempts} x {_duration(spec.max_run)} on {spec.instance_count} x {cost.dearest_type} at on-demand"
    if cost.capped_by_usd is not None:
        text += f", stopped at the {usd(cost.capped_by_usd)} per-job cap (TRAINBOT_MAX_JOB_USD)"
    return text


def _duration(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts) or "0s"

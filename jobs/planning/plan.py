"""JobSpec -> what would be launched: the SDK ``HuggingFace`` estimator's arguments as plain data, and the cost.

No SDK import here: the backend turns ``LaunchPlan.estimator`` into ``HuggingFace(**estimator, role=...,
sagemaker_session=...)``.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from jobs.planning import cadence, own_code, pricing
from jobs.planning.forecast import Forecast, PastRun, about_duration, forecast, summary
from jobs.planning.hyperparameters import ENTRY_POINTS, check_script_hyperparameters
from jobs.planning.instances import instance_info
from jobs.planning.metrics import METRIC_DEFINITIONS as METRIC_DEFINITIONS  # re-exported: the plan's defaults
from jobs.planning.metrics import METRIC_NAMES as METRIC_NAMES
from jobs.planning.metrics import definitions_for
from jobs.planning.metrics import parse_metric_line as parse_metric_line
from jobs.planning.pricing import CostEstimate, usd
from jobs.planning.spec import JobSpec, dataset_hyperparameters

CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
BUCKET_PLACEHOLDER = "<TRAINBOT_BUCKET>"
LINEAGE_PLACEHOLDER = "<lineage>"
TRAIN_CHANNEL = "train"

_TAG_VALUE_BAD = re.compile(r"[^\w\s.:/=+\-@]")

DISTRIBUTION_LABELS = {
    "none": "none (one process a GPU)",
    "data": "data parallel (smdistributed dataparallel)",
    "model": "model parallel (smdistributed modelparallel over MPI)",
    "ddp": "ddp (torch_distributed, torchrun)",
}


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


@dataclass(frozen=True)
class S3Layout:
    """Where a lineage's files live in the bucket: the one place that knows the layout.

    SageMaker writes a job's model to ``{output}/{job name}/output/model.tar.gz`` itself; reports link the
    ``ModelArtifacts`` that DescribeTrainingJob returns rather than rebuilding that path."""

    bucket: str
    lineage_id: str

    @property
    def prefix(self) -> str:
        return f"s3://{self.bucket or BUCKET_PLACEHOLDER}/trainbot/{self.lineage_id or LINEAGE_PLACEHOLDER}"

    @property
    def checkpoints(self) -> str:
        """One checkpoint prefix per lineage: two lineages never share one."""
        return f"{self.prefix}/checkpoints"

    @property
    def output(self) -> str:
        return f"{self.prefix}/output"

    @property
    def code(self) -> str:
        return f"{self.prefix}/code"


def checkpoint_uri(bucket: str, lineage_id: str) -> str:
    return S3Layout(bucket, lineage_id).checkpoints


@dataclass(frozen=True)
class LaunchPlan:
    """What would be launched for ``spec``: the estimator's arguments and the cost bounds and the forecast.

    Once a launch is approved, ``stored()`` is kept with the lineage and every relaunch is
    ``from_stored(...).for_attempt(...)``: the same arguments on another instance type or spot setting,
    never a plan rebuilt from settings that may have changed since (a new bucket would start from zero)."""

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

    @property
    def checkpoint_uri(self) -> str:
        return str(self.estimator["checkpoint_s3_uri"])

    def stored(self) -> dict[str, Any]:
        """What the store keeps: the resolved launch arguments (the spec is stored on its own)."""
        return {"estimator": copy.deepcopy(self.estimator), "inputs": dict(self.inputs) if self.inputs else None}

    @classmethod
    def from_stored(cls, spec: JobSpec, lineage_id: str, stored: dict[str, Any]) -> LaunchPlan:
        estimator = copy.deepcopy(stored["estimator"])
        return cls(spec, lineage_id, estimator, pricing.estimate(spec), stored.get("inputs") or None)

    def for_attempt(self, *, instance_type: str, spot: bool) -> LaunchPlan:
        """This approved plan on ``instance_type`` with ``spot``; nothing else changes. The fallback types
        come from the recovery policy's list, which keeps the spec's rules: no revalidation against
        today's settings, so a lowered TRAINBOT_MAX_INSTANCES does not strand a running lineage."""
        estimator = copy.deepcopy(self.estimator)
        estimator["instance_type"] = instance_type
        estimator["use_spot_instances"] = spot
        max_wait = self.spec.max_wait if spot else None
        if max_wait:
            estimator["max_wait"] = max_wait
        else:
            estimator.pop("max_wait", None)
        spec = self.spec.model_copy(update={"instance_type": instance_type, "spot": spot, "max_wait": max_wait})
        return LaunchPlan(spec, self.lineage_id, estimator, pricing.estimate(spec), self.inputs)


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
    layout = S3Layout(bucket, lineage_id)
    estimator: dict[str, Any] = {
        **code_arguments(spec),
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
    if spec.distribution == "model":
        # The article's model-parallel notebook turns the debugger off: its hook does not support smp.
        estimator["debugger_hook_config"] = False
    estimator["volume_size"] = volume_size_gb(spec)
    estimator["use_spot_instances"] = spec.spot
    estimator["max_run"] = spec.max_run
    if spec.spot:
        estimator["max_wait"] = spec.max_wait
    estimator.update(
        checkpoint_s3_uri=layout.checkpoints,
        checkpoint_local_path=CHECKPOINT_LOCAL_PATH,
        output_path=layout.output,
        code_location=layout.code,
        metric_definitions=definitions_for(spec.metrics),
        tags=plan_tags(spec, lineage_id or LINEAGE_PLACEHOLDER, launched_by, origin),
    )
    inputs = {TRAIN_CHANNEL: spec.train_data} if spec.train_data else None
    cost = pricing.estimate(spec, max_restarts=max_restarts, max_job_usd=max_job_usd)
    return LaunchPlan(spec, lineage_id, estimator, cost, inputs, forecast=forecast(spec, history=history))


def plan_hyperparameters(spec: JobSpec) -> dict[str, str | int | float | bool]:
    """The spec's hyperparameters plus the model and dataset arguments the scripts read, every one a name
    the task's script takes and none it may not be handed (a stored spec is checked here too); then the loss
    and evaluation cadence for the job's length (unless set), and the checkpoint clock."""
    hps: dict[str, str | int | float | bool] = {"model_name_or_path": spec.model}
    if spec.train_data is None:
        hps.update(dataset_hyperparameters(spec.dataset))
        if spec.dataset_revision:
            hps["dataset_revision"] = spec.dataset_revision
    hps.update(spec.hyperparameters)
    if spec.own_code:
        # A team's script takes its own names: only the reserved are refused, and none of the bot's cadence
        # or checkpoint arguments is added (run_qa.py v4.28 would refuse eval_strategy or checkpoint_minutes).
        check_script_hyperparameters(hps, spec.task, any_script=True)
        # The article's output_dir; a spot job's goes where SageMaker keeps checkpoints, so a Trainer script
        # resumes from its newest checkpoint-N there (the bot's spot entry copies the final model back).
        hps["output_dir"] = own_code.bot_output_dir(spot=spec.spot)
        return hps
    check_script_hyperparameters(hps, spec.task)
    steps = cadence.total_steps(spec, spec.hyperparameters)
    hps.update(cadence.chosen_cadence(spec.hyperparameters, steps, evaluates=cadence.evaluates(hps)))
    if spec.checkpoint_minutes is not None:
        hps["checkpoint_minutes"] = spec.checkpoint_minutes
    return hps


def code_arguments(spec: JobSpec) -> dict[str, Any]:
    """``entry_point``/``source_dir`` (and ``git_config``) of the bot's script, or of the team's own code.

    A spot job with own code runs through the bot's spot entry, shipped beside the team's script
    (``dependencies``) and told which script to run (``environment``): it copies the final model from the
    checkpoint folder into the model folder, which SageMaker uploads."""
    if spec.code is None or spec.entry is None:
        return {"entry_point": ENTRY_POINTS[spec.task or ""], "source_dir": training_source_dir()}
    arguments = own_code.source_arguments(spec.code, spec.entry, spec.code_commit)
    if spec.spot:
        arguments["environment"] = {own_code.USER_ENTRY_ENV: str(arguments["entry_point"])}
        arguments["entry_point"] = own_code.SPOT_ENTRY
        arguments["dependencies"] = [str(Path(training_source_dir()) / own_code.SPOT_ENTRY)]
    return arguments


#: Disk for a job whose preset does not size it: SageMaker's default, enough for the models trainbot knows.
DEFAULT_VOLUME_GB = 30
#: Parameters of the models trainbot knows by name, to size their disk (checkpoints hold weights and Adam state).
MODEL_PARAMETERS = {
    "bert-large-uncased-whole-word-masking": 336_000_000,
    "bert-large-uncased": 336_000_000,
    "roberta-large": 355_000_000,
    "bert-base-uncased": 110_000_000,
    "roberta-base": 125_000_000,
    "distilbert-base-uncased": 66_000_000,
}
_CHECKPOINT_BYTES_PER_PARAMETER = 16  # fp32 weights (4) + Adam moments (8) + scheduler, RNG and slack
_KEPT_CHECKPOINTS = 3  # the Trainer keeps every checkpoint unless save_total_limit says otherwise
_WORKSPACE_GB = 20  # the dataset, its cache and the final model


def volume_size_gb(spec: JobSpec) -> int:
    """The EBS volume: the spec's (a preset's), else sized to the model and its checkpoints."""
    if spec.volume_size is not None:
        return spec.volume_size
    params = MODEL_PARAMETERS.get(spec.model)
    if params is None:
        return DEFAULT_VOLUME_GB
    kept = spec.hyperparameters.get("save_total_limit")
    kept_count = kept if isinstance(kept, int) and not isinstance(kept, bool) else _KEPT_CHECKPOINTS
    checkpoint_gb = params * _CHECKPOINT_BYTES_PER_PARAMETER / 1e9
    return max(DEFAULT_VOLUME_GB, math.ceil(kept_count * checkpoint_gb + _WORKSPACE_GB))


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
        ("trainbot:code", code_label(spec, with_ref=False)),
    ]
    return [{"Key": key, "Value": _tag_value(value)} for key, value in pairs if value]


def code_label(spec: JobSpec, *, with_ref: bool = True) -> str:
    """``repo@<short sha> (REF)`` of a job's own code, as the card and reports name it; "" for the bot's scripts."""
    if spec.code is None:
        return ""
    source = own_code.parse_code(spec.code)
    return own_code.display(source.url, spec.code_commit, source.ref if with_ref else None)


def _tag_value(value: str) -> str:
    return _TAG_VALUE_BAD.sub("_", value)[:256]


# ---------------------------------------------------------------- text


def render_plan_text(plan: LaunchPlan) -> str:
    """The plan as ``trainbot plan`` prints it: the job, where it runs, and what it costs."""
    spec, est = plan.spec, plan.estimator
    info = instance_info(spec.instance_type)
    what = spec.task or f"own code {spec.entry}"
    title = f"Plan{' for ' + spec.preset if spec.preset else ''}: {what}, {spec.model} on {plan.inputs and spec.train_data or spec.dataset}"
    lines = [
        title,
        f"Instances: {spec.instance_count} x {spec.instance_type} "
        f"({spec.instance_count * info.gpus} x {info.accelerator} {info.gpu_memory_gb} GB)",
        f"Distribution: {DISTRIBUTION_LABELS[spec.distribution]}{_mp_summary(spec)}",
        f"Framework: transformers {spec.transformers_version}, PyTorch {spec.pytorch_version}, {spec.py_version}",
        f"Entry point: {est['entry_point']} in {est['source_dir']}",
        *own_code_lines(spec),
        "Hyperparameters: " + " ".join(f"{k}={v}" for k, v in est["hyperparameters"].items()),
        _spot_line(spec),
        f"Checkpoints: {est['checkpoint_s3_uri']}",
        f"Output: {est['output_path']}",
        *forecast_lines(plan),
        *cost_lines(plan.cost, spec),
    ]
    return "\n".join(lines)


def own_code_lines(spec: JobSpec) -> list[str]:
    """``Code: repo@<short sha>`` and, for a spot job, what the script must do to resume."""
    if spec.code is None:
        return []
    lines = [f"Code: {code_label(spec)}, entry {spec.entry}"]
    if spec.spot:
        lines.append(own_code.SPOT_RESUME_NOTE)
    return lines


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

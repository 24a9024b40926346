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

from jobs.errors import SpecError
from jobs.planning import cadence, fsdp, own_code, pricing, versions
from jobs.planning.batch import (
    ACCUMULATION,
    PER_DEVICE,
    BatchNotKept,
    BatchSettings,
    estimator_batch,
    keep_global_batch,
    with_batch,
)
from jobs.planning.fallbacks import DEFAULT_ORDER, Fallbacks, adjustable, lineage_fallbacks
from jobs.planning.forecast import Forecast, PastRun, forecast
from jobs.planning.hyperparameters import ENTRY_POINTS, check_script_hyperparameters
from jobs.planning.images import REGION_PLACEHOLDER
from jobs.planning.instances import instance_info
from jobs.planning.max_run import max_run_advice
from jobs.planning.metrics import METRIC_DEFINITIONS as METRIC_DEFINITIONS  # re-exported: the plan's defaults
from jobs.planning.metrics import METRIC_NAMES as METRIC_NAMES
from jobs.planning.metrics import definitions_for
from jobs.planning.metrics import parse_metric_line as parse_metric_line
from jobs.planning.pricing import CostEstimate
from jobs.planning.spec import LLM_TASK, JobSpec, dataset_hyperparameters

CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
BUCKET_PLACEHOLDER = "<TRAINBOT_BUCKET>"
LINEAGE_PLACEHOLDER = "<lineage>"
TRAIN_CHANNEL = "train"

_TAG_VALUE_BAD = re.compile(r"[^\w\s.:/=+\-@]")

DISTRIBUTION_LABELS = {
    "none": "none (one process a host)",
    "data": "data parallel (smdistributed dataparallel; legacy: the article's, last released for PyTorch 2.4.1)",
    "model": "model parallel (smdistributed modelparallel over MPI; legacy: the article's SMP v1, archived 2023)",
    "ddp": "ddp (torch_distributed, torchrun; current)",
    "fsdp": "fsdp (torch_distributed, torchrun, with the Trainer's FSDP; current)",
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
    never a plan rebuilt from settings that may have changed since (a new bucket would start from zero),
    and the same global batch (``batch``, as approved) whatever accelerator count the type has."""

    spec: JobSpec
    lineage_id: str
    estimator: dict[str, Any]
    cost: CostEstimate
    inputs: dict[str, str] | None = None  # fit() channels: {"train": train_data} when the spec names one
    forecast: Forecast | None = None  # the job on SageMaker, as planned
    # The run this bot's backend makes of the plan, where it is another (the local backend's scaled-down
    # run on this machine); None: the backend runs the plan as written.
    run_forecast: Forecast | None = None
    batch: BatchSettings | None = None  # the approved batch (None: read from the estimator's arguments)
    fallbacks: Fallbacks | None = None  # where relaunches may go, in order (the plan as built)

    @property
    def approved_batch(self) -> BatchSettings:
        """The batch the lineage was approved with; every attempt keeps its global batch."""
        return self.batch or self.attempt_batch

    @property
    def attempt_batch(self) -> BatchSettings:
        """The batch these arguments train with on their instance type."""
        return estimator_batch(self.estimator)

    def recorded_batch(self) -> tuple[int | None, int | None]:
        """(per-device batch, accumulation) an attempt of this plan records; None where the script's own."""
        batch, known = self.attempt_batch, adjustable(self.spec)
        return (batch.per_device if PER_DEVICE in known else None,
                batch.accumulation if ACCUMULATION in known else None)

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
            advice = max_run_advice(self.spec, self.forecast)
            if advice is not None:  # SageMaker would stop it at max_run
                data["max_run_advice"] = advice.to_json()
        if self.run_forecast is not None:
            data["run_forecast"] = self.run_forecast.to_json()
        if self.inputs:
            data["inputs"] = dict(self.inputs)
        data["batch"] = self.approved_batch.to_json()
        if self.fallbacks is not None:
            data["fallbacks"] = self.fallbacks.to_json()
        return data

    @property
    def checkpoint_uri(self) -> str:
        """The lineage's checkpoint prefix: the estimator's, or where it would be (own code that asked for no
        checkpoints gets no CheckpointConfig, but the lineage still owns the prefix)."""
        uri = self.estimator.get("checkpoint_s3_uri")
        if uri:
            return str(uri)
        return str(self.estimator["output_path"]).removesuffix("/output") + "/checkpoints"

    def stored(self) -> dict[str, Any]:
        """What the store keeps: the resolved launch arguments and the approved batch (the spec is stored
        on its own)."""
        return {"estimator": copy.deepcopy(self.estimator), "inputs": dict(self.inputs) if self.inputs else None,
                "batch": self.approved_batch.to_json()}

    @classmethod
    def from_stored(cls, spec: JobSpec, lineage_id: str, stored: dict[str, Any]) -> LaunchPlan:
        estimator = copy.deepcopy(stored["estimator"])
        batch = BatchSettings.from_json(stored["batch"]) if stored.get("batch") else None
        return cls(spec, lineage_id, estimator, pricing.estimate(spec), stored.get("inputs") or None, batch=batch)

    def for_attempt(self, *, instance_type: str, spot: bool) -> LaunchPlan:
        """This approved plan on ``instance_type`` with ``spot``, and the per-device batch and accumulation
        that keep its global batch there (jobs.planning.batch); nothing else changes. The fallback types
        come from the recovery policy's list, which keeps the spec's rules: no revalidation against
        today's settings, so a lowered TRAINBOT_MAX_INSTANCES does not strand a running lineage."""
        approved = self.approved_batch
        info = instance_info(instance_type)
        try:
            batch = keep_global_batch(approved, info.gpus, adjustable=adjustable(self.spec))
        except BatchNotKept as exc:
            raise SpecError(f"{info.name} cannot run {self.lineage_id or 'this job'} as approved: {exc}.") from None
        estimator = copy.deepcopy(self.estimator)
        estimator["instance_type"] = info.name
        estimator["use_spot_instances"] = spot
        max_wait = self.spec.max_wait if spot else None
        if max_wait:
            estimator["max_wait"] = max_wait
        else:
            estimator.pop("max_wait", None)
        estimator["hyperparameters"] = with_batch(estimator.get("hyperparameters") or {}, batch, approved)
        spec = self.spec.model_copy(update={"instance_type": info.name, "spot": spot, "max_wait": max_wait,
                                            "hyperparameters": with_batch(self.spec.hyperparameters, batch, approved)})
        return LaunchPlan(spec, self.lineage_id, estimator, pricing.estimate(spec), self.inputs, batch=approved)


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
    recovery_order: str = DEFAULT_ORDER,
    region: str = "",
) -> LaunchPlan:
    """The plan of ``spec`` for lineage ``lineage_id``; an empty bucket gives placeholder URIs. ``history``:
    earlier SageMaker runs of the same model, task and instance type (newest first) the forecast learns
    from; ``max_restarts`` and ``max_job_usd``: the operator's caps on the lineage's worst case, which
    counts every type ``recovery_order`` (TRAINBOT_RECOVERY_POLICY) may move it to. ``region``: where an image
    beyond the SDK's tables is pulled from (its URI; the backend fills in its own region at launch)."""
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
    image_uri = versions.training_image_uri(spec.transformers_version, spec.pytorch_version, spec.py_version,
                                            region or REGION_PLACEHOLDER)
    if image_uri is not None:  # newer than the SDK's tables: the estimator pulls it by URI
        estimator["image_uri"] = image_uri
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
    if wants_checkpoints(spec):
        estimator.update(checkpoint_s3_uri=layout.checkpoints, checkpoint_local_path=CHECKPOINT_LOCAL_PATH)
    if spec.environment:  # env.NAME=VALUE, beside what the checkpoint entry sets
        estimator["environment"] = {**spec.environment, **(estimator.get("environment") or {})}
    estimator.update(
        output_path=layout.output,
        code_location=layout.code,
        metric_definitions=definitions_for(spec.metrics),
        tags=plan_tags(spec, lineage_id or LINEAGE_PLACEHOLDER, launched_by, origin),
    )
    inputs = spec.input_channels() or None
    batch = estimator_batch(estimator)
    fallbacks = lineage_fallbacks(spec, batch, recovery_order)
    cost = pricing.estimate(spec, max_restarts=max_restarts, max_job_usd=max_job_usd, types=fallbacks.types())
    return LaunchPlan(spec, lineage_id, estimator, cost, inputs, forecast=forecast(spec, history=history),
                      batch=batch, fallbacks=fallbacks)


def plan_hyperparameters(spec: JobSpec) -> dict[str, str | int | float | bool]:
    """The spec's hyperparameters plus the model and dataset arguments the scripts read, every one a name
    the task's script takes and none it may not be handed (a stored spec is checked here too); then the loss
    and evaluation cadence for the job's length (unless set), and the checkpoint clock."""
    hps: dict[str, str | int | float | bool] = {}
    if spec.model is not None:  # own code may name its model itself (hp.model_id=...)
        hps["model_name_or_path"] = spec.model
    if spec.train_data is None and spec.dataset is not None:
        hps.update(dataset_hyperparameters(spec.dataset))
        if spec.dataset_revision:
            hps["dataset_revision"] = spec.dataset_revision
    hps.update(spec.hyperparameters)
    if spec.own_code:
        # A team's script takes exactly what was typed: only the reserved are refused, and nothing of the bot's
        # is added (no output_dir, cadence or checkpoint argument: a strict HfArgumentParser refuses any of them).
        check_script_hyperparameters(hps, spec.task, any_script=True)
        return hps
    check_script_hyperparameters(hps, spec.task)
    steps = cadence.total_steps(spec, spec.hyperparameters)
    hps.update(cadence.chosen_cadence(spec.hyperparameters, steps, evaluates=cadence.evaluates(hps)))
    if spec.task == LLM_TASK and "fp16" not in hps:
        # TRL's SFTConfig trains in bf16 unless told: said outright, so a type without bf16 runs in fp32.
        hps.setdefault("bf16", spec.instance.bf16)
    if spec.distribution == "fsdp":
        hps.update(fsdp.fsdp_hyperparameters(spec))
    if spec.checkpoint_minutes is not None:
        hps["checkpoint_minutes"] = spec.checkpoint_minutes
    return hps


def wants_checkpoints(spec: JobSpec) -> bool:
    """Whether the job gets a CheckpointConfig: the bot's scripts always (a relaunch resumes from it); a team's
    script only with spot=yes or when it asks for checkpoints (checkpoint_minutes=), as its own estimator would."""
    return not spec.own_code or spec.spot or spec.checkpoint_minutes is not None


def code_arguments(spec: JobSpec) -> dict[str, Any]:
    """``entry_point``/``source_dir`` (and ``git_config``) of the bot's script, or of the team's own code, as
    its own estimator would name them.

    Only when checkpoints on the clock are asked for (``checkpoint_minutes=``, spot or not) does a team's script
    run through the bot's entry, shipped beside it (``dependencies``) and told which script to run and how
    often to save (``environment``): it adds the saves to the script's Trainer and copies the final model from
    the Trainer's output folder into the model folder, which SageMaker uploads."""
    if spec.code is None or spec.entry is None:
        return {"entry_point": ENTRY_POINTS[spec.task or ""], "source_dir": training_source_dir()}
    arguments = own_code.source_arguments(spec.code, spec.entry, spec.code_commit)
    if spec.checkpoint_minutes is not None:
        arguments["environment"] = {own_code.USER_ENTRY_ENV: str(arguments["entry_point"]),
                                    own_code.CHECKPOINT_MINUTES_ENV: f"{spec.checkpoint_minutes:g}"}
        arguments["entry_point"] = own_code.SPOT_ENTRY
        arguments["dependencies"] = _spot_entry_files()
    return arguments


def _spot_entry_files() -> list[str]:
    return [str(Path(training_source_dir()) / name) for name in own_code.SPOT_ENTRY_FILES]


def shipped_dependencies(estimator: dict[str, Any]) -> list[Path]:
    """The files shipped beside the code (the SDK's ``dependencies``), the spot entry's taken from this
    install rather than the plan: a plan made by an earlier version (relaunched, or retried after a restart)
    names the entry alone, or where the bot was installed then, and today's entry imports its sibling."""
    named = [Path(p) for p in estimator.get("dependencies") or []]
    if estimator.get("entry_point") != own_code.SPOT_ENTRY:
        return named
    others = [p for p in named if p.name not in own_code.SPOT_ENTRY_FILES]
    return [*map(Path, _spot_entry_files()), *others]


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
    params = MODEL_PARAMETERS.get(spec.model or "")
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
    if spec.distribution in ("ddp", "fsdp"):  # torchrun on every GPU of every instance
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
        # An image pulled by URI: its versions are written on the job too (the URI's tag is the registry's word).
        ("trainbot:image", _beyond_sdk_key(spec)),
    ]
    return [{"Key": key, "Value": _tag_value(value)} for key, value in pairs if value]


def _beyond_sdk_key(spec: JobSpec) -> str:
    row = versions.beyond_sdk(versions.Combination(spec.transformers_version, spec.pytorch_version, spec.py_version))
    return row.name if row is not None else ""


def code_label(spec: JobSpec, *, with_ref: bool = True) -> str:
    """``repo@<short sha> (REF)`` of a job's own code, as the card and reports name it; "" for the bot's scripts."""
    if spec.code is None:
        return ""
    source = own_code.parse_code(spec.code)
    return own_code.display(source.url, spec.code_commit, source.ref if with_ref else None)


def _tag_value(value: str) -> str:
    return _TAG_VALUE_BAD.sub("_", value)[:256]

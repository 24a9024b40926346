"""JobSpec: one validated training job, with every cross-field rule stated as a sentence a person can act on.

Build one with :func:`spec_from_fields` (any raw dict: the grammar's, a preset's, stored JSON); it turns
every failure into a :class:`SpecError`. ``JobSpec.model_dump(mode="json")`` is the contract JSON, and
validating that JSON again gives the same spec (the defaults below are idempotent). Hyperparameter names,
types and value parsing live in :mod:`jobs.planning.hyperparameters`.

Input (anything through :func:`spec_from_fields`, which passes a validation context) must also name only
hyperparameters the task's script takes and none it may not be handed. A spec read back from the store is
validated without a context, so rules added since it was saved never make its row unreadable; nothing of it
reaches a job without ``build_plan`` checking its hyperparameters again.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator, model_validator

from jobs.errors import SpecError
from jobs.planning import versions
from jobs.planning.hyperparameters import (
    TRUE_WORDS,
    HpValue,
    check_hyperparameters,
    check_script_hyperparameters,
    show,
)
from jobs.planning.instances import InstanceType, instance_info, normalize_instance_name
from jobs.planning.job_environment import check_environment
from jobs.planning.metrics import check_user_metrics
from jobs.planning.own_code import check_entry, check_own_checkpoint_minutes, is_full_commit, parse_code
from jobs.planning.presets import DEFAULT_MP_PARAMETERS, DEFAULT_PROCESSES_PER_HOST, PRESETS
from jobs.wording import counted

Task = Literal["question-answering", "text-classification", "text-generation"]
Distribution = Literal["none", "data", "model", "ddp", "fsdp"]

TASKS: tuple[str, ...] = ("question-answering", "text-classification", "text-generation")
DISTRIBUTIONS: tuple[str, ...] = ("none", "data", "model", "ddp", "fsdp")
#: Supervised fine-tuning of a causal language model (the LLM presets): TRL and PEFT, on an image that ships them.
LLM_TASK = "text-generation"
DEFAULT_MAX_INSTANCES = 16
DEFAULT_MAX_RUN = 86400
MAX_RUNTIME_SECONDS = 28 * 86400  # SageMaker's cap on MaxRuntimeInSeconds and MaxWaitTimeInSeconds
DEFAULT_SPOT_SAVE_STEPS = 100
#: A spot job saves at least this often (minutes): the most training an interruption can cost.
DEFAULT_SPOT_CHECKPOINT_MINUTES = 10.0
MAX_CHECKPOINT_MINUTES = 24 * 60
MAX_VOLUME_GB = 16384  # SageMaker's VolumeSizeInGB limit
MAX_RESTARTS_LIMIT = 20

#: Datasets trainbot knows: name -> (task, HF dataset name, config name).
DATASETS: dict[str, tuple[str, str, str | None]] = {
    "squad": ("question-answering", "squad", None),
    "squad_v2": ("question-answering", "squad_v2", None),
    "imdb": ("text-classification", "imdb", None),
    "ag_news": ("text-classification", "ag_news", None),
    "emotion": ("text-classification", "emotion", None),
    "yelp_polarity": ("text-classification", "yelp_polarity", None),
    **{name: ("text-classification", "glue", name) for name in ("mnli", "sst2", "mrpc", "qnli", "qqp", "rte", "cola")},
    # Chat data (a "messages" column of role/content turns), both Apache-2.0 / MIT licensed.
    "capybara": ("text-generation", "trl-lib/Capybara", None),
    "ultrachat": ("text-generation", "HuggingFaceH4/ultrachat_200k", None),
}
NAME_PATTERN = re.compile(r"[A-Za-z0-9_./:~@+=-]{1,300}", re.ASCII)
MP_ENUMS = {
    "pipeline": ("simple", "interleaved"),
    "placement_strategy": ("spread", "cluster"),
    "optimize": ("speed", "memory"),
}
MP_INTS = ("partitions", "microbatches", "active_microbatches", "default_partition")
MP_BOOLS = ("ddp", "auto_partition", "contiguous")
MP_KEYS = tuple(MP_ENUMS) + MP_INTS + MP_BOOLS
#: The channels with keys of their own -> the key.
CHANNEL_KEYS = {"train": "train_data", "test": "test_data", "validation": "validation_data"}
#: A channel name SageMaker takes and the toolkit turns into SM_CHANNEL_<NAME> (a usable variable name).
CHANNEL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}", re.ASCII)
MAX_CHANNELS = 20  # SageMaker's limit on a job's InputDataConfig


def check_channels(channels: dict[str, str]) -> dict[str, str]:
    """channel.NAME=URI: names SageMaker and the toolkit take, none twice in SM_CHANNEL_ spelling."""
    if len(channels) > MAX_CHANNELS - len(CHANNEL_KEYS):
        raise SpecError(f"A job takes at most {MAX_CHANNELS} data channels (SageMaker's limit), not {len(channels)}.")
    seen: dict[str, str] = {}
    for name, uri in channels.items():
        if not isinstance(name, str) or not CHANNEL_NAME.fullmatch(name):
            raise SpecError(f"channel.{show(name)} is not a channel name: use letters, digits and _ (up to 64), "
                            "starting with a letter, e.g. channel.extra=s3://BUCKET/PREFIX.")
        if name.lower() in CHANNEL_KEYS:
            raise SpecError(f"channel.{name} is the {name.lower()} channel: use {CHANNEL_KEYS[name.lower()]}= for it.")
        if name.upper() in seen:
            raise SpecError(f"channel.{seen[name.upper()]} and channel.{name} would both be SM_CHANNEL_{name.upper()}: keep one.")
        if not isinstance(uri, str):
            raise SpecError(f"channel.{name} takes an s3:// prefix or a local folder.")
        seen[name.upper()] = name
    return dict(channels)


def dataset_hyperparameters(dataset: str) -> dict[str, str]:
    """``mnli`` -> glue/mnli; ``name:config`` -> name/config; anything else is a dataset name as is."""
    if dataset in DATASETS:
        _, name, config = DATASETS[dataset]
    elif ":" in dataset and "://" not in dataset:
        name, _, config = dataset.partition(":")
    else:
        name, config = dataset, None
    return {"dataset_name": name, **({"dataset_config_name": config} if config else {})}


# ---------------------------------------------------------------- the spec


class JobSpec(BaseModel):
    """One training job. Field names and JSON are the contract (README); the extra fields follow them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: Task | None = None  # required unless the job runs its own code (code=)
    model: str | None = None  # required unless the job runs its own code, which may name its model itself
    dataset: str | None = None  # likewise (with train_data= and no dataset=: "custom")
    instance_type: str = "ml.p3.2xlarge"
    instance_count: int = 1
    distribution: Distribution = "none"
    spot: bool = False
    max_run: int = DEFAULT_MAX_RUN
    max_wait: int | None = None
    hyperparameters: dict[str, HpValue] = {}
    transformers_version: str
    pytorch_version: str
    py_version: str
    preset: str | None = None
    mp_parameters: dict[str, HpValue] | None = None
    processes_per_host: int | None = None
    on_demand_fallback: bool = False
    max_restarts: int = 5
    train_data: str | None = None
    test_data: str | None = None  # the "test" channel (SM_CHANNEL_TEST)
    validation_data: str | None = None  # the "validation" channel (SM_CHANNEL_VALIDATION)
    channels: dict[str, str] | None = None  # channel.NAME=URI: any other channel (SM_CHANNEL_<NAME>)
    dataset_revision: str | None = None
    checkpoint_minutes: float | None = None  # a checkpoint at least this often; default for spot jobs
    volume_size: int | None = None  # GB of disk; None: sized to the model (plan.volume_size_gb)
    notify: Literal["dm", "none"] | None = None  # dm: a DM to the launcher when it ends; none: never
    code: str | None = None  # own code: git+URL[@REF] or s3://BUCKET/KEY.tar.gz
    entry: str | None = None  # own code: the script's path in the repository or tarball
    code_commit: str | None = None  # the commit a git REF named when the lineage was planned (pinned)
    metrics: dict[str, str] | None = None  # own metric definitions: name -> regex with one group
    # Set by trainbot when own code is pinned: whether its entry builds a transformers Trainer (the spot
    # entry can add saves on the clock to one), and what the script saves by itself, in words.
    code_trainer: bool | None = None
    code_saves: str | None = None
    registry: str | None = None  # the Model Package Group its model is registered in (default: its schedule)
    environment: dict[str, str] | None = None  # env.NAME=VALUE: the job's variables (the estimator's environment=)

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        return fill_defaults(dict(data)) if isinstance(data, dict) else data

    @field_validator("hyperparameters")
    @classmethod
    def _check_hyperparameters(cls, value: dict[str, HpValue]) -> dict[str, HpValue]:
        return check_hyperparameters(value)

    @field_validator("channels")
    @classmethod
    def _check_channels(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_channels(value) if value else None

    @field_validator("environment")
    @classmethod
    def _check_environment(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_environment(value) if value else None

    @field_validator("metrics")
    @classmethod
    def _check_metrics(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        return check_user_metrics(value) if value else None

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> JobSpec:
        if isinstance(info.context, dict):  # input, not a stored row (see the module docstring)
            # The bot's scripts take only the names they declare; a team's own script takes its own, and
            # only what no script may be handed is refused (sagemaker_*, the job's folders, hub pushes).
            check_script_hyperparameters(self.hyperparameters, self.task, any_script=self.own_code)
        context = info.context if isinstance(info.context, dict) else {}
        check_spec(self, int(context.get("max_instances", DEFAULT_MAX_INSTANCES)))
        return self

    @property
    def instance(self) -> InstanceType:
        return instance_info(self.instance_type)

    @property
    def own_code(self) -> bool:
        return self.code is not None

    @property
    def data_label(self) -> str:
        """What it trains on, as a card or report names it: the train channel, the dataset, or the script's own."""
        return self.train_data or self.dataset or "the script's own data"

    @property
    def model_label(self) -> str:
        """The model, or for own code that names none, what the script chooses."""
        return self.model or ("the script's own model" if self.own_code else "")

    def input_channels(self) -> dict[str, str]:
        """Every data channel it names: train, test, validation, then channel.NAME ones, in that order."""
        named = {"train": self.train_data, "test": self.test_data, "validation": self.validation_data}
        found = {name: uri for name, uri in named.items() if uri}
        found.update(self.channels or {})
        return found


def spec_from_fields(fields: dict[str, Any], *, max_instances: int = DEFAULT_MAX_INSTANCES) -> JobSpec:
    """Validate raw fields into a JobSpec; every failure is one SpecError sentence."""
    try:
        return JobSpec.model_validate(fields, context={"max_instances": max_instances})
    except ValidationError as exc:
        loc = min(exc.errors(), key=_error_rank).get("loc") or ("",)
        raise SpecError(describe_validation_error(exc), field=str(loc[0]) or None) from None


def _error_rank(error: Any) -> int:
    """Missing model, dataset, task first; then wrong values; then missing derived fields (versions)."""
    if error.get("type") != "missing":
        return 3
    return {"model": 0, "dataset": 1, "task": 2}.get(str((error.get("loc") or ("",))[0]), 4)


_ERROR_TEXT = {
    "int_parsing": "takes a whole number",
    "int_type": "takes a whole number",
    "int_from_float": "takes a whole number",
    "bool_parsing": "takes yes or no",
    "bool_type": "takes yes or no",
    "string_type": "takes text",
    "dict_type": "takes key=value pairs",
}


def describe_validation_error(exc: ValidationError) -> str:
    """The first problem pydantic found, as one sentence naming the field."""
    errors = exc.errors()
    error = min(errors, key=_error_rank)
    field = ".".join(str(part) for part in error.get("loc", ())) or "the job"
    kind = error.get("type", "")
    if kind == "missing":
        return missing_field_message(field)
    if kind == "extra_forbidden":
        return f"{field} is not a job field."
    if kind == "literal_error":
        expected = (error.get("ctx") or {}).get("expected", "")
        return f"{field} must be one of {expected}, not {show(error.get('input'))}."
    text = _ERROR_TEXT.get(kind, str(error.get("msg", "is not valid")).lower())
    return f"{field} {text}, not {show(error.get('input'))}."


def missing_field_message(field: str) -> str:
    presets = ", ".join(PRESETS)
    if field == "model":
        return f"Say which model to train (model=NAME), or start from a preset: {presets}."
    if field == "dataset":
        return "Say which data to train on: dataset=NAME (e.g. squad, mnli, imdb) or train_data=s3://BUCKET/PREFIX."
    if field == "task":
        return "Say which task this is: task=question-answering, task=text-classification or task=text-generation."
    return f"{field} is missing."


# ---------------------------------------------------------------- defaults (idempotent)


def fill_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """Derive what the person left out: task, versions, max_wait, model-parallel and checkpoint settings."""
    if isinstance(data.get("instance_type"), str):
        data["instance_type"] = normalize_instance_name(data["instance_type"])
    if data.get("dataset") is None and isinstance(data.get("train_data"), str):
        data["dataset"] = "custom"
    if data.get("task") is None and data.get("dataset") in DATASETS:
        data["task"] = DATASETS[data["dataset"]][0]
    distribution = data.get("distribution", "none")
    if distribution in DISTRIBUTIONS:
        _fill_versions(data, distribution, llm=data.get("task") == LLM_TASK)
        if distribution == "model":
            _fill_model_parallel(data)
    if data.get("spot") is True or str(data.get("spot")).lower() in TRUE_WORDS:
        _fill_spot(data, own_code=data.get("code") is not None)
    return data


def _fill_versions(data: dict[str, Any], distribution: str, *, llm: bool) -> None:
    keys = ("transformers_version", "pytorch_version", "py_version")
    given = [data.get(key) for key in keys]
    if not all(v is None or isinstance(v, str) for v in given):
        return
    if llm and all(v is not None for v in given):
        return  # a stored spec (or one given in full) keeps its versions; check_spec says if they cannot run it
    transformers, pytorch, py = given
    own = data.get("code") is not None  # a team's script may run on images older than the bot's scripts need
    data.update(zip(keys, versions.complete_versions(transformers, pytorch, py, distribution, llm=llm, own=own),
                    strict=True))


def _fill_model_parallel(data: dict[str, Any]) -> None:
    if data.get("processes_per_host") is None:
        data["processes_per_host"] = DEFAULT_PROCESSES_PER_HOST
    params = data.get("mp_parameters")
    if params is None or isinstance(params, dict):
        data["mp_parameters"] = {**DEFAULT_MP_PARAMETERS, **(params or {})}


def _fill_spot(data: dict[str, Any], *, own_code: bool) -> None:
    max_run = data.get("max_run", DEFAULT_MAX_RUN)
    if data.get("max_wait") is None and isinstance(max_run, int) and not isinstance(max_run, bool):
        data["max_wait"] = min(2 * max_run, max(MAX_RUNTIME_SECONDS, max_run))
    if own_code:
        # A team's script owns its arguments (a strict parse_args() refuses --save_steps); its saves on the
        # clock come from the spot entry's callback, at checkpoint_minutes= when typed (own_code.py).
        return
    hps = data.get("hyperparameters")
    if hps is None or isinstance(hps, dict):
        hps = dict(hps or {})
        hps.setdefault("save_steps", _default_save_steps(hps.get("max_steps")))
        data["hyperparameters"] = hps
    if data.get("checkpoint_minutes") is None:
        data["checkpoint_minutes"] = DEFAULT_SPOT_CHECKPOINT_MINUTES


def _default_save_steps(max_steps: object) -> int:
    """A checkpoint every 100 steps, or four in a run shorter than 400 steps."""
    if isinstance(max_steps, int) and not isinstance(max_steps, bool) and max_steps > 0:
        return max(1, min(DEFAULT_SPOT_SAVE_STEPS, max_steps // 4))
    return DEFAULT_SPOT_SAVE_STEPS


# ---------------------------------------------------------------- cross-field rules


def check_spec(spec: JobSpec, max_instances: int) -> None:
    """Every cross-field rule; the first one broken raises SpecError."""
    info = instance_info(spec.instance_type)
    _check_names(spec)
    _check_own_code(spec)
    _check_instances(spec, info, max_instances)
    _check_times(spec)
    _check_checkpoints_and_disk(spec)
    versions.validate_versions(spec.transformers_version, spec.pytorch_version, spec.py_version, spec.distribution,
                               own=spec.own_code)
    if spec.task == LLM_TASK:
        versions.validate_llm_image(spec.transformers_version, spec.pytorch_version, spec.py_version)
    mismatch = versions.cuda_mismatch(spec.transformers_version, spec.pytorch_version, info)
    if mismatch is not None:
        raise SpecError(f"{info.name} cannot run this job: {mismatch}. Choose another instance_type or "
                        "transformers_version=.", field="instance_type")
    _check_distribution(spec, info)
    if spec.hyperparameters.get("bf16") is True and not info.bf16:
        raise SpecError(
            f"bf16=yes needs an A100, H100, H200, B200, A10G, L4, L40S or Trainium; {info.name} has "
            f"{info.accelerator}: use fp16=yes or a p4d, p5, g5, g6 or g6e type.", field="instance_type"
        )


def _check_names(spec: JobSpec) -> None:
    named = [(field, getattr(spec, field)) for field in ("model", "dataset", "train_data", "dataset_revision")]
    named += [(CHANNEL_KEYS.get(name, f"channel.{name}"), uri)
              for name, uri in spec.input_channels().items() if name != "train"]
    for field, value in named:
        if value is not None and not NAME_PATTERN.fullmatch(value):
            raise SpecError(f"{field} {show(value)} is not a usable name: a hub id like owner/name, or an s3:// or local path, with no spaces.", field=field)
        if value is not None and any(part.startswith("-") for part in _script_values(field, value)):
            # It becomes a script argument's value; one starting with - would read as another option.
            raise SpecError(f"{field} {show(value)} may not start with -: name a hub id like owner/name, or an s3:// or local path.", field=field)
    for name, uri in spec.input_channels().items():
        if not uri.startswith(("s3://", "/", "./", "~")):
            key = CHANNEL_KEYS.get(name, f"channel.{name}")
            raise SpecError(f"{key} must be an s3:// prefix or a local folder, not {show(uri)}.", field=key)
    if spec.task is not None and spec.dataset in DATASETS and DATASETS[spec.dataset][0] != spec.task:
        raise SpecError(f"dataset={spec.dataset} is {DATASETS[spec.dataset][0]} data, but task={spec.task}: change one of them.", field="dataset")
    if spec.preset is not None and spec.preset not in PRESETS:
        raise SpecError(f"Unknown preset {show(spec.preset)}: choose one of {', '.join(PRESETS)}.")


def _script_values(field: str, value: str) -> list[str]:
    return list(dataset_hyperparameters(value).values()) if field == "dataset" else [value]


def _check_own_code(spec: JobSpec) -> None:
    if spec.code is None:
        for field in ("model", "dataset", "task"):
            if getattr(spec, field) is None:  # a team's own script may choose them itself; the bot's need them
                raise SpecError(missing_field_message(field))
        for field in ("entry", "code_commit", "code_trainer", "code_saves"):
            if getattr(spec, field) is not None:
                raise SpecError(f"{field}= goes with own code: add code=git+URL@REF or code=s3://BUCKET/KEY.tar.gz.")
        return
    source = parse_code(spec.code)
    if spec.entry is None:
        raise SpecError(
            "Own code needs the script to run: entry=PATH/IN/REPO/script.py, "
            "e.g. entry=examples/pytorch/question-answering/run_qa.py."
        )
    check_entry(spec.entry)
    if spec.code_commit is not None and (not source.is_git or not is_full_commit(spec.code_commit)):
        raise SpecError("code_commit is the 40-hex commit a git code= REF was pinned to; it is set by trainbot.")
    if spec.checkpoint_minutes is not None:
        check_own_checkpoint_minutes(spec.code_trainer, spec.code_saves)


def _check_instances(spec: JobSpec, info: InstanceType, max_instances: int) -> None:
    if info.is_trainium:
        raise SpecError(
            f"{info.name} needs the Neuron training containers, which the training scripts do not support: "
            "choose a GPU type such as ml.p3.2xlarge or ml.g5.xlarge.", field="instance_type"
        )
    if not 1 <= spec.instance_count <= max_instances:
        raise SpecError(f"instance_count must be between 1 and {max_instances} (TRAINBOT_MAX_INSTANCES), "
                        f"not {spec.instance_count}.", field="instance_count")
    if spec.spot and not info.spot:
        raise SpecError(
            f"{info.name} takes no managed spot (its capacity comes through training plans or on-demand): "
            "use spot=no, or a spot type such as ml.p5.48xlarge or ml.g6e.xlarge.", field="spot"
        )
    if spec.instance_count > 1 and spec.distribution == "none":
        raise SpecError(
            f"instance_count={spec.instance_count} needs distribution=ddp or fsdp (or the article's data or model): "
            "without one every instance would train alone; or use instance_count=1.", field="instance_count"
        )
    if not 0 <= spec.max_restarts <= MAX_RESTARTS_LIMIT:
        raise SpecError(f"max_restarts must be between 0 and {MAX_RESTARTS_LIMIT}, not {spec.max_restarts}.")


def _check_times(spec: JobSpec) -> None:
    if not 1 <= spec.max_run <= MAX_RUNTIME_SECONDS:
        raise SpecError(f"max_run must be between 1 second and 28 days (e.g. 3600, 90m, 2h), not {spec.max_run}.",
                        field="max_run")
    if spec.max_wait is None:
        if spec.spot:
            raise SpecError("A spot job needs max_wait (at least max_run), e.g. max_wait=2h.", field="max_wait")
        return
    if not spec.spot:
        raise SpecError("max_wait only applies to spot jobs: add spot=yes or drop max_wait.", field="max_wait")
    if not spec.max_run <= spec.max_wait <= MAX_RUNTIME_SECONDS:
        raise SpecError(
            f"max_wait ({spec.max_wait} s) must be at least max_run ({spec.max_run} s) and at most 28 days: "
            "it covers the wait for spot capacity plus the training itself.", field="max_wait"
        )


def _check_checkpoints_and_disk(spec: JobSpec) -> None:
    minutes = spec.checkpoint_minutes
    if minutes is not None and not 0 < minutes <= MAX_CHECKPOINT_MINUTES:
        raise SpecError(
            f"checkpoint_minutes must be more than 0 and at most {MAX_CHECKPOINT_MINUTES} (fractions allowed, "
            f"e.g. 0.5 or 10), not {show(minutes)}."
        )
    if spec.volume_size is not None and not 1 <= spec.volume_size <= MAX_VOLUME_GB:
        raise SpecError(f"volume_size must be between 1 and {MAX_VOLUME_GB} GB, not {spec.volume_size}.")


def _check_distribution(spec: JobSpec, info: InstanceType) -> None:
    if spec.distribution != "model" and (spec.mp_parameters is not None or spec.processes_per_host is not None):
        raise SpecError(
            "Model-parallel settings (partitions, microbatches, processes_per_host, mp.*) need distribution=model.",
            field="distribution",
        )
    if spec.distribution == "data":
        supported = versions.dataparallel_instance_types()
        if info.name not in supported:
            raise SpecError(
                f"distribution=data (smdistributed dataparallel) runs only on {', '.join(supported)}, "
                f"not {info.name}: pick one of those, or use distribution=ddp.", field="distribution"
            )
    if spec.distribution == "model":
        _check_model_parallel(spec, info)


def _check_model_parallel(spec: JobSpec, info: InstanceType) -> None:
    params = spec.mp_parameters or {}
    for key, value in params.items():
        _check_mp_value(key, value)
    processes = spec.processes_per_host or 0
    partitions = params.get("partitions", 1)
    if not 1 <= processes <= info.gpus:
        raise SpecError(
            f"processes_per_host={processes} must be between 1 and the {counted(info.gpus, 'GPU')} of {info.name}: "
            "model parallelism needs a multi-GPU type such as ml.p3.16xlarge.", field="instance_type"
        )
    if isinstance(partitions, int) and processes % partitions:
        raise SpecError(f"partitions={partitions} must divide processes_per_host={processes} (e.g. partitions=2 or 4 with 8 processes).")
    default = params.get("default_partition")
    if isinstance(default, int) and isinstance(partitions, int) and default >= partitions:
        raise SpecError(f"mp.default_partition={default} must be less than partitions={partitions}.")


def _check_mp_value(key: str, value: object) -> None:
    if key not in MP_KEYS:
        raise SpecError(f"{show(key)} is not a model-parallel parameter: use one of {', '.join(MP_KEYS)}.")
    if key in MP_ENUMS and value not in MP_ENUMS[key]:
        raise SpecError(f"mp.{key} must be one of {', '.join(MP_ENUMS[key])}, not {show(value)}.")
    if key in MP_INTS and (not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "default_partition" else 1)):
        raise SpecError(f"mp.{key} takes a whole number of at least 1, not {show(value)}.")
    if key in MP_BOOLS and not isinstance(value, bool):
        raise SpecError(f"mp.{key} takes yes or no, not {show(value)}.")

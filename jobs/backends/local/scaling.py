"""How a SageMaker plan is scaled down to run on this machine's CPU, said out loud.

A plan asks for GPUs, hours and (maybe) hub models; locally we have a few cores and minutes. Every
change is made here, in one pure function, and summed up in one line the plan card shows, so the
scale-down is never silent. By default (offline) the model is the tiny BERT and the data the generated
channels from `offline_assets`; with TRAINBOT_LOCAL_HUB=1 the hub names pass through unchanged.

An attempt on a type with another GPU count than planned (a relaunch) runs that many times the planned
processes (capped by the cores), and keeps the local run's global batch the way the plan keeps its own
(jobs.planning.batch): the per-device batch divided, or the accumulation raised.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.backends.local.offline_assets import LocalAssets
from jobs.backends.local.offline_chat import ChatAssets
from jobs.errors import BadInput
from jobs.planning import cadence
from jobs.planning.batch import ACCUMULATION, BOTH, PER_DEVICE, BatchNotKept, BatchSettings, keep_global_batch
from jobs.planning.forecast import ForecastTarget, Hardware
from jobs.planning.fsdp import FSDP_KEYS
from jobs.planning.prices import hourly_usd
from jobs.planning.workload import ModelShape, workload_of

if TYPE_CHECKING:
    from jobs.planning.plan import LaunchPlan

_TRUE_WORDS = ("1", "true", "yes", "on")
_DISTRIBUTED = ("data", "ddp", "fsdp", "model")
_TEXT_GENERATION = "text-generation"
#: Placeholder shown before the assets exist (a plan card must not build them).
_TINY_MODEL_PLACEHOLDER = Path("tiny-bert")
_TINY_LM_PLACEHOLDER = Path("tiny-causal-lm")
#: The offline model's shape (offline_assets.build_tiny_bert's defaults).
TINY_MODEL = ModelShape(layers=2, hidden=64)
#: What one local training process does on a CPU, effective (measured on the 2-core CI machine: tiny
#: matrices keep a core far from its peak), and the seconds around the training (starting Python, torch
#: and transformers, torchrun, loading the model and data, saving). The history corrects both per machine.
LOCAL_PROCESS_TFLOPS = 0.02
LOCAL_STARTUP_SECONDS = 15.0
#: The local backend bills a spot job's run at this share, as SageMaker's spot savings would (local_status).
LOCAL_SPOT_BILLABLE = 0.3


@dataclass(frozen=True)
class LocalLimits:
    """The caps applied to every local job. Measured on 2 cores: bert-squad with these runs ~10 s of
    training in two processes (plus start-up) and reaches EM ~30-40 on the generated SQuAD data."""

    max_steps: int = 60
    train_batch_size: int = 8
    eval_batch_size: int = 32
    max_seq_length: int = 128
    save_steps: int = 10  # so a spot demo has a checkpoint within seconds
    own_checkpoint_minutes: float = 0.05  # the spot entry's clock for a team's Trainer here: a save every 3 s
    train_samples: int = 200  # offline: generated examples trained on
    eval_samples: int = 100  # offline: generated examples evaluated on
    # A randomly initialised tiny BERT learns nothing in 60 steps at the usual 5e-5.
    tiny_model_learning_rate: float = 2e-3
    # A LoRA adapter on the random tiny causal LM: a 7B model's 2e-4 would leave its loss where it started.
    tiny_lm_learning_rate: float = 1e-2
    # The tiny model learns the generated tasks within 60 steps only with batches this large (at 8 or 16
    # it stays at chance on 200 examples); on the CPU a batch of 32 tiny examples costs milliseconds.
    tiny_model_batch_size: int = 32
    max_processes: int = field(default_factory=lambda: max(2, os.cpu_count() or 1))
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)  # the cores all local jobs share


def threads_per_process(limits: LocalLimits, processes: int, busy: int, host_cap: str | None) -> int:
    """The BLAS/OpenMP threads each of a new job's `processes` gets: the cores shared among them and the
    `busy` processes of local jobs already running, never above an operator's OMP_NUM_THREADS (`host_cap`).
    More thread pools than cores spin against each other: three jobs of two threads each on two cores
    trained 8x slower in all than three sharing them (bench/local_threads.py)."""
    threads = max(1, limits.cpus // max(1, processes + busy))
    try:
        cap = int(host_cap or "")
    except ValueError:
        return threads
    return min(threads, cap) if cap > 0 else threads


@dataclass(frozen=True)
class LocalRun:
    """What will actually run: the script's hyperparameters, processes and data, and why."""

    offline: bool
    processes: int
    model_label: str
    data_label: str
    hyperparameters: dict[str, Any]
    train_channel: Path | None
    test_channel: Path | None
    notes: tuple[str, ...] = ()
    other_channels: tuple[tuple[str, Path], ...] = ()  # validation and channel.NAME folders (own data)
    warnings: tuple[str, ...] = ()  # what will fail on this machine, said before the launch

    @property
    def channels(self) -> dict[str, Path]:
        named = {"train": self.train_channel, "test": self.test_channel}
        return {**{name: path for name, path in named.items() if path}, **dict(self.other_channels)}

    def note(self) -> str:
        steps = self.hyperparameters.get("max_steps")
        procs = f"{self.processes} process" + ("es" if self.processes != 1 else "")
        parts = [self.model_label, self.data_label, *([f"{steps} steps"] if steps is not None else []), procs]
        return "; ".join(("local: " + ", ".join(parts), *self.notes, *(f"⚠ {w}" for w in self.warnings)))


def is_offline(offline: bool | None) -> bool:
    """An explicit choice wins; otherwise the tiny model and generated data, always. A preset's hub model
    on a laptop's CPU would be a download of gigabytes and hours of training, and it fails outright
    where there is no network: hub models locally are asked for (TRAINBOT_LOCAL_HUB=1), never guessed."""
    if offline is not None:
        return offline
    return True


def scale_plan(
    plan: LaunchPlan, *, offline: bool, limits: LocalLimits, assets: LocalAssets | ChatAssets | None = None
) -> LocalRun:
    """The local version of `plan`. `assets` gives the tiny model and generated data (offline);
    without them (a plan card) only the note is meaningful."""
    spec = plan.spec
    if spec.own_code:
        return _own_code_run(plan, offline=offline, limits=limits, assets=assets)
    hps = _capped_hyperparameters(dict(plan.estimator.get("hyperparameters") or {}), spec.task or "", limits)
    # The same cadence rule as the plan's, for the scaled-down length: a loss curve here too.
    hps.update(cadence.chosen_cadence(spec.hyperparameters, int(hps["max_steps"]), evaluates=cadence.evaluates(hps)))
    planned, notes = _processes(spec.distribution, spec.instance_count, limits)
    processes = _attempt_processes(plan, planned, limits, notes)
    if _half_precision(hps):
        notes.append(f"{'fp16' if _is_true(hps.get('fp16')) else 'bf16'} off on the CPU")
        hps.update({key: False for key in ("fp16", "bf16") if key in hps})
    if spec.distribution == "fsdp":  # the Trainer's FSDP shards over GPUs; on the CPU the processes run DDP
        for key in FSDP_KEYS:
            hps.pop(key, None)
    train, test, data_label, data_notes = _data(spec, offline, limits, assets, hps)
    notes.extend(data_notes)
    approved = plan.approved_batch
    if offline and spec.task == _TEXT_GENERATION:
        hps["model_name_or_path"] = str(assets.model_dir if assets else _TINY_LM_PLACEHOLDER)
        hps["learning_rate"] = limits.tiny_lm_learning_rate  # the plan's is for the real model's size
        per_device = limits.tiny_model_batch_size
        model_label = "tiny causal LM with a LoRA adapter" if hps.get("use_lora", True) else "tiny causal LM"
    elif offline:
        model_dir = assets.model_dir if assets else _TINY_MODEL_PLACEHOLDER
        hps["model_name_or_path"] = str(model_dir)
        hps.setdefault("learning_rate", limits.tiny_model_learning_rate)
        per_device = limits.tiny_model_batch_size
        model_label = "tiny BERT"
    else:
        per_device = min(approved.per_device, limits.train_batch_size)
        model_label = str(hps.get("model_name_or_path") or spec.model)
    local = BatchSettings(per_device, approved.accumulation, planned, 1)
    _keep_local_batch(hps, local, processes, BOTH, notes)
    return LocalRun(offline, processes, model_label, data_label, hps, train, test, tuple(notes))


def _attempt_processes(plan: LaunchPlan, planned: int, limits: LocalLimits, notes: list[str]) -> int:
    """The planned processes, times the attempt type's GPUs over the planned type's (capped by the cores)."""
    approved, attempt = plan.approved_batch, plan.attempt_batch
    if attempt.accelerators == approved.accelerators:
        return planned
    processes = min(max(1, planned * attempt.accelerators // approved.accelerators), limits.max_processes)
    notes.append(f"{attempt.accelerators} GPUs an instance instead of the planned {approved.accelerators}: "
                 f"{processes} process{'es' if processes != 1 else ''} instead of {planned}")
    return processes


def _keep_local_batch(
    hps: dict[str, Any], local: BatchSettings, processes: int, adjustable: frozenset[str], notes: list[str]
) -> None:
    """The local run's own global batch (``local``, as planned) on ``processes``, written into ``hps``."""
    try:
        kept = keep_global_batch(local, processes, adjustable=adjustable)
    except BatchNotKept as exc:
        notes.append(f"the local run's global batch changes: {exc}")
        kept = local
    if PER_DEVICE in adjustable:
        hps[PER_DEVICE] = kept.per_device
    if ACCUMULATION in adjustable and (ACCUMULATION in hps or kept.accumulation != 1):
        hps[ACCUMULATION] = kept.accumulation


def _own_code_run(plan: LaunchPlan, *, offline: bool, limits: LocalLimits,
                  assets: LocalAssets | ChatAssets | None) -> LocalRun:
    """A team's own script gets its arguments as planned and the model it names: nothing is added (it may not take
    our keys), and only what the CPU cannot do as the image's GPU does is changed, each change said on the card:
    the sizes it was given capped (max_seq_length only with its doc_stride, scaled together), half precision it
    was given turned off, NCCL read as gloo (job_python's hook), the processes the card names."""
    spec = plan.spec
    hps = {k: v for k, v in dict(plan.estimator.get("hyperparameters") or {}).items() if not k.startswith("sagemaker_")}
    notes: list[str] = [f"your {spec.entry} with its arguments as planned"]
    for key, limit in (("max_steps", limits.max_steps), ("per_device_train_batch_size", limits.train_batch_size),
                       ("per_device_eval_batch_size", limits.eval_batch_size)):
        if key in hps:
            _cap(hps, key, limit)
    _own_sequence_length(hps, limits, notes)
    planned, process_notes = _own_processes(spec, limits)
    notes.extend(process_notes)
    processes = _attempt_processes(plan, planned, limits, notes)
    given = frozenset(name for name in BOTH if name in hps)
    if given and processes != planned:
        approved = plan.approved_batch
        local = BatchSettings(min(approved.per_device, limits.train_batch_size), approved.accumulation, planned, 1)
        _keep_local_batch(hps, local, processes, given, notes)
    asked = [key for key in ("fp16", "bf16") if _is_true(hps.get(key))]
    if asked:
        hps.update(dict.fromkeys(asked, False))
        notes.append(f"{' and '.join(asked)} off on the CPU (hp.{asked[0]}=False)")
    if processes > 1:
        notes.append("NCCL runs as gloo (this machine has no GPU)")
    warnings = (HALF_PRECISION_WARNING,) if asked else ()
    folders = {name: _local_folder(uri) for name, uri in spec.input_channels().items()}
    own = folders.get("train")
    train, test = own, folders.get("test")
    if own is not None and (own / "train").is_dir() and test is None:  # one folder with train/ and test/ in it
        train, test = own / "train", (own / "test" if (own / "test").is_dir() else None)
    others = tuple((name, path) for name, path in folders.items() if name not in ("train", "test") and path)
    model_label, model_warning = _own_model(hps, spec, offline)
    named = [name for name, path in {"train": train, "test": test, **dict(others)}.items() if path]
    data_label = f"channels {', '.join(named)} from local folders" if named else "the script's own data arguments"
    return LocalRun(offline, processes, model_label, data_label, hps, train, test, tuple(notes), others,
                    (*warnings, *model_warning))


#: What a script that reads ``--fp16`` with argparse's ``type=bool`` still does after the stand-in turned it off.
HALF_PRECISION_WARNING = (
    "a script that reads --fp16/--bf16 with argparse type=bool reads the toolkit's \"False\" as True and fails "
    "here, as the CPU has no half precision"
)


def _own_sequence_length(hps: dict[str, Any], limits: LocalLimits, notes: list[str]) -> None:
    """max_seq_length capped only with its partner doc_stride, both by the same factor: the pair a question-
    answering script windows its contexts with (doc_stride must stay below max_seq_length). Alone, a script's
    own doc_stride default could end up larger than the capped length, so neither is touched."""
    length, stride = _as_number(hps.get("max_seq_length")), _as_number(hps.get("doc_stride"))
    if length is None or length <= limits.max_seq_length or stride is None:
        return
    factor = limits.max_seq_length / length
    hps["max_seq_length"] = limits.max_seq_length
    hps["doc_stride"] = max(1, int(stride * factor))
    notes.append(f"max_seq_length {int(length)} and doc_stride {int(stride)} scaled together to "
                 f"{hps['max_seq_length']} and {hps['doc_stride']}")


def _own_processes(spec: Any, limits: LocalLimits) -> tuple[int, list[str]]:
    """A team's distributed script runs as many processes as the card says: SageMaker's processes (one a GPU for
    data parallel and ddp, processes_per_host for model parallel) capped by this machine's cores, under torchrun."""
    if spec.distribution not in _DISTRIBUTED:
        return _processes(spec.distribution, spec.instance_count, limits)
    per_host = spec.processes_per_host if spec.distribution == "model" else spec.instance.gpus
    wanted = max(1, (per_host or 1) * spec.instance_count)
    processes = min(wanted, limits.max_processes)
    kind = {"data": "smdistributed data parallel", "model": "smdistributed model parallel",
            "ddp": "torch_distributed"}[spec.distribution]
    runs = f"{processes} processes under torchrun (gloo)" if processes > 1 else "one process"
    notes = [f"{kind} ({wanted} processes on SageMaker) runs as {runs} here"]
    if spec.distribution in ("data", "model"):
        notes.append("a script that imports smdistributed fails here (it needs the image's GPUs)")
    return processes, notes


def _own_model(hps: dict[str, Any], spec: Any, offline: bool) -> tuple[str, tuple[str, ...]]:
    """The model the team named is the one the job gets: a local folder always, a hub id with the hub on
    (TRAINBOT_LOCAL_HUB=1); offline, a hub id is said to fail before the launch (check_own_model)."""
    name = hps.get("model_name_or_path")
    if name is None:
        return str(spec.model_label), ()
    if _local_folder(name) is not None or not offline:
        return str(name), ()
    return str(name), (OFFLINE_HUB_MODEL.format(model=name),)


OFFLINE_HUB_MODEL = ("model={model} is a hub id, and local jobs run offline: give a local folder (model=/path/to/model "
                     "under TRAINBOT_HOME/data or TRAINBOT_LOCAL_DATA_DIRS), or set TRAINBOT_LOCAL_HUB=1 to download it")


def check_own_model(plan: LaunchPlan, run: LocalRun) -> None:
    """A team's script trains the model it named: offline, model= must be a local folder (no tiny stand-in)."""
    name = run.hyperparameters.get("model_name_or_path")
    if run.offline and name is not None and _local_folder(name) is None:
        raise BadInput(f"On the local backend {OFFLINE_HUB_MODEL.format(model=name)}.")


#: How many entries of a named folder are checked for the job's uid to read (a model folder has a few dozen).
READABLE_CHECK_ENTRIES = 10_000


def check_readable_folders(run: LocalRun, uid: int) -> None:
    """Each local folder a team's arguments name (its model, say) readable by ``uid``, the uid the job runs as
    where it is not the files' owner: BadInput naming the first file it could not read, and how to fix it."""
    for value in run.hyperparameters.values():
        folder = _local_folder(value)
        if folder is None:
            continue
        for path in itertools.islice(itertools.chain((folder,), folder.rglob("*")), READABLE_CHECK_ENTRIES):
            if not _readable_by(path, uid):
                raise BadInput(
                    f"The local job runs as uid {uid} and cannot read {path} of {folder}: make the folder readable "
                    f"by every user (chmod -R a+rX {folder}) and launch again."
                )


def _readable_by(path: Path, uid: int) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return True  # gone meanwhile: the job says so itself
    if stat.S_ISLNK(info.st_mode) or info.st_uid == uid:
        return True
    wanted = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(info.st_mode) else 0)
    return info.st_mode & wanted == wanted


def check_own_channels(plan: LaunchPlan, run: LocalRun) -> None:
    """A team's script reads every channel it was given: each must be a folder here (S3 is SageMaker's)."""
    for name, uri in plan.spec.input_channels().items():
        if _local_folder(uri) is None:
            raise BadInput(f"On the local backend the {name} channel must be a local folder, not {uri!r}: "
                           "put the data under TRAINBOT_HOME/data or a folder of TRAINBOT_LOCAL_DATA_DIRS.")


def _is_true(value: object) -> bool:
    return value is True or str(value).lower() in _TRUE_WORDS


def local_forecast_target(plan: LaunchPlan, run: LocalRun) -> ForecastTarget:
    """The work of ``run`` (``plan`` scaled down) and this machine as the hardware it runs on."""
    spec = plan.spec
    hps = {k: v for k, v in run.hyperparameters.items() if isinstance(v, str | int | float | bool)}
    work = workload_of(spec, hps, replicas=run.processes)
    if run.offline:
        work = replace(work, model=TINY_MODEL)
    share = LOCAL_SPOT_BILLABLE if spec.spot else 1.0
    hourly = hourly_usd(spec.instance_type, spot=spec.spot) * spec.instance_count * share
    hardware = Hardware(
        label=f"this machine's CPU, {run.processes} process{'es' if run.processes != 1 else ''}",
        devices=run.processes,
        half_tflops=LOCAL_PROCESS_TFLOPS,
        fp32_tflops=LOCAL_PROCESS_TFLOPS,
        efficiency=1.0,
        startup_seconds=LOCAL_STARTUP_SECONDS,
        unbilled_seconds=0.0,
        teardown_seconds=0.0,
        hourly_usd=hourly,
        on_demand_hourly_usd=hourly_usd(spec.instance_type) * spec.instance_count,
    )
    return ForecastTarget(work, hardware)


def _capped_hyperparameters(hps: dict[str, Any], task: str, limits: LocalLimits) -> dict[str, Any]:
    # SageMaker adds sagemaker_* itself and strips them before the script; the script's
    # --checkpoint_dir is ours to set.
    hps = {k: v for k, v in hps.items() if not k.startswith("sagemaker_") and k != "checkpoint_dir"}
    _cap(hps, "max_steps", limits.max_steps)
    _cap(hps, "per_device_train_batch_size", limits.train_batch_size)
    _cap(hps, "per_device_eval_batch_size", limits.eval_batch_size)
    _cap(hps, "max_seq_length", limits.max_seq_length)
    _cap(hps, "save_steps", limits.save_steps)
    if task == "question-answering":
        # The QA script needs doc_stride below half of max_seq_length; keep the article's 1:3 ratio.
        _cap(hps, "doc_stride", hps["max_seq_length"] // 4)
    hps.setdefault("save_total_limit", 2)  # a resume needs the newest; disk needs no more
    # Without it transformers 5 on a GPU-less host leaves torchrun's workers as independent
    # single-process runs (world_size 1) instead of DDP over gloo. 4.x reads it as no_cuda.
    hps["use_cpu"] = True
    return hps


def _half_precision(hps: Mapping[str, Any]) -> bool:
    return any(hps.get(key) is True or str(hps.get(key)).lower() in _TRUE_WORDS for key in ("fp16", "bf16"))


def _cap(hps: dict[str, Any], key: str, limit: int) -> None:
    given = hps.get(key)
    number = _as_number(given)
    hps[key] = limit if number is None else min(int(number), limit)


def _as_number(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _processes(distribution: str, instance_count: int, limits: LocalLimits) -> tuple[int, list[str]]:
    notes: list[str] = []
    if distribution not in _DISTRIBUTED:
        if instance_count > 1:  # SageMaker would run N independent copies; one is enough here
            notes.append(f"one process for {instance_count} instances without distribution")
        return 1, notes
    wanted = max(1, instance_count)
    processes = min(wanted, limits.max_processes)
    if processes < wanted:
        notes.append(f"{processes} of {wanted} instances as processes (this machine's cores)")
    if distribution in ("data", "model"):  # smdistributed needs GPUs and MPI: torchrun over gloo instead
        kind = "data" if distribution == "data" else "model"
        notes.append(f"smdistributed {kind} parallel runs as torchrun DDP (gloo)")
    if distribution == "fsdp":
        notes.append("FSDP runs as torchrun DDP (gloo) on the CPU")
    return processes, notes


def _data(
    spec: Any, offline: bool, limits: LocalLimits, assets: LocalAssets | ChatAssets | None, hps: dict[str, Any]
) -> tuple[Path | None, Path | None, str, list[str]]:
    """(train channel, test channel, label, notes). A local train_data folder always wins."""
    own = _local_folder(spec.train_data)
    if own is not None:
        train, test = (own / "train", own / "test") if (own / "train").is_dir() else (own, own)
        notes = [] if test != train else ["evaluated on its own training data"]
        return train, test, f"data from {own}", notes
    if not offline:
        return None, None, f"dataset {hps.get('dataset_name') or spec.dataset} from the hub", []
    for key in ("dataset_name", "dataset_config_name", "dataset_revision"):  # channels replace the hub
        hps.pop(key, None)
    _cap(hps, "max_train_samples", limits.train_samples)
    _cap(hps, "max_eval_samples", limits.eval_samples)
    kind, notes = _generated_kind(spec.dataset, spec.task)
    channels: tuple[Path | None, Path | None] = assets.channels_for(kind) if assets else (None, None)
    what = "generated chats" if kind == "chat" else "generated examples"
    return *channels, f"{hps['max_train_samples']} {what}", notes


def _generated_kind(dataset: str, task: str) -> tuple[str, list[str]]:
    if task == _TEXT_GENERATION:
        return "chat", [f"generated chats stand in for {dataset}"]
    name = dataset.lower()
    for kind in ("squad", "mnli", "imdb"):
        if kind in name or (kind == "mnli" and "glue" in name) or (kind == "imdb" and "sst" in name):
            return kind, []
    kind = "squad" if task == "question-answering" else "imdb"
    return kind, [f"generated {kind}-style data stands in for {dataset}"]


def _local_folder(value: object) -> Path | None:
    if not isinstance(value, str) or "://" in value:
        return None
    path = Path(value).expanduser()
    return path if path.is_dir() else None


def script_arguments(hyperparameters: Mapping[str, Any]) -> list[str]:
    """`--key value` pairs exactly as SageMaker's training toolkit passes them: booleans as
    True/False, containers as JSON, everything else as str()."""
    args: list[str] = []
    for key, value in hyperparameters.items():
        if isinstance(value, bool):
            text = "True" if value else "False"
        elif isinstance(value, dict | list):
            text = json.dumps(value)
        else:
            text = str(value)
        args += [f"--{key}", text]
    return args

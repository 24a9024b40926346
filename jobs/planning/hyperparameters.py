"""Hyperparameters: the typed catalogue, the names trainbot reserves, and how raw values become typed ones.

A known hyperparameter (``KNOWN_HYPERPARAMETERS``) is parsed to its type and range-checked; any other name
passes through to the training script with its value read as a number, true/false or text, but only a name
the task's script takes (``check_script_argument``, from data/script_arguments.json, generated from the
scripts' dataclasses by tools/list_script_arguments.py: jobs/ imports neither transformers nor training/).
Whatever the script, ``check_reserved`` refuses what drives SageMaker's launcher, the job's own folders, and
anything that would send the model or data outside the account.

The file lists transformers' ``TrainingArguments`` per version: the one the lock pins (locks/test.txt, what local
jobs run) and the images' 4.28.1. A version it does not list (an install off the lock, an image named with
``transformers_version=``) needs no entry of its own: names are checked against every listed line, and the script's
parser, which reads the installed ``TrainingArguments``, has the last word, refusing a name that version lacks in
one sentence (``unrecognized arguments: --NAME``, exit 2, the job's failure reason).
"""

from __future__ import annotations

import difflib
import json
import math
import re
import unicodedata
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from jobs.errors import SpecError

HpValue = str | int | float | bool

#: Typed hyperparameters: name -> (type, smallest allowed value or None).
KNOWN_HYPERPARAMETERS: dict[str, tuple[type, float | None]] = {
    "num_train_epochs": (float, 0.0),
    "max_steps": (int, 1),
    "per_device_train_batch_size": (int, 1),
    "per_device_eval_batch_size": (int, 1),
    "gradient_accumulation_steps": (int, 1),
    "learning_rate": (float, 0.0),
    "weight_decay": (float, 0.0),
    "warmup_steps": (int, 0),
    "warmup_ratio": (float, 0.0),
    "max_seq_length": (int, 8),
    "doc_stride": (int, 1),
    "max_answer_length": (int, 1),
    "save_steps": (int, 1),
    "eval_steps": (int, 1),
    "logging_steps": (int, 1),
    "save_total_limit": (int, 1),
    "seed": (int, 0),
    "max_train_samples": (int, 1),
    "max_eval_samples": (int, 1),
    "fp16": (bool, None),
    "bf16": (bool, None),
    "do_train": (bool, None),
    "do_eval": (bool, None),
    "do_predict": (bool, None),
    "pad_to_max_length": (bool, None),
    "gradient_checkpointing": (bool, None),
    "lr_scheduler_type": (str, None),
    # text-generation (train_sft.py): the LoRA adapter, or a full fine-tune with use_lora=no
    "use_lora": (bool, None),
    "lora_r": (int, 1),
    "lora_alpha": (int, 1),
    "lora_dropout": (float, 0.0),
}
#: Script arguments trainbot sets itself from these keys.
RESERVED_HYPERPARAMETERS = {
    "model_name_or_path": "model=",
    "dataset_name": "dataset=",
    "dataset_config_name": "dataset=",
    "dataset_revision": "dataset_revision=",
}
#: The task -> the script in training/ that trains it.
ENTRY_POINTS = {"question-answering": "train_qa.py", "text-classification": "train_classification.py",
                "text-generation": "train_sft.py"}
SCRIPT_ARGUMENTS_FILE = Path(__file__).parent / "data" / "script_arguments.json"
#: Folders trainbot owns: the job's output, model, checkpoint and log folders and its data channels, under
#: the names the scripts, transformers and SageMaker's `SM_*_DIR` variables give them.
BOT_PATHS = frozenset({
    "output_dir", "overwrite_output_dir", "output_data_dir", "output_intermediate_dir", "model_dir",
    "checkpoint_dir", "checkpoints_dir", "checkpoint_local_path", "checkpoint_s3_uri", "resume_from_checkpoint",
    "logging_dir", "input_dir", "input_data_dir", "input_config_dir", "channel_input_dirs", "module_dir",
    "code_dir", "source_dir", "train_dir", "training_dir", "test_dir", "eval_dir", "validation_dir",
})
#: Names whose settings would send the model, data or metrics outside the account.
OUTSIDE_PREFIXES = ("push_to_hub", "hub_", "trackio_")
REPORT_TO_ALLOWED = ("none", "tensorboard")
HP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
MAX_HYPERPARAMETERS = 100
MAX_HP_VALUE_CHARS = 2500


def show(token: object, limit: int = 40) -> str:
    """A token as it may appear in a one-line message: quoted, escaped, shortened."""
    text = repr(str(token))
    return text if len(text) <= limit else text[: limit - 4] + "...'"


# ---------------------------------------------------------------- hyperparameter values

_INT = re.compile(r"[-+]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", re.ASCII)
TRUE_WORDS = ("yes", "true", "on", "1", "y")
FALSE_WORDS = ("no", "false", "off", "0", "n")


def parse_bool(raw: str, key: str) -> bool:
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise SpecError(f"{key} takes yes or no (also true/false, on/off), not {show(raw)}.")


def parse_int(raw: str, key: str) -> int:
    if _INT.fullmatch(raw.strip()) and len(raw) < 20:
        return int(raw)
    raise SpecError(f"{key} takes a whole number, not {show(raw)}.")


def parse_float(raw: str, key: str) -> int | float:
    text = raw.strip()
    if _INT.fullmatch(text) and len(text) < 20:
        return int(text)
    if _FLOAT.fullmatch(text) and math.isfinite(float(text)):
        return float(text)
    raise SpecError(f"{key} takes a number such as 3e-5 or 0.5, not {show(raw)}.")


def auto_value(raw: str) -> HpValue:
    """A passthrough value: whole number, number, true/false, or text."""
    text = raw.strip()
    if _INT.fullmatch(text) and len(text) < 20:
        return int(text)
    if _FLOAT.fullmatch(text) and math.isfinite(float(text)):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return raw


def coerce_hyperparameter(name: str, value: object) -> HpValue:
    """A known hyperparameter's value as its type (text is parsed); SpecError when it cannot be."""
    kind, _ = KNOWN_HYPERPARAMETERS[name]
    if isinstance(value, str) and kind is not str:
        parsers = {bool: parse_bool, int: parse_int, float: parse_float}
        return parsers[kind](value, name)
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[kind]
    if not ok:
        raise SpecError(f"Hyperparameter {name} takes a {kind.__name__} value, not {show(value)}.")
    return value  # type: ignore[return-value]


def check_hyperparameters(hps: dict[str, Any]) -> dict[str, HpValue]:
    """Names, names set by keys, types and ranges of every hyperparameter (the script's names and the
    always-reserved ones are :func:`check_script_hyperparameters`)."""
    if len(hps) > MAX_HYPERPARAMETERS:
        raise SpecError(f"A job takes at most {MAX_HYPERPARAMETERS} hyperparameters, not {len(hps)}.")
    checked: dict[str, HpValue] = {}
    for name, value in hps.items():
        if not isinstance(name, str) or not HP_NAME.fullmatch(name):
            raise SpecError(f"Hyperparameter name {show(name)} is not valid: use letters, digits and _, not starting with a digit.")
        if name in RESERVED_HYPERPARAMETERS:
            raise SpecError(f"Hyperparameter {name} is set by trainbot; use {RESERVED_HYPERPARAMETERS[name]} instead.")
        checked[name] = _check_value(name, value)
    if checked.get("fp16") is True and checked.get("bf16") is True:
        raise SpecError("fp16 and bf16 cannot both be on: choose one (bf16=yes needs an A100, H100, A10G, L4 or Trainium).")
    return checked


def _check_value(name: str, value: object) -> HpValue:
    if name not in KNOWN_HYPERPARAMETERS:
        if not isinstance(value, str | int | float | bool):
            raise SpecError(f"Hyperparameter {name} must be text, a number or yes/no, not {show(value)}.")
        if isinstance(value, float) and not math.isfinite(value) or len(str(value)) > MAX_HP_VALUE_CHARS:
            raise SpecError(f"Hyperparameter {name} has an unusable value {show(value)}.")
        return value
    typed = coerce_hyperparameter(name, value)
    _, minimum = KNOWN_HYPERPARAMETERS[name]
    if isinstance(typed, int | float) and not isinstance(typed, bool):
        _check_range(name, typed, minimum)
    return typed


def _check_range(name: str, value: float, minimum: float | None) -> None:
    if not math.isfinite(value) or minimum is None:
        return
    if name in ("learning_rate", "num_train_epochs") and value <= 0:
        raise SpecError(f"{name} must be above 0, not {value}.")
    if name == "lora_dropout" and value >= 1:
        raise SpecError(f"lora_dropout is a share of the adapter's inputs dropped, below 1, not {value} (e.g. 0.05).")
    if name in ("learning_rate", "warmup_ratio") and value > 1:
        raise SpecError(f"{name} must be at most 1, not {value} (a typical learning rate is 3e-5).")
    if value < minimum:
        raise SpecError(f"{name} must be at least {minimum:g}, not {value}.")


# ---------------------------------------------------------------- what may reach a script at all


def check_reserved(name: str, value: str | None = None, *, own: bool | None = False) -> None:
    """Refuse, whatever arguments the script takes, a name that drives SageMaker's launcher (``sagemaker_*``,
    ``mp_parameters``), names a folder trainbot owns, or sends the model or data outside the account; and a
    value that is not plain text or that sends metrics out (``report_to``). One SpecError sentence.

    ``own``: a team's own script, whose folder arguments are its own to set (``hp.output_dir=/opt/ml/checkpoints``,
    as the public spot examples pass it), as long as they name a folder of the job's container (``/opt/ml/...``),
    which the local backend maps into the job's own folder. ``None``: not known yet (the grammar, before it has
    seen code=): folder names wait for the spec, which knows."""
    lower = name.lower()
    if own is None and lower in BOT_PATHS:
        pass
    elif own and lower in BOT_PATHS and value is not None:
        check_container_path(name, value)
    else:
        reason = _reserved_reason(lower)
        if reason is not None:
            raise SpecError(f"hp.{name} is refused: {reason}.")
    if value is None:
        return
    check_plain_text(f"hp.{name}", value)
    if value.startswith("--"):
        raise SpecError(f"hp.{name} may not start with -- ({show(value)}): the script would read it as another argument.")
    if lower == "report_to" and value.strip().lower() not in REPORT_TO_ALLOWED:
        raise SpecError(
            f"hp.report_to may be {' or '.join(REPORT_TO_ALLOWED)}, not {show(value)}: "
            "trainbot never sends metrics outside your account."
        )


#: The container's tree a team's script may name its folders in (SageMaker's ``/opt/ml``).
CONTAINER_ROOT = "/opt/ml/"


def check_container_path(name: str, value: str) -> None:
    """A team's folder argument names a folder of the job's container: ``/opt/ml/...`` without ``..``."""
    text = value.strip()
    if not text.startswith(CONTAINER_ROOT) or ".." in text.split("/") or len(text) > 200:
        raise SpecError(
            f"hp.{name} must name a folder of the job's container, such as /opt/ml/model or /opt/ml/checkpoints "
            f"(SageMaker keeps and uploads those; the local backend maps them into the job's folder), not {show(value)}."
        )


def _reserved_reason(lower: str) -> str | None:
    if lower.startswith("sagemaker_"):
        return "names starting with sagemaker_ drive SageMaker's launcher, which trainbot sets from distribution= and the other keys"
    if lower == "mp_parameters":
        return "model-parallel settings come from partitions=, microbatches= and mp.* with distribution=model"
    if lower in BOT_PATHS:
        return "trainbot sets the job's output, model, checkpoint, log and data folders itself"
    if lower.startswith(OUTSIDE_PREFIXES):
        return "trainbot never sends the model or data outside your account (no hub pushes or outside trackers)"
    return None


#: Characters that are not plain text: C0/C1 controls (NUL included), lone surrogates, and the bidi
#: overrides and isolates that make a card show something other than what runs.
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def check_plain_text(key: str, value: str) -> None:
    """SpecError naming ``key`` when ``value`` holds a control character."""
    for char in value:
        if char in _BIDI_CONTROLS or unicodedata.category(char) in ("Cc", "Cs"):
            raise SpecError(
                f"{key} has a control character (U+{ord(char):04X}) in its value: values are plain text, type it without one."
            )


def check_launch_hyperparameters(hps: Mapping[str, object], *, own: bool = False) -> None:
    """The backends' last look before a launch: no reserved name or value, however the plan was made (``own``:
    a team's script, which may name its folders in the container, check_reserved)."""
    for name, value in hps.items():
        check_reserved(str(name), _value_text(value), own=own)


# ---------------------------------------------------------------- the script's own arguments


@cache
def _script_argument_file() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SCRIPT_ARGUMENTS_FILE.read_text(encoding="utf-8"))
    return data


@cache
def script_arguments(task: str | None = None) -> frozenset[str]:
    """The names the task's script takes (any script's when ``task`` is None): its own dataclasses and
    ``TrainingArguments`` of every transformers line listed (the scripts' compat layer maps renamed ones),
    less the reserved names."""
    data = _script_argument_file()
    scripts = [ENTRY_POINTS[task]] if task in ENTRY_POINTS else list(data["scripts"])
    names = {name for script in scripts for name in data["scripts"][script]}
    for listed in data["training_arguments"].values():
        names.update(listed)
    return frozenset(name for name in names if _reserved_reason(name.lower()) is None)


def check_script_argument(name: str, task: str | None = None) -> None:
    """SpecError, with the nearest name, when the task's script (any script without a task) lacks ``name``."""
    if name in script_arguments(task):
        return
    script = f"the {task} script ({ENTRY_POINTS[task]})" if task in ENTRY_POINTS else "the training scripts"
    candidates = sorted(script_arguments(task) - set(RESERVED_HYPERPARAMETERS))
    close = difflib.get_close_matches(name.lower(), candidates, n=1, cutoff=0.6)
    hint = (
        f"did you mean hp.{close[0]}?"
        if close
        else "hp.NAME takes its model and data arguments and transformers' TrainingArguments, e.g. hp.warmup_steps=100."
    )
    raise SpecError(f"hp.{name} is not an argument of {script}: {hint}")


def check_script_hyperparameters(hps: Mapping[str, object], task: str | None, *, any_script: bool = False) -> None:
    """Every name is one the task's script takes and none is reserved; every value is plain text.
    ``any_script``: a team's own script (code=), whose names trainbot cannot know: only the reserved are refused."""
    for name, value in hps.items():
        check_reserved(name, _value_text(value), own=any_script)
        if not any_script:
            check_script_argument(name, task)


def _value_text(value: object) -> str:
    """A value as the script will read it: text as is, yes/no as true/false, numbers as digits."""
    return value if isinstance(value, str) else json.dumps(value)

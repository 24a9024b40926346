"""Hyperparameters: the typed catalogue, the names trainbot reserves, and how raw values become typed ones.

A known hyperparameter (``KNOWN_HYPERPARAMETERS``) is parsed to its type and range-checked; any other valid
name passes through to the training script with its value read as a number, true/false or text.
"""

from __future__ import annotations

import math
import re
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
}
#: Set by trainbot itself from model=, dataset= and the job's folders.
RESERVED_HYPERPARAMETERS = {
    "model_name_or_path": "model=",
    "dataset_name": "dataset=",
    "dataset_config_name": "dataset=",
    "dataset_revision": "dataset_revision=",
    "output_dir": "nothing (the job's output folder is fixed)",
}
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
    """Names, reserved names, types and ranges of every hyperparameter."""
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
    if name in ("learning_rate", "warmup_ratio") and value > 1:
        raise SpecError(f"{name} must be at most 1, not {value} (a typical learning rate is 3e-5).")
    if value < minimum:
        raise SpecError(f"{name} must be at least {minimum:g}, not {value}.")


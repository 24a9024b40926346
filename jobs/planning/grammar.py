"""The slash grammar: ``/train [PRESET] key=value ...`` -> JobSpec, and ``help`` / ``help KEY``.

Text is read as Slack sends it (curly quotes, dashes, non-breaking spaces, HTML escapes), split as a shell
would (quoted values keep their spaces), and every failure is one SpecError sentence naming the bad token.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from jobs.errors import SpecError
from jobs.planning.hyperparameters import (
    HP_NAME,
    KNOWN_HYPERPARAMETERS,
    HpValue,
    auto_value,
    check_plain_text,
    check_reserved,
    check_script_argument,
    coerce_hyperparameter,
    parse_bool,
    parse_float,
    parse_int,
    show,
)
from jobs.planning.job_environment import check_name as check_environment_name
from jobs.planning.job_environment import check_value as check_environment_value
from jobs.planning.metrics import parse_metrics_value
from jobs.planning.own_code import check_entry, parse_code
from jobs.planning.presets import DESCRIPTIONS, PRESETS, preset_fields
from jobs.planning.spec import (
    CHANNEL_KEYS,
    DEFAULT_MAX_INSTANCES,
    MP_ENUMS,
    MP_INTS,
    MP_KEYS,
    JobSpec,
    check_channels,
    spec_from_fields,
)

COMMAND = "/train"
EXAMPLE = "/train bert-squad instances=4 spot=yes"

#: A team recipe's name -> its saved /train arguments (None: no such recipe); see jobs.recipes.
RecipeLookup = Callable[[str], str | None]

_SLACK_TRANSLATION = str.maketrans(
    {
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb", '"'),
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032", "'"),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u00a0\u2002\u2003\u2007\u2009\u200a\u202f\u205f\u3000", " "),
        **dict.fromkeys("\u200b\u200c\u200d\u2060\ufeff", ""),
    }
)


#: `--spot=yes`, and `—spot=yes` as Slack turns a typed `--` into an em-dash: a key written as an option.
_DASHED_KEY = re.compile(r"(?<!\S)-{1,2}(?=[A-Za-z][A-Za-z0-9_.-]*=)")


def plain_punctuation(text: str) -> str:
    """Curly quotes, dashes and odd spaces as plain ones, and `--key=value` as `key=value`. Safe to apply
    more than once (the grammar applies it to whatever reaches it, the CLI's text included)."""
    return _DASHED_KEY.sub("", text.translate(_SLACK_TRANSLATION))


def normalize_slack_text(text: str) -> str:
    """A command's text as Slack sends it, read once at the entrance (handlers.router): plain punctuation,
    and Slack's &amp; &lt; &gt; unescaped. Not safe twice (`&amp;lt;`, a typed `&lt;`, would become `<`)."""
    text = plain_punctuation(text)
    if "&" in text:
        text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return text


# ---------------------------------------------------------------- value readers

_DURATION_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_DURATION = re.compile(r"(?:[0-9]{1,9}\s*(?:d|days?|h|hrs?|hours?|m|mins?|minutes?|s|secs?|seconds?)\s*)+", re.ASCII)
_DURATION_PART = re.compile(r"([0-9]+)\s*([a-z])[a-z]*", re.ASCII)
_VERSION = re.compile(r"[0-9]{1,3}(?:\.[0-9]{1,3}){1,2}", re.ASCII)


def parse_duration(raw: str, key: str) -> int:
    """``3600``, ``90m``, ``2h``, ``1h30m``, ``1d`` -> seconds."""
    text = raw.strip().lower()
    if text.isascii() and text.isdigit() and len(text) <= 9:
        return int(text)
    if _DURATION.fullmatch(text):
        return sum(int(n) * _DURATION_UNITS[unit] for n, unit in _DURATION_PART.findall(text))
    raise SpecError(f"{key} takes a duration such as 3600, 90m, 2h or 1h30m, not {show(raw)}.")


def _text(raw: str, key: str) -> str:
    return raw


def _choice(words: dict[str, str]) -> Callable[[str, str], str]:
    def read(raw: str, key: str) -> str:
        value = words.get(raw.strip().lower().replace("_", "-"))
        if value is None:
            valid = ", ".join(dict.fromkeys(words.values()))
            raise SpecError(f"{key} must be one of {valid}, not {show(raw)}.")
        return value

    return read


def _version(raw: str, key: str) -> str:
    text = raw.strip().lower().removeprefix("pt").removeprefix("v")
    if not _VERSION.fullmatch(text):
        raise SpecError(f"{key} takes a version number such as 4.28.1 or 2.0.0, not {show(raw)}.")
    return text


def _minutes(raw: str, key: str) -> float:
    return float(parse_float(raw, key))


def _py_version(raw: str, key: str) -> str:
    text = raw.strip().lower().removeprefix("python").removeprefix("py").replace(".", "")
    if not (text.isascii() and text.isdigit() and 2 <= len(text) <= 3):
        raise SpecError(f"{key} takes a Python version such as py310 or 3.10, not {show(raw)}.")
    return f"py{text}"


def _code(raw: str, key: str) -> str:
    text = raw.strip()
    parse_code(text)
    return text


def _entry(raw: str, key: str) -> str:
    return check_entry(raw.strip())


def _metrics(raw: str, key: str) -> dict[str, str]:
    return parse_metrics_value(raw, key)


#: A SageMaker Model Package Group name (the registry's model lines).
REGISTRY_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}", re.ASCII)


def _registry(raw: str, key: str) -> str:
    name = raw.strip()
    if not REGISTRY_NAME.fullmatch(name):
        raise SpecError(f"{key} takes a model line's name of letters, digits and hyphens (at most 63, e.g. "
                        f"registry=sentiment), not {show(raw)}.")
    return name


TASK_WORDS = {
    "question-answering": "question-answering", "qa": "question-answering",
    "text-classification": "text-classification", "classification": "text-classification",
    "tc": "text-classification", "cls": "text-classification",
    "text-generation": "text-generation", "generation": "text-generation", "sft": "text-generation",
    "llm": "text-generation", "causal-lm": "text-generation",
}
DISTRIBUTION_WORDS = {
    "none": "none", "no": "none", "off": "none", "single": "none",
    "data": "data", "dp": "data", "smddp": "data", "dataparallel": "data", "data-parallel": "data",
    "model": "model", "mp": "model", "smp": "model", "modelparallel": "model", "model-parallel": "model",
    "ddp": "ddp", "torchrun": "ddp", "torch-distributed": "ddp",
    "fsdp": "fsdp", "fully-sharded": "fsdp",
}

NOTIFY_WORDS = {"dm": "dm", "none": "none", "no": "none", "off": "none"}


# ---------------------------------------------------------------- the keys


@dataclass(frozen=True)
class Key:
    """One ``key=value`` the grammar reads; ``target`` says where the value goes."""

    name: str
    read: Callable[[str, str], Any]
    help: str
    aliases: tuple[str, ...] = ()
    target: str = "spec"  # "spec", "hp" (hyperparameters) or "mp" (model-parallel parameters)
    flag: bool = False  # a bare word sets it to yes

    @property
    def param(self) -> str:
        """The name inside its target: ``mp.pipeline`` -> ``pipeline``."""
        return self.name.removeprefix("mp.")


def _spec_keys() -> list[Key]:
    return [
        Key("task", _choice(TASK_WORDS), "question-answering, text-classification or text-generation (inferred from "
            "known datasets)."),
        Key("model", _text, "the model to fine-tune: a hub id (bert-base-uncased), or an s3:// or local path."),
        Key("dataset", _text, "squad, squad_v2, imdb, mnli (GLUE), sst2, ... or NAME:CONFIG of any hub dataset."),
        Key("train_data", _text, "an s3:// prefix or local folder of training data, used instead of dataset "
            "(the train channel, SM_CHANNEL_TRAIN).", ("data",)),
        Key("test_data", _text, "an s3:// prefix or local folder: the test channel (SM_CHANNEL_TEST)."),
        Key("validation_data", _text, "an s3:// prefix or local folder: the validation channel (SM_CHANNEL_VALIDATION).",
            ("eval_data",)),
        Key("dataset_revision", _text, "the dataset revision (branch, tag or commit) to train on.", ("revision",)),
        Key("instance_type", _text, "the SageMaker instance type, e.g. ml.p3.2xlarge, ml.p3.16xlarge, ml.g5.xlarge.", ("type", "instance")),
        Key("instance_count", parse_int, "how many instances, 1 to TRAINBOT_MAX_INSTANCES.", ("instances", "count")),
        Key("distribution", _choice(DISTRIBUTION_WORDS), "none, ddp (torchrun), fsdp (torchrun with the Trainer's "
            "FSDP: full shard, the model's decoder layers wrapped, activation checkpointing), or the article's legacy "
            "data (smdistributed dataparallel) and model (smdistributed modelparallel).", ("distributed", "parallel")),
        Key("spot", parse_bool, "yes to use managed spot capacity (up to 90% cheaper), with checkpoints to S3.",
            ("use_spot", "use_spot_instances"), flag=True),  # the SDK's own name, as people who know it type it
        Key("max_run", parse_duration, "the longest the training may run: 3600, 90m, 2h (default 24h).", ("runtime",)),
        Key("max_wait", parse_duration, "spot only: the wait for capacity plus the run, at least max_run (default 2 x max_run).", ("wait",)),
        Key("on_demand_fallback", parse_bool, "spot only: yes lets recovery fall back to on-demand as a last resort.", ("fallback",), flag=True),
        Key("max_restarts", parse_int, "how many times recovery may relaunch the job after capacity losses (default 5).", ("restarts",)),
        Key("transformers_version", _version, "the Hugging Face container's transformers version, e.g. 4.28.1 or "
            "5.3 (newer than the SDK's tables: launched by its image URI).", ("transformers",)),
        Key("pytorch_version", _version, "the container's PyTorch version, e.g. 2.0.0.", ("pytorch", "torch")),
        Key("py_version", _py_version, "the container's Python, e.g. py310.", ("python", "py")),
        Key("processes_per_host", parse_int, "model parallel: processes per instance (default 8).", ("processes",)),
        Key("checkpoint_minutes", _minutes, "save a checkpoint at least this often, in minutes (fractions allowed; spot default 10)."),
        Key("volume_size", parse_int, "GB of disk for the instances (default: sized to the model and its checkpoints).", ("disk",)),
        Key("notify", _choice(NOTIFY_WORDS), "dm: a direct message to you when the job ends (none: no DM at all, whatever /notify dm says)."),
        Key("code", _code, "your own training code: git+https://HOST/REPO.git@REF (a branch, tag or commit; also "
            "git+ssh:// and git+file://) or s3://BUCKET/KEY.tar.gz, from the sources in TRAINBOT_CODE_SOURCES."),
        Key("entry", _entry, "own code: the script to run, its path in the code, "
            "e.g. examples/pytorch/question-answering/run_qa.py."),
        Key("metrics", _metrics, "metrics of your own: NAME:REGEX,... with a (group) around the number (the first group is the value), "
            "e.g. metrics='f1:eval_f1=([0-9.]+)'."),
        Key("registry", _registry, "the model line (Model Package Group) its model is registered in; "
            "default: its schedule's name, else trainbot-TASK. /models lists them."),
    ]


_MP_HELP = "model parallel (smdistributed modelparallel) parameter"


def _read_mp(name: str) -> Callable[[str, str], HpValue]:
    if name in MP_ENUMS:
        return _choice({word: word for word in MP_ENUMS[name]})
    return parse_int if name in MP_INTS else parse_bool


def _hp_keys() -> list[Key]:
    aliases = {
        "num_train_epochs": ("epochs",),
        "per_device_train_batch_size": ("batch_size",),
        "per_device_eval_batch_size": ("eval_batch_size",),
        "learning_rate": ("lr",),
        "max_steps": ("steps",),  # none or -1: no cap, the full epochs
        "max_seq_length": ("seq_len", "max_length"),
    }
    keys = []
    for name, (kind, _) in KNOWN_HYPERPARAMETERS.items():
        keys.append(Key(name, _hp_reader(name), f"training argument ({kind.__name__}).", aliases.get(name, ()), "hp", kind is bool))
    return keys


def _hp_reader(name: str) -> Callable[[str, str], HpValue | None]:
    return lambda raw, key: None if _is_uncapped(name, raw) else coerce_hyperparameter(name, raw)


#: ``max_steps=none`` (or -1, as the Trainer reads it) removes a preset's step cap: the full epochs train.
_NO_STEP_CAP = ("none", "-1", "off", "no")


def _is_uncapped(name: str, raw: str) -> bool:
    return name == "max_steps" and raw.strip().lower() in _NO_STEP_CAP


def _mp_keys() -> list[Key]:
    keys = []
    for name in MP_KEYS:
        choices = f" ({'/'.join(MP_ENUMS[name])})" if name in MP_ENUMS else ""
        aliases = (f"mp.{name}",) if name in ("partitions", "microbatches") else ()
        keys.append(Key(name if aliases else f"mp.{name}", _read_mp(name), _MP_HELP + choices + ".", aliases, "mp"))
    return keys


@cache
def keys() -> dict[str, Key]:
    """Every name and alias the grammar reads -> its Key."""
    table: dict[str, Key] = {}
    for key in _spec_keys() + _hp_keys() + _mp_keys():
        for word in (key.name, *key.aliases):
            table[word] = key
    return table


@cache
def _suggestion_words() -> list[str]:
    return [*keys(), *PRESETS, "help"]


def _nearest(word: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(word.lower(), candidates, n=1, cutoff=0.6)
    return f"did you mean {close[0]}? " if close else ""


# ---------------------------------------------------------------- parsing


@dataclass
class _Command:
    """What the tokens said so far: the fields, and which token set each one."""

    fields: dict[str, Any]
    preset: str | None = None  # the preset or team recipe the command started from
    given: dict[str, str] = field(default_factory=dict)  # canonical key -> the token that set it


def tokenize(text: str) -> list[str]:
    """Split as a shell would, with plain punctuation (the entrance unescaped Slack's text); the leading
    ``/train`` is dropped."""
    try:
        tokens = shlex.split(plain_punctuation(text))
    except ValueError:
        raise SpecError(
            'The command has an unbalanced quote: close it, e.g. hp.run_name="my run".'
        ) from None
    if tokens and tokens[0].lower() in (COMMAND, COMMAND[1:]):
        tokens = tokens[1:]
    return tokens


def parse_command(
    text: str, *, max_instances: int = DEFAULT_MAX_INSTANCES, recipes: RecipeLookup | None = None
) -> JobSpec:
    """``/train [PRESET|RECIPE] key=value ...`` -> a validated JobSpec; SpecError (one sentence) otherwise.

    ``recipes`` looks a team recipe up by name; its saved arguments are read first, and the keys typed
    after its name override them, as they override a preset's."""
    return spec_from_fields(parse_fields(text, recipes=recipes), max_instances=max_instances)


def parse_fields(text: str, *, recipes: RecipeLookup | None = None) -> dict[str, Any]:
    """The raw spec fields of a command (before validation)."""
    tokens = tokenize(text)
    if not tokens:
        raise SpecError(f"Type a preset ({', '.join(PRESETS)}) and key=value options, e.g. {EXAMPLE}, or help.")
    if tokens[0].lower() == "help":
        raise SpecError(f"help is not a job: {COMMAND} help lists the keys and presets; to train, e.g. {EXAMPLE}.")
    command = _start(tokens[0], recipes)
    for token in tokens[1:] if command.preset else tokens:
        _apply(command, token)
    _drop_inapplicable_preset_fields(command)
    if command.fields.get("code") is None:  # the bot's scripts: only names they take (own code: its own)
        for slot in command.given:
            if slot.startswith("hp."):
                check_reserved(slot[3:])  # the job's folders are the bot's to set for its own scripts
                check_script_argument(slot[3:])  # against every script here; the task's once the spec is whole
    return command.fields


def _start(first: str, recipes: RecipeLookup | None) -> _Command:
    if first in PRESETS:
        return _Command(fields=preset_fields(first), preset=first)
    recipe = recipes(first) if recipes is not None and "=" not in first else None
    if recipe is not None:
        # The recipe's own arguments are a base layer: keys typed after its name override them.
        return _Command(fields=parse_fields(recipe), preset=first)
    if "=" not in first and lookup_key(first) is None:
        recipe_hint = " and this team's recipes (/recipe list)" if recipes is not None else ""
        raise SpecError(
            f"Unknown preset {show(first)}: {_nearest(first, [*PRESETS, *keys()])}"
            f"the presets are {', '.join(PRESETS)}{recipe_hint}, and options are key=value (see {COMMAND} help)."
        )
    return _Command(fields={})


def lookup_key(word: str) -> Key | None:
    """The key ``word`` names as the grammar reads it: any case, ``-`` and ``_`` alike, leading dashes dropped."""
    return keys().get(word.lower().lstrip("-").replace("-", "_"))


def _apply(command: _Command, token: str) -> None:
    name, has_value, raw = token.partition("=")
    if name.lower().startswith("hp."):
        _set(command, "hp", _passthrough(name[3:], raw, token), name[3:], token)
        return
    if name.lower().startswith("channel."):
        _apply_channel(command, name[len("channel."):], raw, token)
        return
    if name.lower().startswith("env."):
        variable = name[len("env."):]
        check_environment_name(variable)
        if not has_value:
            raise SpecError(f"env.{variable} needs a value, e.g. env.{variable}=VALUE.")
        _set(command, "env", check_environment_value(variable, raw), variable, token)
        return
    key = lookup_key(name)
    if key is None:
        raise SpecError(f"Unknown key {show(name)}: {_nearest(name, _suggestion_words())}see {COMMAND} help for the keys.")
    try:
        check_plain_text(key.name, raw)
        if not has_value:
            if not key.flag:
                raise SpecError(f"{key.name} needs a value, e.g. {key.name}=VALUE (see {COMMAND} help {key.name}).")
            raw = "yes"
        if not raw.strip():
            raise SpecError(f"{key.name} needs a value after =, e.g. {key.name}=VALUE (see {COMMAND} help {key.name}).")
        _set(command, key.target, key.read(raw, key.name), key.param, token)
    except SpecError as exc:
        if exc.field is None and key.target == "spec":
            exc.field = key.param  # the token's own key: a form shows the sentence under that field
        raise


def _apply_channel(command: _Command, name: str, raw: str, token: str) -> None:
    """``channel.NAME=URI``; the train, test and validation channels are the same slots as their keys."""
    check_plain_text(f"channel.{name}", raw)
    if not raw.strip():
        raise SpecError(f"channel.{name} needs an s3:// prefix or a local folder after =, e.g. channel.{name}=s3://BUCKET/PREFIX.")
    if name.lower() in CHANNEL_KEYS:
        _set(command, "spec", raw.strip(), CHANNEL_KEYS[name.lower()], token)
        return
    check_channels({name: raw.strip()})
    _set(command, "channel", raw.strip(), name, token)


def _passthrough(name: str, raw: str, token: str) -> HpValue | None:
    if not HP_NAME.fullmatch(name):
        raise SpecError(f"{show(token)}: hp.NAME needs a NAME of letters, digits and _ (not starting with a digit).")
    # Whatever the script; a team's script may name its container folders (hp.output_dir=/opt/ml/...), which the
    # bot's scripts may not: those are checked once code= is known (parse_fields, and the spec).
    check_reserved(name, raw, own=None)
    if _is_uncapped(name, raw):
        return None
    if name in KNOWN_HYPERPARAMETERS:
        return coerce_hyperparameter(name, raw)
    return auto_value(raw)


def _set(command: _Command, target: str, value: Any, name: str, token: str) -> None:
    slot = name if target == "spec" else f"{target}.{name}"
    if slot in command.given:
        raise SpecError(f"{name} is given twice ({show(command.given[slot])} and {show(token)}): keep one.")
    command.given[slot] = token
    if target == "spec":
        command.fields[name] = value
        return
    group = {"hp": "hyperparameters", "mp": "mp_parameters", "channel": "channels", "env": "environment"}[target]
    values = {**(command.fields.get(group) or {}), name: value}
    command.fields[group] = {k: v for k, v in values.items() if v is not None}  # None: the key removed


def _drop_inapplicable_preset_fields(command: _Command) -> None:
    """Keys after a preset override it: drop what the preset set that no longer fits the override."""
    if command.preset is None:
        return
    fields, given = command.fields, command.given
    if "max_wait" not in given and (
        fields.get("spot") is False or ("max_run" in given and fields.get("max_wait", 0) < fields.get("max_run", 0))
    ):
        fields.pop("max_wait", None)
    if fields.get("distribution") != "model":
        if not any(slot.startswith("mp.") for slot in given):
            fields.pop("mp_parameters", None)
        if "processes_per_host" not in given:
            fields.pop("processes_per_host", None)


# ---------------------------------------------------------------- help


def help_for(text: str) -> str | None:
    """Help text for ``help`` or ``help KEY`` (also a preset name); None for anything else."""
    lowered = text.lower()
    if "help" not in lowered and "-h" not in lowered and "?" not in lowered:
        return None  # no first word can ask for help: spare the shell split (every /train ack asks this)
    try:
        tokens = tokenize(text)
    except SpecError:
        return None
    if not tokens or tokens[0].lower() not in ("help", "--help", "-h", "?"):
        return None
    return general_help() if len(tokens) == 1 else topic_help(tokens[1])


def topic_help(word: str) -> str:
    if word in PRESETS:
        return f"{word}: {DESCRIPTIONS[word]}. Keys typed after it override it, e.g. {COMMAND} {word} spot=yes."
    if word.lower().startswith("channel."):
        return (
            "channel.NAME=URI adds a data channel: an s3:// prefix on SageMaker, a local folder on the local backend; "
            "the script finds it as SM_CHANNEL_<NAME> (train_data=, test_data= and validation_data= are the usual three)."
        )
    if word.lower().startswith("env."):
        return (
            "env.NAME=VALUE sets a variable of the job's environment, as the estimator's environment= does "
            "(e.g. env.NCCL_DEBUG=INFO); never SM_*, SAGEMAKER_*, AWS_*, TRAINBOT_* or a secret."
        )
    if word.lower().startswith("hp."):
        return (
            "hp.NAME=VALUE passes an argument of the training script through as is: its model and data arguments "
            "or transformers' TrainingArguments, never sagemaker_*, the job's folders, hub pushes or outside trackers."
        )
    key = lookup_key(word)
    if key is None:
        return f"No key {show(word)}: {_nearest(word, _suggestion_words())}{COMMAND} help lists them all."
    aliases = f" (also {', '.join(key.aliases)})" if key.aliases else ""
    return f"{key.name}{aliases}: {key.help}"


HELP_USAGE = f"{COMMAND} [PRESET] key=value ...   e.g. {EXAMPLE}"
HELP_KEY = f"{COMMAND} help KEY explains one key, e.g. {COMMAND} help spot."


@cache
def help_parts() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The help as (title, lines) parts, in order: a chat surface shows each as a section of its own."""
    mp_rest = ", ".join(f"mp.{n}" for n in MP_KEYS if n not in ("partitions", "microbatches"))
    return (
        ("Presets", tuple(f"{name}: {DESCRIPTIONS[name]}" for name in PRESETS)),
        ("Keys", tuple(f"{k.name}{' (' + ', '.join(k.aliases) + ')' if k.aliases else ''}: {k.help}"
                       for k in _spec_keys())),
        ("Training arguments", (
            ", ".join(KNOWN_HYPERPARAMETERS) + " (epochs, batch_size, lr are short for the first ones);",
            "hp.NAME=VALUE passes any other argument of the training script through (its own or TrainingArguments).",
        )),
        ("Channels", ("channel.NAME=URI adds the data channel SM_CHANNEL_<NAME> (besides train_data, test_data, "
                      "validation_data).",)),
        ("Environment", ("env.NAME=VALUE sets a variable of the job's environment (the estimator's environment=).",)),
        ("Model parallel", (f"partitions, microbatches, {mp_rest}.",)),
        ("Values", ("Durations: 3600, 90m, 2h, 1h30m. Yes/no: yes, no, true, false, on, off. Quote values with spaces.",)),
    )


@cache
def general_help() -> str:
    lines = [HELP_USAGE]
    for title, part in help_parts():
        lines += [f"{title}:", *(f"  {line}" for line in part)]
    lines.append(HELP_KEY)
    return "\n".join(lines)

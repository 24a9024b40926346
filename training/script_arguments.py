"""The scripts' command line: the model and data arguments, SageMaker's extras dropped, our defaults
added, and `UsageError` for anything the user got wrong (the script exits 2)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import compat

DEFAULT_CHECKPOINT_DIR = "/opt/ml/checkpoints"


class UsageError(Exception):
    """Bad arguments or missing input: one line on stderr, exit 2."""


# `Optional[X]`, not `X | None`: transformers 4.28's HfArgumentParser (the smdistributed containers')
# cannot read PEP 604 unions and fails before the script starts.
@dataclass
class ScriptArguments:
    """Model and data arguments (the rest are the installed `TrainingArguments`)."""

    model_name_or_path: Optional[str] = field(default=None, metadata={"help": "hub id or local folder"})
    tokenizer_name: Optional[str] = field(default=None, metadata={"help": "defaults to the model's"})
    dataset_name: Optional[str] = field(default=None, metadata={"help": "used when no SM_CHANNEL_TRAIN is set"})
    dataset_config_name: Optional[str] = field(default=None)
    dataset_revision: Optional[str] = field(default=None, metadata={"help": "branch, tag or commit of --dataset_name"})
    max_seq_length: Optional[int] = field(default=None, metadata={"help": "QA 384, classification 128"})
    doc_stride: int = field(default=128)
    max_answer_length: int = field(default=30)
    n_best_size: int = field(default=20)
    pad_to_max_length: bool = field(default=False, metadata={"help": "else dynamic padding per batch"})
    max_train_samples: Optional[int] = field(default=None)
    max_eval_samples: Optional[int] = field(default=None)
    max_predict_samples: Optional[int] = field(default=None)
    num_labels: Optional[int] = field(default=None, metadata={"help": "classification; else from the data"})
    checkpoint_dir: str = field(default=DEFAULT_CHECKPOINT_DIR)
    checkpoint_minutes: Optional[float] = field(
        default=None, metadata={"help": "save a checkpoint at least this often (minutes), besides save_steps"}
    )
    log_samples: bool = field(
        default=False,
        metadata={"help": "print the ids of the examples each step trains, a `[samples]` line a process a step"},
    )


@dataclass
class SftArguments:
    """train_sft.py's own: the LoRA adapter (PEFT), or a full fine-tune, and what the model folder holds."""

    use_lora: bool = field(default=True, metadata={"help": "train a LoRA adapter; False: every weight (e.g. under FSDP)"})
    lora_r: int = field(default=16, metadata={"help": "the adapter's rank"})
    lora_alpha: int = field(default=32)
    lora_dropout: float = field(default=0.05)
    lora_target_modules: str = field(
        default="all-linear", metadata={"help": "comma-separated module names, or all-linear (PEFT's)"}
    )
    merge_adapter: bool = field(
        default=True,
        metadata={"help": "save the base model with the adapter merged in (what a text-generation server loads); "
                          "the adapter alone goes to its adapter/ folder"},
    )


def _drop_sagemaker_args(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token.startswith("--sagemaker_"):
            if "=" not in token and i < len(argv) and not argv[i].startswith("--"):
                i += 1
            continue
        out.append(token)
    return out


def _cpu_only_multiprocess() -> bool:
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    import torch

    return not torch.cuda.is_available()


#: What the scripts pass unless told otherwise.
DEFAULTS = {
    "report_to": ["none"],
    "disable_tqdm": ["True"],
    "save_strategy": ["steps"],
    "remove_unused_columns": ["False"],  # our datasets hold model inputs only; the collator drops the rest
}


def parse_args(argv: Sequence[str], prog: str) -> tuple[ScriptArguments, Any]:
    """(script arguments, TrainingArguments). Raises UsageError for anything the user got wrong."""
    from transformers import TrainingArguments

    script_args, training_args = parse_all(argv, prog, (ScriptArguments, TrainingArguments), DEFAULTS)
    return script_args, training_args


def parse_all(argv: Sequence[str], prog: str, classes: Sequence[type], defaults: dict[str, list[str]]) -> tuple[Any, ...]:
    """One instance of each of ``classes`` (``ScriptArguments`` first, a ``TrainingArguments`` class last), with
    ``defaults`` for the options not given. Raises UsageError for anything the user got wrong."""
    from transformers import HfArgumentParser

    class _Parser(HfArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise UsageError(message)

    parser = _Parser(tuple(classes), prog=prog)
    known = {a.dest for a in parser._actions}
    args = compat.translate_argv(_drop_sagemaker_args(argv), known)
    given = {a[2:].split("=")[0] for a in args if a.startswith("--")}
    for name, value in defaults.items():
        if name not in given:
            args += [f"--{name}", *value]
    if "output_dir" not in given:
        args += ["--output_dir", os.environ.get("SM_MODEL_DIR", "output")]
    if _cpu_only_multiprocess():
        if not given & {"use_cpu", "no_cuda"}:
            # accelerate sets up DDP over gloo on a GPU-less machine only when told it is CPU training.
            args += ["--use_cpu" if "use_cpu" in known else "--no_cuda", "True"]
        if "xpu_backend" in known and "xpu_backend" not in given:
            args += ["--xpu_backend", "gloo"]  # 4.28 refuses CPU DDP without a named backend
    if "do_train" not in given and "do_eval" not in given and "do_predict" not in given:
        args += ["--do_train", "--do_eval"]
    try:
        *parsed, rest = parser.parse_args_into_dataclasses(args=args, return_remaining_strings=True)
    except ValueError as exc:  # TrainingArguments.__post_init__ checks
        raise UsageError(str(exc).strip().splitlines()[0]) from None
    if rest:
        raise UsageError(f"unrecognized arguments: {' '.join(rest)}")
    if not parsed[0].model_name_or_path:
        raise UsageError("--model_name_or_path is required")
    return tuple(parsed)

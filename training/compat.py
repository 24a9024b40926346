"""The one place that knows how transformers 4.28+ and 5.x differ for these scripts.

- `eval_strategy` (4.41+, 5.x) was `evaluation_strategy`;
- `use_cpu` (4.35+, 5.x) was `no_cuda`;
- `warmup_ratio` is gone in 5.x: `warmup_steps` takes a float in [0, 1) as a ratio instead;
- `logging_dir`, `overwrite_output_dir` and a few other fields are gone in 5.x;
- `Trainer(processing_class=...)` (4.46+, 5.x) was `Trainer(tokenizer=...)`;
- `save_safetensors` (4.30+) does not exist in 4.28, whose `save_model` writes `pytorch_model.bin`;
- `from_pretrained(dtype=...)` (4.56+, 5.x) was `torch_dtype=...`.

Arguments are translated on the command line, before parsing, so that the parser of whichever
`TrainingArguments` is installed sees only names it knows.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path
from typing import Any

# old name -> new name; whichever one the installed version lacks is rewritten to the other.
_RENAMED = {"evaluation_strategy": "eval_strategy", "no_cuda": "use_cpu"}
# Fields some versions removed and that carry no meaning for these scripts: dropped with a note.
_DROPPABLE = {
    "logging_dir",
    "overwrite_output_dir",
    "push_to_hub_token",
    "per_gpu_train_batch_size",
    "per_gpu_eval_batch_size",
    "fp16_backend",
    "sharded_ddp",
    "tpu_num_cores",
    "use_mps_device",
    "jit_mode_eval",
    "use_ipex",
    "include_inputs_for_metrics",
    "save_safetensors",
}


def _split(token: str) -> tuple[str, str | None]:
    name, sep, value = token[2:].partition("=")
    return name, (value if sep else None)


def translate_argv(argv: list[str], known: set[str]) -> list[str]:
    """Rewrite renamed TrainingArguments options to the installed version's names.

    `known` is the set of option names the installed parser accepts.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--"):
            out.append(token)
            continue
        name, inline = _split(token)
        takes_value = inline is None and i < len(argv) and not argv[i].startswith("--")
        if name in known:
            out.append(token)
            continue
        target = None
        for old, new in _RENAMED.items():
            if name == old and new in known:
                target = new
            elif name == new and old in known:
                target = old
        if name == "warmup_ratio" and "warmup_ratio" not in known and "warmup_steps" in known:
            target = "warmup_steps"  # 5.x: a float < 1 is a ratio
        if target is not None:
            out.append(f"--{target}" if inline is None else f"--{target}={inline}")
            continue
        if name in _DROPPABLE:
            print(f"note: --{name} is not used by this transformers version; ignored", file=sys.stderr)
            if takes_value:
                i += 1
            continue
        out.append(token)
    return out


def trainer_tokenizer_kwargs(trainer_cls: type, tokenizer: Any) -> dict[str, Any]:
    params = inspect.signature(trainer_cls.__init__).parameters
    return {"processing_class": tokenizer} if "processing_class" in params else {"tokenizer": tokenizer}


def dtype_kwargs(dtype: Any) -> dict[str, Any]:
    """``from_pretrained``'s keyword for the weights' dtype in the installed transformers ({} for its default)."""
    if dtype is None:
        return {}
    import transformers

    major_minor = tuple(int(p) for p in transformers.__version__.split(".")[:2] if p.isdigit())
    return {"dtype": dtype} if major_minor >= (4, 56) else {"torch_dtype": dtype}


def set_field(args: Any, name: str, value: Any) -> None:
    """Assign to TrainingArguments even in the few 4.x releases that made it frozen."""
    object.__setattr__(args, name, value)


def ensure_safetensors(model_dir: Path) -> None:
    """4.28's `save_model` writes `pytorch_model.bin`; rewrite it as `model.safetensors`."""
    bin_path = model_dir / "pytorch_model.bin"
    if (model_dir / "model.safetensors").exists() or not bin_path.exists():
        return
    import torch
    from safetensors.torch import save_file

    state = torch.load(bin_path, map_location="cpu")
    # Tied weights share storage, which safetensors refuses; each gets its own copy.
    save_file({k: v.detach().clone().contiguous() for k, v in state.items()},
              str(model_dir / "model.safetensors"), metadata={"format": "pt"})
    os.remove(bin_path)

"""What both training scripts share: arguments, data channels, checkpoints, SIGTERM, metric lines, outputs.

Runs inside SageMaker's Hugging Face containers (transformers 4.28+) and locally (5.x). Imports nothing
of the bot: this folder is uploaded on its own as the job's `source_dir`.

Contracts kept here:
- metric lines, rank 0 only, flushed: `[metric] NAME=VALUE step=STEP`;
- a progress line per logging step: `[progress] step=S max_steps=M loss=L eta_s=E`;
- exit codes: 0 done, 143 interrupted by SIGTERM (a checkpoint was saved, no final model), 2 bad input,
  1 anything else.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import compat

EXIT_OK = 0
EXIT_OTHER = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 143

#: The metric names printed as `[metric]` lines, in print order (the plan's regexes cover these).
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

_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
DEFAULT_CHECKPOINT_DIR = "/opt/ml/checkpoints"


class UsageError(Exception):
    """Bad arguments or missing input: one line on stderr, exit 2."""


@dataclass
class ScriptArguments:
    """Model and data arguments (the rest are the installed `TrainingArguments`)."""

    model_name_or_path: str | None = field(default=None, metadata={"help": "hub id or local folder"})
    tokenizer_name: str | None = field(default=None, metadata={"help": "defaults to the model's"})
    dataset_name: str | None = field(default=None, metadata={"help": "used when no SM_CHANNEL_TRAIN is set"})
    dataset_config_name: str | None = field(default=None)
    max_seq_length: int | None = field(default=None, metadata={"help": "QA 384, classification 128"})
    doc_stride: int = field(default=128)
    max_answer_length: int = field(default=30)
    n_best_size: int = field(default=20)
    pad_to_max_length: bool = field(default=False, metadata={"help": "else dynamic padding per batch"})
    max_train_samples: int | None = field(default=None)
    max_eval_samples: int | None = field(default=None)
    max_predict_samples: int | None = field(default=None)
    num_labels: int | None = field(default=None, metadata={"help": "classification; else from the data"})
    checkpoint_dir: str = field(default=DEFAULT_CHECKPOINT_DIR)


# ---------------------------------------------------------------------------------------------- args


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


def parse_args(argv: Sequence[str], prog: str) -> tuple[ScriptArguments, Any]:
    """(script arguments, TrainingArguments). Raises UsageError for anything the user got wrong."""
    from transformers import HfArgumentParser, TrainingArguments

    class _Parser(HfArgumentParser):
        def error(self, message: str) -> None:  # type: ignore[override]
            raise UsageError(message)

    parser = _Parser((ScriptArguments, TrainingArguments), prog=prog)
    known = {a.dest for a in parser._actions}
    args = compat.translate_argv(_drop_sagemaker_args(argv), known)
    given = {a[2:].split("=")[0] for a in args if a.startswith("--")}
    defaults = {
        "report_to": ["none"],
        "disable_tqdm": ["True"],
        "save_strategy": ["steps"],
        "remove_unused_columns": ["False"],  # our datasets hold model inputs only; the collator drops the rest
    }
    for name, value in defaults.items():
        if name not in given:
            args += [f"--{name}", *value]
    if "output_dir" not in given:
        args += ["--output_dir", os.environ.get("SM_MODEL_DIR", "output")]
    if _cpu_only_multiprocess() and not given & {"use_cpu", "no_cuda"}:
        # accelerate sets up DDP over gloo on a GPU-less machine only when told it is CPU training.
        args += ["--use_cpu" if "use_cpu" in known else "--no_cuda", "True"]
    if "do_train" not in given and "do_eval" not in given and "do_predict" not in given:
        args += ["--do_train", "--do_eval"]
    try:
        script_args, training_args, rest = parser.parse_args_into_dataclasses(
            args=args, return_remaining_strings=True
        )
    except ValueError as exc:  # TrainingArguments.__post_init__ checks
        raise UsageError(str(exc).strip().splitlines()[0]) from None
    if rest:
        raise UsageError(f"unrecognized arguments: {' '.join(rest)}")
    if not script_args.model_name_or_path:
        raise UsageError("--model_name_or_path is required")
    return script_args, training_args


# ---------------------------------------------------------------------------------------------- data


def _channel(*names: str) -> Path | None:
    for name in names:
        value = os.environ.get(name)
        if value:
            path = Path(value)
            if not path.is_dir():
                raise UsageError(f"data channel {name}={value} is not a folder")
            return path
    return None


def read_channel(folder: Path) -> list[dict]:
    """Records from every `*.jsonl` / `*.json` file in a channel folder (JSON lines, a JSON list,
    or SQuAD's nested `{"data": [...]}` layout)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json"))
    if not files:
        raise UsageError(f"data channel {folder} holds no *.jsonl or *.json files")
    records: list[dict] = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        try:
            whole = json.loads(text)
        except json.JSONDecodeError:
            whole = None
        if isinstance(whole, list):
            records.extend(whole)
        elif isinstance(whole, dict) and isinstance(whole.get("data"), list):
            records.extend(_flatten_squad(whole["data"]))
        elif isinstance(whole, dict):
            records.append(whole)
        else:
            for n, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError as exc:
                        raise UsageError(f"{path}:{n}: not JSON ({exc.msg})") from None
    return records


def _flatten_squad(articles: list[dict]) -> list[dict]:
    out = []
    for article in articles:
        for para in article.get("paragraphs", []):
            for qa in para.get("qas", []):
                out.append(
                    {
                        "id": qa["id"],
                        "title": article.get("title", ""),
                        "context": para["context"],
                        "question": qa["question"],
                        "answers": {
                            "text": [a["text"] for a in qa.get("answers", [])],
                            "answer_start": [a["answer_start"] for a in qa.get("answers", [])],
                        },
                    }
                )
    return out


def load_splits(
    script_args: ScriptArguments,
    need_train: bool,
    need_eval: bool,
    eval_splits: Sequence[str] = ("validation", "validation_matched", "test"),
) -> tuple[list[dict] | None, list[dict] | None]:
    """(train records, eval records) from the SageMaker channels, else from `datasets.load_dataset`."""
    train_dir = _channel("SM_CHANNEL_TRAIN", "SM_CHANNEL_TRAINING")
    eval_dir = _channel("SM_CHANNEL_TEST", "SM_CHANNEL_VALIDATION", "SM_CHANNEL_EVAL")
    if train_dir or eval_dir:
        if need_train and not train_dir:
            raise UsageError("--do_train needs a training channel: SM_CHANNEL_TRAIN is not set")
        if need_eval and not eval_dir:
            raise UsageError("--do_eval needs an evaluation channel: SM_CHANNEL_TEST is not set")
        train = read_channel(train_dir) if need_train and train_dir else None
        evals = read_channel(eval_dir) if need_eval and eval_dir else None
    else:
        if not script_args.dataset_name:
            raise UsageError(
                "no data: set SM_CHANNEL_TRAIN (and SM_CHANNEL_TEST) to folders of JSON-lines files,"
                " or pass --dataset_name"
            )
        try:
            import datasets
        except ImportError:
            raise UsageError(
                f"no data channel is set and the `datasets` library is not installed to load"
                f" --dataset_name {script_args.dataset_name}"
            ) from None
        raw = datasets.load_dataset(script_args.dataset_name, script_args.dataset_config_name)
        train = [dict(r) for r in raw["train"]] if need_train else None
        evals = None
        if need_eval:
            split = next((s for s in eval_splits if s in raw), None)
            if split is None:
                raise UsageError(f"dataset {script_args.dataset_name} has no split among {list(eval_splits)}")
            evals = [dict(r) for r in raw[split]]
    if train is not None and script_args.max_train_samples:
        train = train[: script_args.max_train_samples]
    if evals is not None and script_args.max_eval_samples:
        evals = evals[: script_args.max_eval_samples]
    if need_train and not train:
        raise UsageError("the training data is empty")
    if need_eval and not evals:
        raise UsageError("the evaluation data is empty")
    return train, evals


class FeatureDataset:
    """A map-style dataset over columns of equal length (lists of ints or of int sequences)."""

    def __init__(self, columns: dict[str, list]):
        self.columns = columns
        self._len = len(next(iter(columns.values())))

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = {k: v[i] for k, v in self.columns.items()}
        item["feature_idx"] = i
        return item


class PadCollator:
    """Pads token columns to the longest in the batch (or a multiple of 8), stacks scalar columns.

    Remembers the first feature indices it saw, so a run can report which shard each rank trained on.
    """

    _PAD_ZERO = ("attention_mask", "token_type_ids", "special_tokens_mask")

    def __init__(self, pad_token_id: int, pad_to_multiple_of: int | None = None, remember: int = 32):
        self.pad_token_id = pad_token_id
        self.pad_to_multiple_of = pad_to_multiple_of
        self.remember = remember
        self.seen: list[int] = []

    def __call__(self, features: list[dict]) -> dict[str, Any]:
        import numpy as np
        import torch

        ids = [f["feature_idx"] for f in features]
        if len(self.seen) < self.remember:
            self.seen.extend(ids[: self.remember - len(self.seen)])
        batch: dict[str, Any] = {}
        for key in features[0]:
            if key == "feature_idx":
                continue
            values = [f[key] for f in features]
            if isinstance(values[0], (int, np.integer)):
                batch[key] = torch.tensor(values, dtype=torch.long)
                continue
            width = max(len(v) for v in values)
            if self.pad_to_multiple_of:
                width = -(-width // self.pad_to_multiple_of) * self.pad_to_multiple_of
            pad = 0 if key in self._PAD_ZERO else self.pad_token_id
            out = np.full((len(values), width), pad, dtype=np.int64)
            for row, v in enumerate(values):
                out[row, : len(v)] = v
            batch[key] = torch.from_numpy(out)
        return batch


# ---------------------------------------------------------------------------------------------- checkpoints


def _checkpoint_complete(path: Path) -> bool:
    try:
        state = json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(state, dict) and "global_step" in state


def find_resume_checkpoint(checkpoint_dir: Path) -> tuple[Path | None, list[Path]]:
    """(newest complete checkpoint, incomplete checkpoint folders newer than it).

    Complete means `trainer_state.json` is there and parses: the Trainer writes it after the weights,
    optimizer and scheduler, so a kill mid-save leaves a folder without it (or with a torn one), which
    the stock `get_last_checkpoint` would still pick.
    """
    if not checkpoint_dir.is_dir():
        return None, []
    found = []
    for child in checkpoint_dir.iterdir():
        match = _CHECKPOINT_RE.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    incomplete: list[Path] = []
    for _, path in sorted(found, reverse=True):
        if _checkpoint_complete(path):
            return path, incomplete
        incomplete.append(path)
    return None, incomplete


def _training_done(checkpoint: Path, training_args: Any) -> bool:
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    target = training_args.max_steps if training_args.max_steps > 0 else state.get("max_steps", 0)
    return bool(target) and state["global_step"] >= target


def resolve_checkpoint_dir(script_args: ScriptArguments, output_dir: str) -> Path:
    """`--checkpoint_dir`; when it is the SageMaker default and cannot be created (a laptop), fall back
    to `<output_dir>/checkpoints`."""
    path = Path(script_args.checkpoint_dir)
    try:
        path.mkdir(parents=True, exist_ok=True)
        return path
    except OSError as exc:
        if script_args.checkpoint_dir != DEFAULT_CHECKPOINT_DIR:
            raise UsageError(f"--checkpoint_dir {path}: {exc.strerror or exc}") from None
    fallback = Path(output_dir) / "checkpoints"
    fallback.mkdir(parents=True, exist_ok=True)
    print(f"note: {DEFAULT_CHECKPOINT_DIR} is not writable here; checkpoints go to {fallback}", file=sys.stderr)
    return fallback


# ---------------------------------------------------------------------------------------------- callbacks


def _fmt(value: float) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    return f"{value:.6g}"


def metric_lines(logs: dict[str, Any], step: int) -> list[str]:
    return [
        f"[metric] {name}={_fmt(logs[name])} step={step}"
        for name in METRIC_NAMES
        if isinstance(logs.get(name), (int, float))
    ]


def make_callbacks(transformers_module: Any) -> tuple[Any, Any]:
    """(metric printer, graceful stop) callback classes, built on the installed TrainerCallback."""
    TrainerCallback = transformers_module.TrainerCallback

    class MetricPrinter(TrainerCallback):
        """Rank 0 prints `[metric]` lines and a `[progress]` line for each log."""

        def __init__(self) -> None:
            self._t0 = time.monotonic()
            self._step0 = 0

        def on_train_begin(self, args, state, control, **kwargs):
            self._t0, self._step0 = time.monotonic(), state.global_step

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            lines = metric_lines(logs, state.global_step)
            if "loss" in logs and state.max_steps:
                done = state.global_step - self._step0
                rate = (time.monotonic() - self._t0) / done if done > 0 else 0.0
                eta = max(0, state.max_steps - state.global_step) * rate
                lines.append(
                    f"[progress] step={state.global_step} max_steps={state.max_steps}"
                    f" loss={_fmt(logs['loss'])} eta_s={eta:.0f}"
                )
            if lines:
                print("\n".join(lines), flush=True)

    class GracefulStop(TrainerCallback):
        """SIGTERM -> save a checkpoint at the next step boundary and stop; the script exits 143.

        Under several processes the flag is agreed on every step (a MAX all-reduce over a gloo group),
        so all ranks stop, and save, at the same step even when the signal reaches them at different times.
        """

        def __init__(self) -> None:
            self.requested = False
            self.stopped_at: int | None = None
            self._group: Any = None
            self._distributed = False
            self._step_ended = time.monotonic()
            signal.signal(signal.SIGTERM, self._on_signal)

        def _on_signal(self, signum, frame):
            if not self.requested:
                print("[checkpoint] SIGTERM received: saving at the next step boundary", file=sys.stderr, flush=True)
            self.requested = True

        def on_train_begin(self, args, state, control, **kwargs):
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                self._distributed = True
                try:
                    self._group = None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
                except Exception:  # noqa: BLE001 - fall back to the default group
                    self._group = None

        def _agreed(self) -> bool:
            if not self._distributed:
                return self.requested
            import torch
            import torch.distributed as dist

            try:
                flag = torch.tensor([1 if self.requested else 0], dtype=torch.int32)
                if self._group is None and dist.get_backend() != "gloo":
                    flag = flag.cuda()
                dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
                return bool(flag.item())
            except Exception:  # noqa: BLE001 - e.g. smdistributed model parallel: decide locally
                return self.requested

        def on_save(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                seconds = time.monotonic() - self._step_ended
                print(f"[checkpoint] saved checkpoint-{state.global_step} in {seconds:.3f} s",
                      file=sys.stderr, flush=True)

        def on_step_end(self, args, state, control, **kwargs):
            self._step_ended = time.monotonic()
            if self._agreed():
                self.requested = True
                self.stopped_at = state.global_step
                control.should_save = True
                control.should_training_stop = True
            return control

    return MetricPrinter, GracefulStop


# ---------------------------------------------------------------------------------------------- run


def load_tokenizer(script_args: ScriptArguments) -> Any:
    """The model's tokenizer (or --tokenizer_name's); a missing one is a usage error, not a traceback."""
    import transformers

    name = script_args.tokenizer_name or script_args.model_name_or_path
    try:
        return transformers.AutoTokenizer.from_pretrained(name)
    except OSError as exc:
        raise UsageError(f"cannot load tokenizer {name}: {exc}") from None


@dataclass(frozen=True)
class RunDirs:
    checkpoints: Path  # the Trainer's output_dir: checkpoint-N folders
    model: Path  # final model and tokenizer: SM_MODEL_DIR, else --output_dir
    data: Path  # metrics.json (and predictions): SM_OUTPUT_DATA_DIR, else --output_dir


def prepare_dirs(script_args: ScriptArguments, training_args: Any) -> RunDirs:
    """Point the Trainer's output_dir at the checkpoint folder; the final model goes elsewhere."""
    out = training_args.output_dir
    dirs = RunDirs(
        checkpoints=resolve_checkpoint_dir(script_args, out),
        model=Path(os.environ.get("SM_MODEL_DIR") or out),
        data=Path(os.environ.get("SM_OUTPUT_DATA_DIR") or out),
    )
    compat.set_field(training_args, "output_dir", str(dirs.checkpoints))
    return dirs


def log_environment(training_args: Any) -> None:
    notes = {k: os.environ[k] for k in ("SM_NUM_GPUS", "SM_CURRENT_HOST", "SM_HOSTS") if k in os.environ}
    for key in ("SM_FRAMEWORK_PARAMS", "SM_HP_MP_PARAMETERS"):
        if key in os.environ:
            notes[key] = os.environ[key]
    if notes and training_args.process_index == 0:
        print(f"[env] {json.dumps(notes)}", file=sys.stderr, flush=True)


def train_and_finish(
    trainer: Any,
    graceful: Any,
    collator: PadCollator,
    script_args: ScriptArguments,
    training_args: Any,
    dirs: RunDirs,
    evaluate: Callable[[], dict[str, float]] | None,
    extra_outputs: Callable[[Path], None] | None = None,
) -> int:
    """Resume from the newest complete checkpoint, train, evaluate, write model and metrics."""
    metrics: dict[str, Any] = {}
    if training_args.do_train:
        resume, incomplete = find_resume_checkpoint(dirs.checkpoints)
        if trainer.is_world_process_zero():
            for path in incomplete:
                print(f"[checkpoint] ignoring incomplete {path}", file=sys.stderr, flush=True)
                shutil.rmtree(path, ignore_errors=True)
            if resume:
                print(f"[checkpoint] resuming from {resume}", file=sys.stderr, flush=True)
        if resume is not None and _training_done(resume, training_args):
            # The Trainer would run one extra step past max_steps when resumed from the last one.
            if trainer.is_world_process_zero():
                print(f"[checkpoint] {resume.name} already holds the final step; skipping to the end",
                      file=sys.stderr, flush=True)
            trainer._load_from_checkpoint(str(resume))
            trainer.state = type(trainer.state).load_from_json(str(resume / "trainer_state.json"))
            result = None
        else:
            result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        print(
            f"[shard] rank={training_args.process_index} world_size={training_args.world_size}"
            f" first_ids={','.join(map(str, collator.seen))}",
            file=sys.stderr,
            flush=True,
        )
        if graceful.requested:
            if trainer.is_world_process_zero():
                print(
                    f"[checkpoint] interrupted: saved step {trainer.state.global_step} in {dirs.checkpoints};"
                    " exiting 143",
                    file=sys.stderr,
                    flush=True,
                )
            return EXIT_INTERRUPTED
        if result is not None:
            metrics.update(result.metrics)
    if evaluate is not None:
        metrics.update(evaluate())
    if graceful.requested:
        return EXIT_INTERRUPTED
    model_dir, data_dir = dirs.model, dirs.data
    if training_args.do_train:
        trainer.save_model(str(model_dir))
    if trainer.is_world_process_zero():
        if training_args.do_train:
            compat.ensure_safetensors(model_dir)
            tokenizer = getattr(trainer, "processing_class", None) or getattr(trainer, "tokenizer", None)
            if tokenizer is not None and not (model_dir / "tokenizer_config.json").exists():
                tokenizer.save_pretrained(str(model_dir))
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        if extra_outputs is not None:
            extra_outputs(data_dir)
    return EXIT_OK


def main_guard(run: Callable[[list[str]], int], argv: list[str] | None = None) -> None:
    """Run a script's `run(argv)` and turn its outcome into the exit-code contract."""
    prog = Path(sys.argv[0]).name
    try:
        code = run(list(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
        code = EXIT_USAGE
    sys.stdout.flush()
    sys.exit(code)

"""What both training scripts share to run: tokenizer, output folders, callbacks, the train-evaluate-save
sequence, and the exit-code contract.

Runs inside SageMaker's Hugging Face containers (transformers 4.28+) and locally (5.x). Imports nothing
of the bot: this folder is uploaded on its own as the job's `source_dir`, so its modules import each
other as top-level modules. The rest lives beside it: `script_arguments` (command line, `UsageError`),
`data_channels` (records), `record_checks` (what a record must hold), `batches` (dataset, collator), `checkpoints` (resume, SIGTERM stop),
`metrics_log` (`[metric]` and `[progress]` lines).

Exit codes: 0 done, 143 interrupted by SIGTERM (a checkpoint was saved, no final model), 2 bad input,
1 anything else. Checkpoints are also saved on a clock (`--checkpoint_minutes`), since SageMaker's image
never delivers the SIGTERM; a resumed run says how many steps it redoes and reports whole-lineage figures.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import checkpoints
import compat
import metrics_log
from batches import PadCollator
from script_arguments import ScriptArguments, UsageError

EXIT_OK = 0
EXIT_OTHER = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 143


def make_callbacks(transformers_module: Any) -> tuple[Any, Any]:
    """(metric printer, graceful stop) callback classes, built on the installed TrainerCallback."""
    return metrics_log.make_metric_printer(transformers_module), checkpoints.make_graceful_stop(transformers_module)


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
        checkpoints=checkpoints.resolve_checkpoint_dir(script_args, out),
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
        resume, incomplete = checkpoints.find_resume_checkpoint(dirs.checkpoints)
        furthest = checkpoints.furthest_step(dirs.checkpoints)
        if trainer.is_world_process_zero():
            for path in incomplete:
                print(f"[checkpoint] ignoring incomplete {path}", file=sys.stderr, flush=True)
                shutil.rmtree(path, ignore_errors=True)
            if resume:
                print(f"[checkpoint] resuming from {resume}", file=sys.stderr, flush=True)
                _say_redone(resume, furthest)
        import transformers

        clock = checkpoints.make_checkpoint_clock(transformers)
        trainer.add_callback(clock(script_args.checkpoint_minutes, dirs.checkpoints))
        if resume is not None and checkpoints.training_done(resume, training_args):
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
        whole = metrics_log.lineage_train_loss(trainer.state.log_history)
        if whole is not None:  # the skip-to-end path has no result; a resumed one has this process's only
            metrics["train_loss"] = whole
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


def _say_redone(resume: Path, furthest: int | None) -> None:
    """How much of the interrupted run is trained again: the steps after the checkpoint it resumes from."""
    step = int(resume.name.rpartition("-")[2])
    if furthest is not None and furthest >= step:
        redone = furthest - step
        print(f"[checkpoint] the interrupted run had reached step {furthest}: {redone}"
              f" step{'' if redone == 1 else 's'} redone", file=sys.stderr, flush=True)


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

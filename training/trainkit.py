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
import logging
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import checkpoints
import compat
import hub_token
import metrics_log
from batches import SAMPLE_IDS, GlobalOrderSampler, PadCollator
from script_arguments import ScriptArguments, UsageError
from trainbot_checkpoint_folders import find_resume_checkpoint
from trainbot_rank_agreement import leave_process_group

EXIT_OK = 0
EXIT_OTHER = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 143


def make_callbacks(transformers_module: Any) -> tuple[Any, Any]:
    """(metric printer, graceful stop) callback classes, built on the installed TrainerCallback."""
    return metrics_log.make_metric_printer(transformers_module), checkpoints.make_graceful_stop(transformers_module)


def in_global_order(trainer_class: type, *, log_samples: bool = False) -> type:
    """``trainer_class`` training in `GlobalOrderSampler`'s order, so a run resumed on another number of
    processes (with the same global batch) trains the same examples at every step; with ``log_samples``
    every process prints `[samples] step=S rank=R ids=...` for each optimizer step."""
    import transformers

    class EpochOfStep(transformers.TrainerCallback):
        """Tell the sampler its epoch from the step at each epoch's start: the Trainer's own set_epoch does
        not reach a sampler behind accelerate's wrappers after the skip of a resumed epoch."""

        def __init__(self, trainer: Any) -> None:
            self.trainer = trainer

        def on_epoch_begin(self, args, state, control, **kwargs):
            sampler = self.trainer.global_sampler
            if sampler is not None:
                sampler.set_epoch(state.global_step // sampler.steps_per_epoch)

        def on_step_end(self, args, state, control, **kwargs):
            ids, self.trainer.step_ids = self.trainer.step_ids, []
            if log_samples:  # one write a line: the processes share the log, and print() writes the end apart
                sys.stderr.write(f"[samples] step={state.global_step} rank={args.process_index} "
                                 f"ids={','.join(map(str, ids))}\n")
                sys.stderr.flush()

    class GlobalOrderTrainer(trainer_class):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # The models' own losses are means over their micro-batch. Transformers 5 sees their **kwargs,
            # takes them for losses summed over num_items_in_batch, and then neither divides by the
            # accumulation nor averages over processes: the gradient grows with both (a relaunch on another
            # count would train another run). Saying they take no loss kwargs restores the plain mean.
            self.model_accepts_loss_kwargs = False
            self.global_sampler: GlobalOrderSampler | None = None
            self.step_ids: list[int] = []
            self.add_callback(EpochOfStep(self))

        def _get_train_sampler(self, train_dataset: Any = None) -> Any:  # 4.28 takes no argument, 5.x one
            dataset = self.train_dataset if train_dataset is None else train_dataset
            args = self.args
            if _asks_for_another_order(args):
                if args.process_index == 0:
                    print("[data] the Trainer's own order is used (group_by_length or train_sampling_strategy): a "
                          "resume on another number of processes may not continue in the same order",
                          file=sys.stderr, flush=True)
                return super()._get_train_sampler(*([] if train_dataset is None else [train_dataset]))
            seed = args.data_seed if getattr(args, "data_seed", None) is not None else args.seed
            self.global_sampler = GlobalOrderSampler(
                len(dataset), args.train_batch_size, args.gradient_accumulation_steps, args.world_size,
                args.process_index, seed,
            )
            return self.global_sampler

        def get_train_dataloader(self) -> Any:
            loader = super().get_train_dataloader()
            if self.global_sampler is not None:
                # accelerate (transformers 4.3x+) deals batches to processes itself; 4.28 leaves it to us.
                self.global_sampler.shard = self.args.world_size > 1 and not _dealt_by_accelerate(loader)
            return loader

        def training_step(self, model: Any, inputs: dict, *args: Any, **kwargs: Any) -> Any:
            ids = inputs.pop(SAMPLE_IDS, None)
            if ids is not None:
                self.step_ids.extend(int(i) for i in ids)
            return super().training_step(model, inputs, *args, **kwargs)

        def prediction_step(self, model: Any, inputs: dict, *args: Any, **kwargs: Any) -> Any:
            inputs.pop(SAMPLE_IDS, None)
            return super().prediction_step(model, inputs, *args, **kwargs)

    GlobalOrderTrainer.__name__ = trainer_class.__name__
    return GlobalOrderTrainer


def _asks_for_another_order(args: Any) -> bool:
    """The run asked for the Trainer's length-grouped order (4.x group_by_length, 5.x train_sampling_strategy)."""
    return bool(getattr(args, "group_by_length", False)) or getattr(args, "train_sampling_strategy", "random") not in (
        "random", None)


def _dealt_by_accelerate(loader: Any) -> bool:
    dealer = getattr(loader, "batch_sampler", None)
    return hasattr(dealer, "num_processes") and hasattr(dealer, "process_index")


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
    collator: PadCollator | None,
    script_args: ScriptArguments,
    training_args: Any,
    dirs: RunDirs,
    evaluate: Callable[[], dict[str, float]] | None,
    extra_outputs: Callable[[Path], None] | None = None,
    save: Callable[[Path], None] | None = None,
    trained_metrics: Callable[[dict[str, Any]], dict[str, float]] | None = None,
) -> int:
    """Resume from the newest complete checkpoint, train, evaluate, write model and metrics. ``save`` writes the
    final model on every process (default: the Trainer's ``save_model``); ``trained_metrics`` adds figures of the
    training just done (given its metrics), printed as ``[metric]`` lines too."""
    metrics: dict[str, Any] = {}
    if training_args.do_train:
        resume, incomplete = find_resume_checkpoint(dirs.checkpoints)
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
        if collator is not None:
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
            if trained_metrics is not None:
                extra = trained_metrics(metrics)
                metrics.update(extra)
                if trainer.is_world_process_zero() and extra:
                    print("\n".join(metrics_log.metric_lines(extra, trainer.state.global_step)), flush=True)
        whole = metrics_log.lineage_train_loss(trainer.state.log_history)
        if whole is not None:  # the skip-to-end path has no result; a resumed one has this process's only
            metrics["train_loss"] = whole
    if evaluate is not None:
        metrics.update(evaluate())
    if graceful.requested:
        return EXIT_INTERRUPTED
    model_dir, data_dir = dirs.model, dirs.data
    if training_args.do_train:
        if save is not None:
            save(model_dir)
        else:
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
        hub_token.load_token()  # a gated model's token, before anything asks the hub
        code = run(list(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr, flush=True)
        code = EXIT_USAGE
    distributed = leave_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    if distributed:
        # The rendezvous store torchrun's env:// made outlives the group, and its thread can still abort the
        # rank in the interpreter's teardown (seen in a CI rehearsal after the group was left). The run is complete and
        # its output flushed: leave without the teardown. Only the bot's own scripts do this; a team's script
        # (the spot entry) keeps its atexit handlers.
        logging.shutdown()
        os._exit(code)
    sys.exit(code)

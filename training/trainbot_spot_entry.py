"""trainbot's entry for a team's own script that asked for checkpoints on the clock (``checkpoint_minutes=``),
shipped beside that script; the script gets exactly the arguments that were typed.

Where the script's Trainer saves (its ``output_dir``) is the script's choice: a script given
``--output_dir /opt/ml/checkpoints`` (as the public spot examples do) saves where SageMaker syncs with the
lineage's ``checkpoint_s3_uri`` and copies back after an interruption, so it finds its newest ``checkpoint-N``
there and resumes by itself. What the script leaves in that folder when it ends is the final model; SageMaker
uploads only ``/opt/ml/model``, so this entry copies it there afterwards (nothing when they are the same).

The script runs in this process (``runpy``), not as a child: under torchrun or MPI every rank is this process,
with the launcher's environment, exactly as if the script had been the entry point.

The image's toolkit never passes SIGTERM on, so only saves protect a spot job. With ``TRAINBOT_CHECKPOINT_MINUTES``
set, every transformers Trainer the script builds gets one more callback (the script is not changed): it saves a
checkpoint whenever that many minutes have passed since the last one, records the furthest step reached beside the
checkpoints, says on resuming from which checkpoint and how many steps are trained again, and prints ``[progress]``
lines the bot reads; and the script's ``get_last_checkpoint`` skips a checkpoint a kill left half-written (the
stock one would pick it and start again from step 0). Standard library only; transformers is imported only when
the clock is asked for.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import sys
import time
from pathlib import Path

from trainbot_checkpoint_folders import find_resume_checkpoint  # shipped beside this file, as is the next
from trainbot_rank_agreement import RankAgreement, leave_process_group

USER_ENTRY_ENV = "TRAINBOT_USER_ENTRY"
CHECKPOINT_MINUTES_ENV = "TRAINBOT_CHECKPOINT_MINUTES"
FURTHEST_FILE = "trainbot-furthest-step.json"
PROGRESS_EVERY_S = 10.0
DEFAULT_MODEL_DIR = "/opt/ml/model"
_RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


#: The output_dir of each Trainer the script trained with (the clock callback records it at train begin).
TRAINED_IN: list[Path] = []


def output_dir(argv: list[str]) -> Path | None:
    """Where the script's Trainer saved: the folder its callback saw, else its ``--output_dir`` argument
    (``--output_dir X`` or ``--output_dir=X``); None when neither says."""
    if TRAINED_IN:
        return TRAINED_IN[-1]
    for index, arg in enumerate(argv):
        if arg == "--output_dir" and index + 1 < len(argv):
            return Path(argv[index + 1])
        if arg.startswith("--output_dir="):
            return Path(arg.split("=", 1)[1])
    return None


def is_rank_zero() -> bool:
    for name in _RANK_VARIABLES:
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value) == 0
    return True


def copy_final_model(source: Path | None, model_dir: Path) -> list[str]:
    """Everything the script left at the top of ``source`` except its ``checkpoint-N`` folders."""
    copied: list[str] = []
    if source is None or not source.is_dir() or source.resolve() == model_dir.resolve():
        return copied
    model_dir.mkdir(parents=True, exist_ok=True)
    for item in sorted(source.iterdir()):
        if item.name.startswith("checkpoint-"):
            continue
        target = model_dir / item.name
        if item.is_dir():
            shutil.copytree(item, target, dirs_exist_ok=True)
        else:
            shutil.copy2(item, target)
        copied.append(item.name)
    return copied


def checkpoint_minutes() -> float | None:
    try:
        minutes = float(os.environ.get(CHECKPOINT_MINUTES_ENV, ""))
    except ValueError:
        return None
    return minutes if minutes > 0 else None


def furthest_step(folder: Path) -> int | None:
    try:
        step = json.loads((folder / FURTHEST_FILE).read_text()).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def record_furthest(folder: Path, step: int) -> None:
    tmp = folder / (FURTHEST_FILE + ".tmp")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"step": step}))
        os.replace(tmp, folder / FURTHEST_FILE)
    except OSError:  # a note for the next attempt, never a reason to stop training
        pass


def make_clock_callback(base: type, minutes: float) -> type:
    """The callback class on the installed ``TrainerCallback``: saves on the clock, resume lines, progress."""

    class SaveOnTheClock(base):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            self.every_s = minutes * 60.0
            self.last_save = time.monotonic()
            self.last_progress = 0.0
            self.agreement = RankAgreement()  # each rank has its own clock: they save at the same step

        def on_train_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
            self.last_save = time.monotonic()
            self.agreement.join()
            TRAINED_IN.append(Path(args.output_dir))
            if not state.is_world_process_zero:
                return control
            folder = Path(args.output_dir)
            print(f"[checkpoint] trainbot saves a checkpoint every {minutes:g} min on the clock", flush=True)
            if state.global_step > 0:  # the Trainer loaded a checkpoint's state before this call
                print(f"[checkpoint] resuming from {folder / f'checkpoint-{state.global_step}'}", flush=True)
                reached = furthest_step(folder)
                if reached is not None and reached >= state.global_step:
                    redone = reached - state.global_step
                    print(f"[checkpoint] the interrupted run had reached step {reached}: {redone} steps redone",
                          flush=True)
            return control

        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
            now = time.monotonic()
            if self.agreement.any_rank(now - self.last_save >= self.every_s):
                control.should_save = True
                self.last_save = now
            if not state.is_world_process_zero:
                return control
            record_furthest(Path(args.output_dir), state.global_step)
            logging_steps = max(1, int(getattr(args, "logging_steps", 0) or 0))
            if (state.global_step % logging_steps == 0 or now - self.last_progress >= PROGRESS_EVERY_S
                    or state.global_step >= state.max_steps):
                self.last_progress = now
                print(f"[progress] step={state.global_step} max_steps={state.max_steps}", flush=True)
            return control

        def on_save(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
            self.last_save = time.monotonic()
            return control

    return SaveOnTheClock


def add_clock_to_trainers(minutes: float) -> bool:
    """Every Trainer built from now on (subclasses too) gets the clock callback; False without transformers."""
    try:
        import transformers
    except ImportError:
        return False
    callback = make_clock_callback(transformers.TrainerCallback, minutes)
    trainer_class = transformers.Trainer
    original = trainer_class.__init__

    def init_with_clock(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        original(self, *args, **kwargs)
        if not any(isinstance(cb, callback) for cb in self.callback_handler.callbacks):
            self.add_callback(callback())

    trainer_class.__init__ = init_with_clock
    resume_from_complete_checkpoints()
    return True


def last_complete_checkpoint(folder: str) -> str | None:
    """``get_last_checkpoint`` as transformers' own, but the newest *complete* checkpoint (see
    trainbot_checkpoint_folders): a kill mid-save would otherwise restart the run from step 0."""
    resume, incomplete = find_resume_checkpoint(Path(folder))
    if is_rank_zero():
        for path in incomplete:
            print(f"[checkpoint] ignoring incomplete {path}", flush=True)
    return str(resume) if resume is not None else None


def resume_from_complete_checkpoints() -> None:
    """Both ways a script resumes (``get_last_checkpoint`` imported from ``transformers.trainer_utils``, and the
    Trainer's ``resume_from_checkpoint=True``) find the newest complete checkpoint. Set before the script runs,
    so its own import takes this one; the script is not changed."""
    import transformers.trainer
    import transformers.trainer_utils

    for module in (transformers.trainer_utils, transformers.trainer):
        if hasattr(module, "get_last_checkpoint"):
            module.get_last_checkpoint = last_complete_checkpoint


def main() -> int:
    script_name = os.environ.get(USER_ENTRY_ENV, "")
    here = Path(__file__).resolve().parent
    script = (here / script_name).resolve()
    if not script_name or not script.is_file() or here not in script.parents:
        print(f"[trainbot] {USER_ENTRY_ENV}={script_name!r} names no script beside {here}", flush=True)
        return 2
    args = sys.argv[1:]
    minutes = checkpoint_minutes()
    if minutes is not None and not add_clock_to_trainers(minutes):
        print("[trainbot] transformers is not installed: no saves on the clock, only the script's own", flush=True)
    sys.argv = [str(script), *args]
    sys.path[0] = str(script.parent)  # the script imports its siblings, as when it is the entry point
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    leave_process_group()
    if is_rank_zero():
        model_dir = Path(os.environ.get("SM_MODEL_DIR", DEFAULT_MODEL_DIR))
        copied = copy_final_model(output_dir(args), model_dir)
        print(f"[trainbot] copied the final model ({len(copied)} files and folders) to {model_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

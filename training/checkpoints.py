"""Checkpoints: where they go, which one to resume from (complete ones only), whether it already holds
the final step, saves on a clock, the furthest step a run reached (so the next attempt can say how many
steps it redoes), and the SIGTERM stop that saves one at the next step boundary.

On SageMaker the image's toolkit never passes SIGTERM on to the script, so a spot reclaim loses everything
since the last save: the clock (`--checkpoint_minutes`) bounds that loss; the SIGTERM save is a bonus for
hosts that deliver the signal.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from script_arguments import DEFAULT_CHECKPOINT_DIR, ScriptArguments, UsageError
from trainbot_rank_agreement import RankAgreement

#: Beside the checkpoint-N folders (synced with them on SageMaker): {"step": furthest step reached}.
FURTHEST_FILE = "trainbot-furthest-step.json"


def furthest_step(checkpoint_dir: Path) -> int | None:
    """The furthest step an earlier run of this lineage reached, as it recorded; None if unknown."""
    try:
        step = json.loads((checkpoint_dir / FURTHEST_FILE).read_text()).get("step")
    except (OSError, ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _record_furthest(checkpoint_dir: Path, step: int) -> None:
    tmp = checkpoint_dir / (FURTHEST_FILE + ".tmp")
    try:
        tmp.write_text(json.dumps({"step": step}))
        os.replace(tmp, checkpoint_dir / FURTHEST_FILE)
    except OSError:  # a note for the next attempt, never a reason to stop training
        pass


def training_done(checkpoint: Path, training_args: Any) -> bool:
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


def make_graceful_stop(transformers_module: Any) -> type:
    """The graceful-stop callback class, built on the installed TrainerCallback."""
    TrainerCallback = transformers_module.TrainerCallback

    class GracefulStop(TrainerCallback):
        """SIGTERM -> save a checkpoint at the next step boundary and stop; the script exits 143.

        Under several processes the flag is agreed on every step (`RankAgreement`), so all ranks stop,
        and save, at the same step even when the signal reaches them at different times.
        """

        def __init__(self) -> None:
            self.requested = False
            self.stopped_at: int | None = None
            self._agreement = RankAgreement()
            self._step_ended = time.monotonic()
            signal.signal(signal.SIGTERM, self._on_signal)

        def _on_signal(self, signum, frame):
            if not self.requested:
                print("[checkpoint] SIGTERM received: saving at the next step boundary", file=sys.stderr, flush=True)
            self.requested = True

        def on_train_begin(self, args, state, control, **kwargs):
            self._agreement.join()

        def on_save(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                seconds = time.monotonic() - self._step_ended
                print(f"[checkpoint] saved checkpoint-{state.global_step} in {seconds:.3f} s",
                      file=sys.stderr, flush=True)

        def on_step_end(self, args, state, control, **kwargs):
            self._step_ended = time.monotonic()
            if self._agreement.any_rank(self.requested):
                self.requested = True
                self.stopped_at = state.global_step
                control.should_save = True
                control.should_training_stop = True
            return control

    return GracefulStop


def make_checkpoint_clock(transformers_module: Any) -> type:
    """The checkpoint-clock callback class, built on the installed TrainerCallback."""
    TrainerCallback = transformers_module.TrainerCallback

    class CheckpointClock(TrainerCallback):
        """Save at least every `minutes` (the step-based saves stay) and at the last step; log at every
        save, so the loss history carried in each checkpoint covers every step trained up to it (a resumed
        run computes whole-lineage figures from it); record the furthest step reached. Each rank keeps
        its own clock, so whether the time has come is agreed across ranks (`RankAgreement`)."""

        def __init__(self, minutes: float | None, checkpoint_dir: Path) -> None:
            self.seconds = minutes * 60 if minutes and minutes > 0 else None
            self.checkpoint_dir = checkpoint_dir
            self._last_save = time.monotonic()
            self._agreement = RankAgreement()

        def on_train_begin(self, args, state, control, **kwargs):
            self._last_save = time.monotonic()
            self._agreement.join()

        def _time_is_up(self) -> bool:
            if self.seconds is None:  # the same on every rank: nothing to agree on
                return False
            return self._agreement.any_rank(time.monotonic() - self._last_save >= self.seconds)

        def on_step_end(self, args, state, control, **kwargs):
            last = bool(state.max_steps) and state.global_step >= state.max_steps
            if self._time_is_up() or last:
                control.should_save = True  # the last step too: a relaunch after the end skips to it
            if control.should_save:
                control.should_log = True
            if state.is_world_process_zero:
                _record_furthest(self.checkpoint_dir, state.global_step)
            return control

        def on_save(self, args, state, control, **kwargs):
            self._last_save = time.monotonic()

    return CheckpointClock

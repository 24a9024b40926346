"""The metric lines the job's log is scraped for, printed by rank 0 and flushed:
`[metric] NAME=VALUE step=STEP`, and a `[progress] step=S max_steps=M loss=L eta_s=E` line per logging step."""

from __future__ import annotations

import time
from typing import Any

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
    "train_tokens_per_second",
)


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


def lineage_train_loss(log_history: list[dict[str, Any]]) -> float | None:
    """The mean training loss over every step of the lineage, from the logged history a checkpoint
    carries. Each logged `loss` is the mean over the steps since the log before it, so the whole-run mean
    weights each by its interval. The Trainer's own `train_loss` covers only the steps this process ran
    (4.28 even divides them by all steps: 0.35 instead of 0.69 after a resume at half-way)."""
    total, last = 0.0, 0
    for entry in log_history:
        step, loss = entry.get("step"), entry.get("loss")
        if not isinstance(step, int) or not isinstance(loss, int | float) or step <= last:
            continue
        total += float(loss) * (step - last)
        last = step
    return total / last if last else None


def make_metric_printer(transformers_module: Any) -> type:
    """The metric-printer callback class, built on the installed TrainerCallback."""
    TrainerCallback = transformers_module.TrainerCallback

    class MetricPrinter(TrainerCallback):
        """Rank 0 prints `[metric]` lines and a `[progress]` line for each log."""

        def __init__(self) -> None:
            self._t0 = time.monotonic()
            self._step0 = 0

        def on_train_begin(self, args, state, control, **kwargs):
            self._t0, self._step0 = time.monotonic(), state.global_step

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not logs:
                return
            if "train_loss" in logs:  # the whole lineage's, not this process's (see lineage_train_loss)
                whole = lineage_train_loss(state.log_history)
                if whole is not None:
                    logs["train_loss"] = whole
            if not state.is_world_process_zero:
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

    return MetricPrinter

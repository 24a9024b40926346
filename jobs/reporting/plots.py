"""Training-loss and evaluation curves of a lineage, as a PNG, from the backend's metric series.

SageMaker's series come from CloudWatch (x = seconds since the attempt started); the local backend's from
the parsed logs (x = step). Each attempt is its own line, so a relaunch shows where it picked up.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.backend import StandIn
from jobs.errors import TrainbotError
from jobs.lineage import AttemptStatus
from jobs.records import MetricSeries

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from jobs.backend import TrainingBackend
    from jobs.lineage import Lineage

log = logging.getLogger(__name__)

#: The loss panel: the training loss and the evaluation's (on its own, sparser cadence), named apart.
LOSS_METRICS = ("loss", "eval_loss")
EVAL_METRICS = ("eval_exact_match", "eval_f1", "eval_accuracy")
#: What each curve is called in a legend.
CURVE_NAMES = {"loss": "train loss", "eval_loss": "eval loss", "eval_exact_match": "exact match",
               "eval_f1": "F1", "eval_accuracy": "accuracy"}
#: (panel title, y-axis label) of each panel.
PANELS = {"loss": ("loss", "loss"), "evaluation": ("evaluation", "score")}


def _figure(**kwargs: object) -> Any:
    """A matplotlib Figure, importing matplotlib on the first plot: it is 46 MB of the bot's memory and
    most processes (the CLI, a quiet bot) never draw. Agg: the bot runs headless, often in a worker
    thread, and the Figure API keeps no pyplot global state, so plots from two threads do not mix."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    return Figure(**kwargs)  # type: ignore[arg-type]


def plot_series(
    series_by_attempt: list[tuple[str, MetricSeries]], path: Path, *, title: str, xlabel: str = "step"
) -> Path | None:
    """Write the curves to `path` (its folder is made); None, and no file, when there is nothing to draw."""
    fig = curves_figure(series_by_attempt, title=title, xlabel=xlabel)
    if fig is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def curves_figure(series_by_attempt: list[tuple[str, MetricSeries]], *, title: str, xlabel: str = "step") -> Any:
    """The Figure of the curves (a loss panel: train and eval loss; an evaluation panel: the scores), each axis
    labelled; None when there is nothing to draw."""
    loss = _pick(series_by_attempt, LOSS_METRICS)
    evals = _pick(series_by_attempt, EVAL_METRICS)
    if not loss and not evals:
        return None
    panels = [(PANELS[name], lines) for name, lines in (("loss", loss), ("evaluation", evals)) if lines]
    fig = _figure(figsize=(6 * len(panels), 4), dpi=100)
    for index, ((name, ylabel), lines) in enumerate(panels, start=1):
        _draw(fig.add_subplot(1, len(panels), index), name, lines, xlabel, ylabel)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_lineage(lineage: Lineage, backend: TrainingBackend, path: Path) -> Path | None:
    """The lineage's curves over all its attempts that ran; None when no attempt reported a metric."""
    collected: list[tuple[str, MetricSeries]] = []
    for attempt in lineage.attempts:
        if attempt.status in (AttemptStatus.LAUNCH_FAILED, AttemptStatus.LAUNCHING):
            continue
        try:
            collected.append((attempt.job_name, backend.metric_series(attempt.job_name)))
        except TrainbotError as exc:  # a plot is a bonus: a missing series never blocks the report
            log.warning("no metrics for %s: %s", attempt.job_name, exc)
    xlabel = "seconds since the attempt started" if lineage.backend == "sagemaker" else "step"
    return plot_series(collected, path, title=plot_title(lineage, backend), xlabel=xlabel)


def plot_title(lineage: Lineage, backend: TrainingBackend) -> str:
    """``bert-squad-1a2b: bert-large-uncased-whole-word-masking``; what really trained where the backend stood
    a model in (``tiny BERT, standing in for distilbert-base-uncased``)."""
    wanted = lineage.spec.model_label
    latest = lineage.latest_attempt
    trained = None
    if latest is not None and isinstance(backend, StandIn):
        try:
            trained = backend.trained_model(latest.job_name)
        except TrainbotError:  # a title is a convenience
            trained = None
    if trained and trained != wanted:
        return f"{lineage.id}: {trained}, standing in for {wanted}"
    return f"{lineage.id}: {wanted}"


_Line = tuple[str, list[float], list[float]]


def _pick(series_by_attempt: list[tuple[str, MetricSeries]], names: tuple[str, ...]) -> list[_Line]:
    lines: list[_Line] = []
    several = len(series_by_attempt) > 1
    for job_name, series in series_by_attempt:
        for name in names:
            points = series.get(name) or []
            if points:
                label = CURVE_NAMES.get(name, name)
                label = f"{label} ({job_name})" if several else label
                lines.append((label, [p.x for p in points], [p.value for p in points]))
    return lines


def _draw(ax: Axes, title: str, lines: list[_Line], xlabel: str, ylabel: str) -> None:
    for label, xs, ys in lines:
        ax.plot(xs, ys, marker="o" if len(xs) < 3 else None, label=label)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")

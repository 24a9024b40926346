"""What a lineage did and cost: the report `trainbot status JOB` prints and the `completed` event carries.

It reads like a summary: the task's metrics first (EM and F1, or accuracy, and the loss), then the forecast
next to what the job took, then the cost and the spot savings; the trainer's internals (total_flos,
train_steps_per_second, epoch, the learning rate, ...) come last, folded into one line (all of them stay
in the JSON's ``metrics``). Works on running lineages too (a partial report). Spot savings = 1 - billable /
training seconds, summed over the attempts, shown as a whole percentage ("70%").
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobs.errors import TrainbotError
from jobs.lineage import AttemptStatus
from jobs.planning import prices
from jobs.planning.batch import BatchSettings, change_words, stored_batch, used_batch
from jobs.planning.forecast import Forecast, about_duration, about_usd
from jobs.planning.metrics import PROGRESS_NAMES
from jobs.planning.plan import code_label
from jobs.wording import counted

if TYPE_CHECKING:
    from jobs.backend import TrainingBackend
    from jobs.lineage import Attempt, Lineage

log = logging.getLogger(__name__)

LOCAL = "local"  # the backend whose runs are priced at SageMaker's rates but billed nothing

#: The metrics a person looks for first, per task, in the order shown.
# Two losses, named apart: the evaluation's, and the training's (the Trainer's average, else its last logged).
_LOSSES = (("eval loss", ("eval_loss",)), ("train loss", ("train_loss", "loss")))
HEADLINE_METRICS = {
    "question-answering": (("exact_match", ("eval_exact_match", "exact_match")), ("f1", ("eval_f1", "f1")), *_LOSSES),
    "text-classification": (("accuracy", ("eval_accuracy", "accuracy")), *_LOSSES),
    # A causal LM's fine-tune: its losses, and how fast it trained, in tokens (what its forecast counts).
    "text-generation": (*_LOSSES, ("tokens/s", ("train_tokens_per_second",))),
}


@dataclass(frozen=True)
class AttemptLine:
    number: int
    job_name: str
    instance_type: str
    spot: bool
    status: str
    reason: str  # why it ended, when it did not complete
    billable_seconds: int | None
    training_seconds: int | None
    cost_usd: float
    resumed_from_step: int | None  # steps this attempt did not redo thanks to the checkpoints
    steps_redone: int | None = None  # steps the interruption lost past that checkpoint, trained again
    # The batch it trained with and, for a relaunch, what its type changed ("4 GPUs, per-device batch 8
    # instead of 32, global batch 32 as planned"; "1 GPU as planned").
    per_device_train_batch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    settings: str = ""


@dataclass(frozen=True)
class JobReport:
    lineage_id: str
    status: str
    partial: bool  # the lineage is still running: figures so far
    task: str | None  # None: the job ran its own code without task=
    model: str
    dataset: str
    instance_count: int
    metrics: dict[str, float]  # final metrics of the last attempt that reported any
    headline: dict[str, float]  # EM/F1 or accuracy
    duration_seconds: float | None
    billable_seconds: int
    training_seconds: int
    cost_usd: float
    on_demand_usd: float  # the same training seconds at on-demand prices
    spot_savings: float | None  # a fraction; None without spot attempts or training time
    attempts: tuple[AttemptLine, ...]
    checkpoint_uri: str
    links: dict[str, str] = field(default_factory=dict)
    code: str = ""  # a team's own code as repo@<short sha> (REF), the commit the lineage was pinned to
    forecast: dict[str, Any] | None = None  # the forecast it was launched with (Forecast.to_json())
    backend: str = ""  # where it ran: "local" costs are what SageMaker would bill for the same run
    checkpoints: str = ""  # where its checkpoints are: the local folder, or checkpoint_uri
    reason: str = ""  # why it ended, when it did not complete (the ending's own words)

    @property
    def details(self) -> dict[str, float]:
        """The metrics that are not the task's: the trainer's internals."""
        if not self.headline:
            return {}  # no task's headline (own code): the text shows every metric as it came
        shown = {name for _, names in HEADLINE_METRICS.get(self.task or "", ()) for name in names}
        return {k: v for k, v in self.metrics.items() if k not in shown}

    def forecast_line(self) -> str | None:
        """``forecast 28 min / $24, took 31 min / $29`` (``so far`` while it runs)."""
        planned = self.forecast or {}
        seconds, cost = planned.get("seconds"), planned.get("usd")
        if seconds is None or cost is None:
            return None
        took = "so far" if self.partial else "took"
        spent = _about(self.duration_seconds or 0.0, self.cost_usd)
        line = f"forecast {_about(float(seconds), float(cost))}, {took} {spent}"
        planned_rate, measured = planned.get("tokens_per_second"), self.metrics.get("train_tokens_per_second")
        if planned_rate and measured:  # a causal LM's fine-tune: its throughput as forecast and as trained
            line += f"; {float(planned_rate):,.0f} tokens/s forecast, {measured:,.0f} trained"
        return line

    @property
    def priced_here(self) -> bool:
        """False for a local run: its cost is SageMaker's price for the same run, not a bill."""
        return self.backend != LOCAL

    @property
    def spot_savings_pct(self) -> str | None:
        return None if self.spot_savings is None else f"{round(self.spot_savings * 100)}%"

    @property
    def steps_saved(self) -> int:
        return sum(a.resumed_from_step or 0 for a in self.attempts)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["attempts"] = [asdict(a) for a in self.attempts]
        data["cost_usd"] = round(self.cost_usd, 2)
        data["on_demand_usd"] = round(self.on_demand_usd, 2)
        data["spot_savings"] = self.spot_savings_pct
        data["spot_savings_fraction"] = None if self.spot_savings is None else round(self.spot_savings, 4)
        data["steps_saved"] = self.steps_saved
        data["details"] = self.details
        data["forecast_vs_actual"] = self.forecast_line()
        for line in data["attempts"]:
            line["cost_usd"] = round(line["cost_usd"], 2)
        return data

    def to_text(self) -> str:
        return "\n".join(_text_lines(self))


def build_report(
    lineage: Lineage, backend: TrainingBackend, *, now: datetime | None = None, reason: str = ""
) -> JobReport:
    """The report of `lineage` as the store knows it; `backend` gives only the console links (a local
    backend's include the checkpoints folder). ``reason``: why it ended (the store's ending)."""
    spec = lineage.spec
    links = _links(lineage, backend)
    planned = stored_batch(lineage.launch_plan, spec.hyperparameters, spec.instance_type, spec.instance_count)
    lines = tuple(_attempt_line(a, spec.instance_count, planned) for a in lineage.attempts)
    billable = sum(a.billable_seconds or 0 for a in lineage.attempts)
    training = sum(a.training_seconds or 0 for a in lineage.attempts)
    metrics = _final_metrics(lineage.attempts)
    return JobReport(
        lineage_id=lineage.id,
        status=lineage.status.value,
        partial=not lineage.status.is_terminal(),
        task=spec.task,
        model=spec.model_label,
        dataset=spec.data_label,
        instance_count=spec.instance_count,
        metrics=metrics,
        headline=headline_metrics(spec.task, metrics),
        duration_seconds=_duration(lineage, now),
        billable_seconds=billable,
        training_seconds=training,
        cost_usd=sum(line.cost_usd for line in lines),
        on_demand_usd=sum(_cost(a, spec.instance_count, a.training_seconds, spot=False) for a in lineage.attempts),
        spot_savings=spot_savings(lineage.attempts),
        attempts=lines,
        checkpoint_uri=lineage.checkpoint_uri,
        links=links,
        code=f"{code_label(spec)}, entry {spec.entry}" if spec.own_code else "",
        backend=lineage.backend,
        checkpoints=links.get("checkpoints") or lineage.checkpoint_uri,
        reason=reason,
    )


def with_forecast(report: JobReport, planned: Forecast | None) -> JobReport:
    """``report`` with the forecast its lineage was launched with, to set beside what it took."""
    if planned is None or planned.seconds is None:
        return report
    return replace(report, forecast=planned.to_json())


def _figure(value: float) -> str:
    """``0.8912``, ``88.5``; ``15,739`` rather than ``1.574e+04`` (tokens a second)."""
    return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:.4g}"


def spot_savings(attempts: tuple[Attempt, ...]) -> float | None:
    """1 - billable / training over the attempts that report both; None without spot or training time."""
    if not any(a.spot for a in attempts):
        return None
    timed = [a for a in attempts if a.training_seconds and a.billable_seconds is not None]
    training = sum(a.training_seconds or 0 for a in timed)
    if training <= 0:
        return None
    billable = sum(a.billable_seconds or 0 for a in timed)
    return max(0.0, 1.0 - billable / training)


def headline_metrics(task: str | None, metrics: dict[str, float]) -> dict[str, float]:
    found: dict[str, float] = {}
    for label, names in HEADLINE_METRICS.get(task or "", ()):
        value = next((metrics[n] for n in names if n in metrics), None)
        if value is not None:
            found[label] = value
    return found


def _attempt_line(attempt: Attempt, count: int, planned: BatchSettings) -> AttemptLine:
    used = used_batch(planned, attempt.instance_type, attempt.per_device_batch, attempt.accumulation)
    return AttemptLine(
        number=attempt.number,
        job_name=attempt.job_name,
        instance_type=attempt.instance_type,
        spot=attempt.spot,
        status=attempt.status.value,
        reason=_reason(attempt),
        billable_seconds=attempt.billable_seconds,
        training_seconds=attempt.training_seconds,
        cost_usd=_cost(attempt, count, attempt.billable_seconds, spot=attempt.spot),
        resumed_from_step=attempt.resumed_from_step,
        steps_redone=attempt.steps_redone,
        per_device_train_batch_size=attempt.per_device_batch,
        gradient_accumulation_steps=attempt.accumulation,
        settings=change_words(planned, used) if attempt.number > 1 else "",
    )


def _reason(attempt: Attempt) -> str:
    if attempt.status in (AttemptStatus.COMPLETED, AttemptStatus.RUNNING, AttemptStatus.LAUNCHING):
        return ""
    return attempt.failure_reason or attempt.secondary_status


def _cost(attempt: Attempt, count: int, seconds: int | None, *, spot: bool) -> float:
    try:
        return prices.cost_of(attempt.instance_type, count, float(seconds or 0), spot)
    except TrainbotError:  # a type the price table does not know: no figure rather than no report
        log.warning("no price for %s; %s costed at 0", attempt.instance_type, attempt.job_name)
        return 0.0


def _final_metrics(attempts: tuple[Attempt, ...]) -> dict[str, float]:
    for attempt in reversed(attempts):
        if attempt.metrics:  # a job's final metrics, less the step its progress lines report
            return {k: v for k, v in attempt.metrics.items() if k not in PROGRESS_NAMES}
    return {}


def _duration(lineage: Lineage, now: datetime | None) -> float | None:
    ends = [a.ended_at for a in lineage.attempts if a.ended_at is not None]
    if lineage.status.is_terminal():
        end = max(ends) if ends else lineage.updated_at
    else:
        end = now or max([lineage.updated_at, *(a.updated_at for a in lineage.attempts)])
    seconds = (end - lineage.created_at).total_seconds()
    return max(seconds, 0.0)


def _links(lineage: Lineage, backend: TrainingBackend) -> dict[str, str]:
    latest = lineage.latest_attempt
    if latest is None:
        return {}
    try:
        return dict(backend.console_links(latest.job_name, latest.model_artifacts))
    except TrainbotError as exc:  # links are a convenience: the report stands without them
        log.warning("no console links for %s: %s", latest.job_name, exc)
        return {}


# -- terminal rendering -----------------------------------------------------------------------------


def _text_lines(report: JobReport) -> list[str]:
    state = f"{report.status} (so far)" if report.partial else report.status
    lines = [f"Job {report.lineage_id}: {state}"]
    if report.reason and not report.partial:
        lines.append(f"  ended: {report.reason}")
    lines.append(
        f"  {report.model} on {report.dataset} ({report.task or 'own code'}), {counted(report.instance_count, 'instance')}"
    )
    if report.code:
        lines.append(f"  code {report.code}")
    if report.metrics:  # a team's own script has no headline of its task: its metrics, as they came
        shown = report.headline or report.metrics
        lines.append("  " + ", ".join(f"{k} {_figure(v)}" for k, v in shown.items()))
    forecast = report.forecast_line()
    if forecast:
        lines.append(f"  {forecast}")
    cost = f"  cost ${report.cost_usd:.2f}"
    if report.spot_savings_pct is not None:
        cost += f" (on-demand ${report.on_demand_usd:.2f}), spot savings {report.spot_savings_pct}"
    if not report.priced_here:
        cost += ", what SageMaker would bill for this run (a local run is free)"
    lines.append(cost)
    lines.append(
        f"  duration {_hms(report.duration_seconds)}, training {_hms(report.training_seconds)}, "
        f"billable {_hms(report.billable_seconds)}"
    )
    lines.append(f"  checkpoints {report.checkpoints or report.checkpoint_uri}")
    lines.append("  attempts:")
    lines.extend(_attempt_text(a) for a in report.attempts)
    if report.steps_saved:
        lines.append(f"  resuming from checkpoints saved {report.steps_saved} steps")
    lines.extend(f"  {name}: {url}" for name, url in report.links.items() if name != "checkpoints")
    if report.details:
        lines.append("  trainer: " + ", ".join(f"{k} {v:.4g}" for k, v in report.details.items()))
    return lines


def _about(seconds: float, cost: float) -> str:
    return f"{about_duration(seconds)} / {about_usd(cost)}"


def _attempt_text(line: AttemptLine) -> str:
    market = "spot" if line.spot else "on-demand"
    text = f"    {line.number}. {line.job_name}  {line.instance_type} {market}  {line.status}"
    if line.settings:
        text += f"  ({line.settings})"
    if line.reason:
        text += f"  ({line.reason})"
    if line.billable_seconds is not None:
        text += f"  billable {_hms(line.billable_seconds)}, ${line.cost_usd:.2f}"
    if line.resumed_from_step:
        redone = f"{counted(line.steps_redone, 'step')} redone" if line.steps_redone is not None else "later steps redone"
        text += f"  resumed at step {line.resumed_from_step} ({redone})"
    return text


def _hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{secs} s"

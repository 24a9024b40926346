"""The steps after every ending that trainbot itself takes: the report, the history record later forecasts
learn from, the curves, the log tail of a failure, and the announcement (an outbox entry for the job's
thread; delivered by whatever chat runs, kept for `trainbot status` and the next chat where none does).

Each is idempotent: the report and the log tail are recomputed from the store and the backend, the history
record is an update of the lineage's job_runs row, the curves overwrite one file, and the announcement is
queued under the dedup key the controller chose (the key the same change has always had).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from jobs.backend import TrainingBackend
from jobs.clock import Clock
from jobs.endings.stage import COMPLETED_ONLY, Step, StepContext
from jobs.errors import NotFound
from jobs.lifecycle import events
from jobs.lifecycle.forecasts import forecast_of, record_completion
from jobs.lineage import AttemptStatus, LineageStatus
from jobs.reporting.plots import plot_lineage
from jobs.reporting.reports import build_report, with_forecast
from jobs.store.store import Store

log = logging.getLogger(__name__)

REPORT, HISTORY, CURVES, LOG_TAIL, ANNOUNCE = "report", "history", "curves", "log_tail", "announce"


class TrainbotSteps:
    """What the built-in steps share: the store, the backend (counted where bot/wiring.py counts it), the
    clock and where the curves are drawn."""

    def __init__(self, store: Store, backend: TrainingBackend, clock: Clock, plots_dir: Path) -> None:
        self._store = store
        self._backend = backend
        self._clock = clock
        self._plots_dir = plots_dir

    def all(self) -> list[Step]:
        """In the order they run; the announcement waits a little for what it carries."""
        return [
            Step(REPORT, self.report, on=COMPLETED_ONLY),
            Step(HISTORY, self.history, on=COMPLETED_ONLY),
            Step(CURVES, self.curves, on=COMPLETED_ONLY),
            Step(LOG_TAIL, self.log_tail, on=frozenset({LineageStatus.FAILED})),
            Step(ANNOUNCE, self.announce, waits_for=(REPORT, CURVES, LOG_TAIL)),
        ]

    def report(self, ctx: StepContext) -> dict[str, Any]:
        """The final report, with the forecast it was launched with beside what it took."""
        report = build_report(ctx.lineage, self._backend, now=ctx.now)
        return with_forecast(report, forecast_of(self._store, self._clock, ctx.lineage.id)).to_json()

    def history(self, ctx: StepContext) -> None:
        """What the completed run measured, for later forecasts of the same model, task and instance type."""
        took = build_report(ctx.lineage, self._backend, now=ctx.now)
        record_completion(self._store, self._clock, ctx.lineage, took_seconds=took.duration_seconds,
                          took_usd=took.cost_usd)

    def curves(self, ctx: StepContext) -> str | None:
        """The loss and evaluation curves as a PNG (None: no attempt reported a metric). Drawn after the
        announcement went out without them, they follow it into the thread."""
        png = plot_lineage(ctx.lineage, self._backend, self._plots_dir / f"{ctx.lineage.id}.png")
        if png is not None and ctx.done(ANNOUNCE):
            payload = events.curves(ctx.lineage.id, ctx.ending.job_name or "", str(png))
            self._enqueue(ctx, payload, f"{ctx.lineage.id}:curves")
        return str(png) if png else None

    def log_tail(self, ctx: StepContext) -> list[str]:
        """The failed attempt's last log lines; none for a launch the backend refused (no job, no log)."""
        job_name = ctx.ending.job_name
        attempt = next((a for a in ctx.lineage.attempts if a.job_name == job_name), None)
        if attempt is None or attempt.status is AttemptStatus.LAUNCH_FAILED:
            return []
        try:
            return self._backend.log_tail(attempt.job_name, events.LOG_TAIL_LINES)
        except NotFound:  # the job (or its local folder) is gone: the reason alone tells the story
            return []

    def announce(self, ctx: StepContext) -> bool:
        """The ending's message for the job's thread, with whatever the steps before it could build."""
        ending, lineage = ctx.ending, ctx.lineage
        if ending.facts.get("told_directly"):
            return False  # a refused launch: the person who asked was answered with why, at once
        job_name = ending.job_name or ""
        if ending.outcome is LineageStatus.COMPLETED:
            payload = events.completed(lineage.id, job_name, ctx.result(REPORT) or {}, ctx.result(CURVES))
        elif ending.outcome is LineageStatus.FAILED:
            payload = events.failed(lineage.id, job_name, ending.reason, ctx.result(LOG_TAIL) or [])
        elif ending.outcome is LineageStatus.GAVE_UP:
            attempts = int(ending.facts.get("attempts") or len(lineage.attempts))
            payload = events.gave_up(lineage.id, job_name, ending.reason, attempts)
        else:  # a person's stop says no more than that (the card and the reply said who)
            payload = events.stopped(lineage.id, job_name, "" if "stopped_by" in ending.facts else ending.reason)
        key = str(ending.facts.get("announce_key") or f"{lineage.id}:{ending.outcome.value}")
        return self._enqueue(ctx, payload, key)

    def _enqueue(self, ctx: StepContext, payload: dict[str, Any], key: str) -> bool:
        return self._store.outbox.enqueue(kind=payload["kind"], payload=payload, dedup_key=key,
                                          lineage_id=ctx.lineage.id, channel=ctx.lineage.channel)

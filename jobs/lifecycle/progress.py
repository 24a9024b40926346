"""Live progress of running jobs: step / total, the latest loss, the ETA and the cost so far, on each card.

Each update (at most every TRAINBOT_PROGRESS_SECONDS, from the runtime's watch cycle) asks the backend for
the progress of every running attempt at once (`TrainingBackend.progress`: on SageMaker one GetMetricData
call covers 500 queries) and keeps each lineage's latest figures in job_runs when they moved, and does
nothing when nothing moved; the outbox delivery loop redraws each card whose progress is newer than
what it shows (one row a lineage, updated in place: no message a minute per job piles up in the outbox).

The total is the script's own ``max_steps`` where the backend reads it, else the forecast's steps; the
ETA is the script's own where it has one, else the remaining steps at the measured pace (or, before there
is a pace, the forecast's).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from jobs.backend import TrainingBackend
from jobs.clock import Clock
from jobs.errors import BackendError
from jobs.lineage import Attempt, AttemptStatus, Lineage
from jobs.planning.forecast import Forecast
from jobs.planning.prices import cost_of
from jobs.records import Progress
from jobs.settings import Settings
from jobs.store.runs import RunHistory
from jobs.store.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveProgress:
    """What a card and `trainbot status` show of a running job."""

    job_name: str
    step: int | None
    total: int | None
    loss: float | None
    eta_seconds: float | None
    cost_so_far_usd: float
    at: datetime | None = None  # when these figures were read: the card says how fresh it is

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost_so_far_usd"] = round(self.cost_so_far_usd, 2)
        data["eta_seconds"] = None if self.eta_seconds is None else round(self.eta_seconds)
        data["at"] = None if self.at is None else self.at.isoformat()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LiveProgress:
        return cls(
            job_name=str(data.get("job_name", "")), step=data.get("step"), total=data.get("total"),
            loss=data.get("loss"), eta_seconds=data.get("eta_seconds"),
            cost_so_far_usd=float(data.get("cost_so_far_usd") or 0.0), at=_moment(data.get("at")),
        )

    def words(self) -> str:
        """``step 1200/2738 · loss 0.9100 · ETA 12 min 5 s · $4.10 so far``."""
        line = self.words_without_cost()
        return " · ".join(part for part in (line, f"${self.cost_so_far_usd:,.2f} so far") if part)

    def words_without_cost(self) -> str:
        return progress_words(self.step, self.total, self.loss, self.eta_seconds)


def _moment(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def progress_words(step: float | None, total: float | None, loss: float | None, eta: float | None) -> str:
    """``step 20/60 · loss 0.7081 · ETA 13 s``: one rendering for local and SageMaker jobs alike."""
    parts = []
    if step is not None:
        parts.append(f"step {int(step)}/{int(total)}" if total else f"step {int(step)}")
    if loss is not None:
        parts.append(f"loss {float(loss):.4f}")
    if eta is not None:
        parts.append(f"ETA {eta_words(float(eta))}")
    return " · ".join(parts)


def eta_words(seconds: float) -> str:
    whole = max(0, int(round(seconds)))
    return f"{whole} s" if whole < 120 else f"{whole // 60} min {whole % 60} s"


def live_progress(
    lineage: Lineage, attempt: Attempt, progress: Progress, planned: Forecast | None, now: datetime
) -> LiveProgress:
    total = progress.max_steps or (planned.steps if planned else None)
    return LiveProgress(
        job_name=attempt.job_name,
        step=progress.step,
        total=total,
        loss=progress.loss,
        eta_seconds=_eta(progress, total, planned),
        cost_so_far_usd=cost_so_far(lineage, now),
        at=now,
    )


def _eta(progress: Progress, total: int | None, planned: Forecast | None) -> float | None:
    if progress.eta_seconds is not None:
        return progress.eta_seconds
    if progress.step is None or not total:
        return None
    pace = progress.steps_per_second
    if not pace and planned is not None and planned.steps and planned.training_seconds:
        pace = planned.steps / planned.training_seconds
    return max(0.0, (total - progress.step) / pace) if pace else None


def attempt_forecast(attempt: Attempt, planned: Forecast | None) -> Forecast | None:
    """The forecast the rest is paced by: a relaunched attempt's on its own type, else the plan's."""
    return Forecast.from_json(attempt.forecast) if attempt.forecast else planned


def cost_so_far(lineage: Lineage, now: datetime) -> float:
    """Ended attempts at what they billed; the running one at its time so far (the typical spot price for
    spot: SageMaker says what it billed only at the end)."""
    count = lineage.spec.instance_count
    total = 0.0
    for attempt in lineage.attempts:
        if attempt.billable_seconds is not None:
            total += cost_of(attempt.instance_type, count, attempt.billable_seconds, attempt.spot)
        elif attempt.status is AttemptStatus.RUNNING:
            elapsed = (now - attempt.created_at).total_seconds()
            total += cost_of(attempt.instance_type, count, elapsed, attempt.spot)
    return total


@dataclass
class ProgressResult:
    ran: bool = False
    jobs: int = 0  # running attempts asked about
    found: int = 0  # of them, those that had logged progress
    updated: list[str] = field(default_factory=list)  # lineages whose card is redrawn
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if not self.ran:
            return "progress: not due"
        head = f"progress: {self.jobs} running, {self.found} with progress, {len(self.updated)} cards updated"
        return "\n".join([head, *(f"  error: {e}" for e in self.errors)])


class ProgressTracker:
    def __init__(self, store: Store, backend: TrainingBackend, clock: Clock, settings: Settings) -> None:
        self._store = store
        self._backend = backend
        self._clock = clock
        self._runs = RunHistory(store, clock)
        self._every = timedelta(seconds=settings.trainbot_progress_seconds)
        self._last: datetime | None = None

    def poll_once(self, *, force: bool = False) -> ProgressResult:
        """One update, when one is due (or ``force``)."""
        now = self._clock.now()
        if not force and self._last is not None and now - self._last < self._every:
            return ProgressResult()
        self._last = now
        result = ProgressResult(ran=True)
        lineages = self._store.list_lineages(active_only=True, limit=100_000, backend=self._backend.name)
        running = {a.job_name: (ln, a) for ln in lineages if (a := ln.latest_attempt) is not None
                   and a.status is AttemptStatus.RUNNING}
        result.jobs = len(running)
        if not running:
            return result
        try:
            found = self._backend.progress(list(running))
        except BackendError as exc:
            log.warning("no progress this time: %s", exc)
            result.errors.append(exc.message)
            return result
        result.found = len(found)
        self._update(running, found, now, result)
        return result

    def _update(
        self, running: dict[str, tuple[Lineage, Attempt]], found: dict[str, Progress], now: datetime,
        result: ProgressResult,
    ) -> None:
        ids = [lineage.id for lineage, _ in running.values()]
        shown = self._runs.progress_of(ids)
        planned = self._runs.forecasts_of(ids)
        changed: dict[str, dict[str, Any]] = {}
        for name, progress in found.items():
            lineage, attempt = running[name]
            live = live_progress(lineage, attempt, progress, attempt_forecast(attempt, planned.get(lineage.id)),
                                 now).to_json()
            before = shown.get(lineage.id) or {}
            if (before.get("job_name"), before.get("step"), before.get("loss")) == (name, live["step"], live["loss"]):
                continue  # nothing moved: the card stays as it is
            changed[lineage.id] = live
        self._runs.set_progress(changed)  # the outbox delivery redraws their cards (handlers/notify.py)
        result.updated.extend(changed)


def read_live(store: Store, backend: TrainingBackend, clock: Clock, lineage: Lineage) -> LiveProgress | None:
    """The live progress of a running lineage, read from the backend now (one call, as `trainbot status`
    needs it fresh even with no watcher running); the stored one when the backend cannot say."""
    attempt = lineage.latest_attempt
    if lineage.status.is_terminal() or attempt is None or attempt.status is not AttemptStatus.RUNNING:
        return None
    runs = RunHistory(store, clock)
    try:
        found = backend.progress([attempt.job_name]).get(attempt.job_name)
    except BackendError as exc:
        log.warning("no live progress for %s: %s", attempt.job_name, exc)
        found = None
    if found is None:
        stored = runs.progress_of([lineage.id]).get(lineage.id)
        return LiveProgress.from_json(stored) if stored else None
    return live_progress(lineage, attempt, found, attempt_forecast(attempt, runs.forecast_of(lineage.id)), clock.now())

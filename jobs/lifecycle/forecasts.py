"""Forecasts that learn: a plan's forecast from the history of earlier runs, the forecast recorded at launch,
and each completed run's measurements recorded for the next one.

- ``Forecasts.add_to(plan)``: the plan's SageMaker forecast from earlier SageMaker runs of the same model,
  task and instance type; and, where the backend runs something else (the local backend's scaled-down
  run), the forecast of that run from that backend's own history;
- ``Forecasts.record_launch``: the forecast of what runs, kept with the lineage (job_runs);
- ``record_completion``: after a completed lineage's ending (a step of jobs/endings), its measured training
  throughput (the Trainer's ``train_samples_per_second``), start-up time (its attempt's wall time less
  ``train_runtime``) and what it took; the report puts the forecast next to it (reports.with_forecast).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from jobs.backend import TrainingBackend
from jobs.clock import Clock
from jobs.lineage import Attempt, Lineage
from jobs.planning.forecast import Forecast, forecast
from jobs.planning.plan import LaunchPlan
from jobs.store.runs import RunHistory
from jobs.store.store import Store

log = logging.getLogger(__name__)

#: The backend a plan's own forecast is for: the plan is a SageMaker plan whatever backend this bot runs.
PLAN_BACKEND = "sagemaker"
#: A run's measured throughput is kept only from an attempt that trained from the start: a resumed
#: attempt's train_samples_per_second counts the steps its checkpoint saved it as if it had trained them.
_THROUGHPUT = "train_samples_per_second"
_RUNTIME = "train_runtime"


class Forecasts:
    def __init__(self, store: Store, backend: TrainingBackend, clock: Clock) -> None:
        self._runs = RunHistory(store, clock)
        self._backend = backend

    def add_to(self, plan: LaunchPlan) -> LaunchPlan:
        """``plan`` with its forecast from the history, and the forecast of this backend's own run."""
        spec = plan.spec
        planned = forecast(spec, history=self._runs.past_runs(PLAN_BACKEND, spec))
        target = self._backend.forecast_target(plan)
        if target is None:
            return replace(plan, forecast=planned, run_forecast=None)
        history = self._runs.past_runs(self._backend.name, spec)
        own = forecast(spec, history=history, workload=target.workload, hardware=target.hardware)
        return replace(plan, forecast=planned, run_forecast=own)

    def record_launch(self, lineage_id: str, plan: LaunchPlan) -> None:
        own = plan.own_forecast
        if own is not None:
            self._runs.record_launch(lineage_id, self._backend.name, plan.spec, own)


def record_completion(
    store: Store, clock: Clock, lineage: Lineage, *, took_seconds: float | None, took_usd: float | None
) -> None:
    """Keep what the completed ``lineage`` measured and took, for later forecasts (once more is harmless)."""
    runs = RunHistory(store, clock)
    latest = lineage.latest_attempt
    speed, startup = measured(latest) if latest is not None else (None, None)
    runs.record_completed(
        lineage.id, samples_per_second=speed, startup_seconds=startup, took_seconds=took_seconds, took_usd=took_usd,
    )
    planned = runs.forecast_of(lineage.id)
    if planned is not None and planned.seconds is not None:
        log.info("%s on %s: forecast %.0f s, took %s s (basis %s; measured %s samples/s, start-up %s s)",
                 lineage.id, lineage.backend, planned.seconds, took_seconds, planned.basis, speed, startup)


def forecast_of(store: Store, clock: Clock, lineage_id: str) -> Forecast | None:
    return RunHistory(store, clock).forecast_of(lineage_id)


def measured(attempt: Attempt) -> tuple[float | None, float | None]:
    """(train samples a second, seconds that were not training) of a completed attempt, where it says."""
    speed = attempt.metrics.get(_THROUGHPUT)
    runtime = attempt.metrics.get(_RUNTIME)
    if attempt.resumed_from_step or not speed or speed <= 0:
        return None, None
    if runtime is None or attempt.ended_at is None:
        return float(speed), None
    wall = (attempt.ended_at - attempt.created_at).total_seconds()
    return float(speed), max(0.0, wall - float(runtime))

"""What one watch cycle did, for `trainbot watch --once`, the benchmarks and the tests; and the backend with
its calls counted, which bot/wiring.py puts between the watcher (and its controller) and the real backend."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from jobs.backend import StandIn, TrainingBackend
from jobs.records import JobSummary, MetricSeries, Progress, RemoteJob

if TYPE_CHECKING:
    from jobs.planning.forecast import ForecastTarget
    from jobs.planning.plan import LaunchPlan


@dataclass
class CycleResult:
    api_calls: int = 0  # backend port calls (list_changed counts once however many pages it read)
    listed: int = 0  # summaries list_changed returned
    described: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)  # "job: InProgress/Training -> InProgress/Interrupted"
    actions: list[str] = field(default_factory=list)  # "relaunched x-2", "notified interrupted x-1", ...
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """What `trainbot watch --once` prints: a count line, then each change, action and error."""
        head = (f"{self.api_calls} API calls, {self.listed} listed, {len(self.described)} described, "
                f"{len(self.changes)} changes, {len(self.actions)} actions, {len(self.errors)} errors")
        details = [f"  change: {c}" for c in self.changes] + [f"  action: {a}" for a in self.actions]
        return "\n".join([head, *details, *(f"  error: {e}" for e in self.errors)])


def change_key(job_name: str, remote: RemoteJob) -> str:
    """The outbox dedup key of one observed change of one job: announced once, whoever sees it."""
    return f"{job_name}:{remote.status.value}:{remote.secondary_status}"


class CallMeter(Protocol):
    """How many backend calls this thread has made so far (a cycle reads it before and after)."""

    def calls(self) -> int: ...


class CountedBackend:
    """The TrainingBackend port with every call that reaches the backend's API counted, per thread: a cycle
    on the watcher's thread counts its own calls, never a launch a chat thread made meanwhile. Console
    links, scaling notes and forecast targets are built locally and cost nothing."""

    def __init__(self, backend: TrainingBackend) -> None:
        self._backend = backend
        self.name = backend.name
        self._local = threading.local()

    def calls(self) -> int:
        return int(getattr(self._local, "count", 0))

    def _count(self) -> None:
        self._local.count = self.calls() + 1

    def launch(self, job_name: str, plan: LaunchPlan) -> None:
        self._count()
        self._backend.launch(job_name, plan)

    def describe(self, job_name: str) -> RemoteJob:
        self._count()
        return self._backend.describe(job_name)

    def list_changed(self, since: datetime | None) -> list[JobSummary]:
        self._count()
        return self._backend.list_changed(since)

    def stop(self, job_name: str) -> None:
        self._count()
        self._backend.stop(job_name)

    def log_tail(self, job_name: str, lines: int = 40) -> list[str]:
        self._count()
        return self._backend.log_tail(job_name, lines)

    def trained_model(self, job_name: str) -> str | None:
        """jobs.backend.StandIn, where the backend is one (read from its own records: not counted)."""
        return self._backend.trained_model(job_name) if isinstance(self._backend, StandIn) else None

    def metric_series(self, job_name: str) -> MetricSeries:
        self._count()
        return self._backend.metric_series(job_name)

    def progress(self, job_names: Sequence[str]) -> dict[str, Progress]:
        self._count()
        return self._backend.progress(job_names)

    def console_links(self, job_name: str, model_artifacts: str | None = None) -> dict[str, str]:
        return self._backend.console_links(job_name, model_artifacts)

    def scaling_note(self, plan: LaunchPlan) -> str | None:
        return self._backend.scaling_note(plan)

    def forecast_target(self, plan: LaunchPlan) -> ForecastTarget | None:
        return self._backend.forecast_target(plan)

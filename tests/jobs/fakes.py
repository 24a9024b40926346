"""A scripted in-memory TrainingBackend: a peer for service, watcher and handler tests (not a mock of them).

backend = ScriptedBackend(clock=clock)
backend.fail_launch(CapacityError("..."))             # the next launch raises it (job_name= to target one)
backend.script("j-1", remote(...), remote(...))       # describe("j-1") answers these in turn, last repeats
backend.set_remote("j-1", RemoteStatus.FAILED, failure_reason="CapacityError: ...")
backend.calls                                         # every call, in order: BackendCall(method, job_name, plan)
backend.created                                       # job names that launch() actually created
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jobs.clock import Clock
from jobs.errors import NotFound
from jobs.records import JobSummary, MetricSeries, Progress, RemoteJob, RemoteStatus
from tests.support.clock import FakeClock

if TYPE_CHECKING:
    from jobs.planning.plan import LaunchPlan


@dataclass(frozen=True)
class BackendCall:
    method: str  # launch, describe, list_changed, stop, log_tail, metric_series, console_links
    job_name: str | None
    plan: LaunchPlan | None = None


def remote(name: str, status: RemoteStatus = RemoteStatus.IN_PROGRESS, **fields: Any) -> RemoteJob:
    """A RemoteJob with defaults (secondary status Training)."""
    fields.setdefault("secondary_status", "Training" if status is RemoteStatus.IN_PROGRESS else status.value)
    return RemoteJob(name=name, status=status, **fields)


class ScriptedBackend:
    """In-memory TrainingBackend. Unscripted jobs it created answer InProgress (Stopped after stop())."""

    def __init__(self, *, clock: Clock | None = None, name: str = "fake") -> None:
        self.name = name
        self.clock = clock or FakeClock()
        self.calls: list[BackendCall] = []
        # Names launch() created, in order; launching an existing name again creates nothing.
        self.created: list[str] = []
        self.plans: dict[str, LaunchPlan] = {}
        self.stopped: list[str] = []
        #: Called with the job name inside launch(), before anything is created (e.g. to race or crash).
        self.on_launch: Callable[[str], None] | None = None
        self._launch_errors: deque[tuple[str | None, Exception]] = deque()
        self._scripts: dict[str, deque[RemoteJob | Exception]] = {}
        self._logs: dict[str, list[str]] = {}
        self._metrics: dict[str, MetricSeries] = {}
        self._progress: dict[str, Progress] = {}
        self._stop_errors: dict[str, Exception] = {}
        self._lock = threading.Lock()

    # -- scripting --------------------------------------------------------------------------------

    def fail_launch(self, error: Exception, *, job_name: str | None = None, times: int = 1) -> None:
        """The next ``times`` launches (of ``job_name``, or of any job) raise ``error``."""
        for _ in range(times):
            self._launch_errors.append((job_name, error))

    def script(self, job_name: str, *results: RemoteJob | Exception) -> None:
        """describe(job_name) returns (or raises) these in order; the last one repeats."""
        self._scripts[job_name] = deque(results)

    def set_remote(self, job_name: str, status: RemoteStatus, **fields: Any) -> RemoteJob:
        """From now on describe(job_name) answers this one record."""
        job = remote(job_name, status, **fields)
        self.script(job_name, job)
        return job

    def fail_stop(self, job_name: str, error: Exception) -> None:
        self._stop_errors[job_name] = error

    def set_logs(self, job_name: str, lines: list[str]) -> None:
        self._logs[job_name] = list(lines)

    def set_metrics(self, job_name: str, series: MetricSeries) -> None:
        self._metrics[job_name] = series

    def set_progress(self, job_name: str, progress: Progress) -> None:
        """progress([... job_name ...]) answers this for it from now on."""
        self._progress[job_name] = progress

    def calls_of(self, method: str) -> list[BackendCall]:
        return [c for c in self.calls if c.method == method]

    # -- the port ---------------------------------------------------------------------------------

    def launch(self, job_name: str, plan: LaunchPlan) -> None:
        self._record("launch", job_name, plan)
        if self.on_launch is not None:
            self.on_launch(job_name)
        with self._lock:
            error = self._take_launch_error(job_name)
            if error is not None:
                raise error
            if job_name in self.plans:
                return  # already exists: counts as launched, never a second job
            self.plans[job_name] = plan
            self.created.append(job_name)
            self.script(
                job_name,
                remote(
                    job_name,
                    created_at=self.clock.now(),
                    last_modified=self.clock.now(),
                    instance_type=plan.spec.instance_type,
                    instance_count=plan.spec.instance_count,
                    spot=plan.spec.spot,
                ),
            )

    def describe(self, job_name: str) -> RemoteJob:
        self._record("describe", job_name)
        with self._lock:
            script = self._scripts.get(job_name)
            if not script:
                raise NotFound(f"There is no training job {job_name!r} on the backend.")
            result = script.popleft() if len(script) > 1 else script[0]
        if isinstance(result, Exception):
            raise result
        return result

    def list_changed(self, since: datetime | None) -> list[JobSummary]:
        self._record("list_changed", None)
        with self._lock:
            current = [s[0] for s in self._scripts.values() if s and isinstance(s[0], RemoteJob)]
        changed = []
        for job in current:
            stamp = job.last_modified or job.created_at
            if since is None or stamp is None or stamp > since:
                changed.append(JobSummary(job.name, job.status, stamp))
        return changed

    def stop(self, job_name: str) -> None:
        self._record("stop", job_name)
        if job_name in self._stop_errors:
            raise self._stop_errors[job_name]
        with self._lock:
            script = self._scripts.get(job_name)
            if not script:
                raise NotFound(f"There is no training job {job_name!r} on the backend.")
            self.stopped.append(job_name)
            last = script[-1]
            if isinstance(last, RemoteJob) and len(script) == 1 and not last.status.is_terminal():
                now = self.clock.now()
                script[0] = replace(
                    last,
                    status=RemoteStatus.STOPPED,
                    secondary_status="Stopped",
                    ended_at=now,
                    last_modified=now,
                )

    def log_tail(self, job_name: str, lines: int = 40) -> list[str]:
        self._record("log_tail", job_name)
        return self._logs.get(job_name, [])[-lines:]

    def metric_series(self, job_name: str) -> MetricSeries:
        self._record("metric_series", job_name)
        return self._metrics.get(job_name, {})

    def console_links(self, job_name: str, model_artifacts: str | None = None) -> dict[str, str]:
        self._record("console_links", job_name)
        return {"job": f"fake://jobs/{job_name}", "logs": f"fake://logs/{job_name}"}

    def progress(self, job_names: Sequence[str]) -> dict[str, Progress]:
        self._record("progress", ",".join(job_names))
        return {name: self._progress[name] for name in job_names if name in self._progress}

    def scaling_note(self, plan: LaunchPlan) -> str | None:
        return None

    def forecast_target(self, plan: LaunchPlan) -> Any:
        return None

    # -- internals --------------------------------------------------------------------------------

    def _record(self, method: str, job_name: str | None, plan: LaunchPlan | None = None) -> None:
        with self._lock:
            self.calls.append(BackendCall(method, job_name, plan))

    def _take_launch_error(self, job_name: str) -> Exception | None:
        for index, (target, error) in enumerate(self._launch_errors):
            if target is None or target == job_name:
                del self._launch_errors[index]
                return error
        return None

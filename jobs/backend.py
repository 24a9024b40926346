"""The port every training backend implements: SageMaker, the local runner, test doubles.

Backends translate; they decide nothing. Recovery decisions live in `jobs.lifecycle.recovery`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from jobs.records import JobSummary, MetricSeries, Progress, RemoteJob

if TYPE_CHECKING:
    from jobs.planning.forecast import ForecastTarget
    from jobs.planning.plan import LaunchPlan


class TrainingBackend(Protocol):
    #: "sagemaker" or "local"; stored on each lineage.
    name: str

    def launch(self, job_name: str, plan: LaunchPlan) -> None:
        """Create the job. A job that already exists under this name counts as launched
        (returns normally), so a relaunch retried after a crash never makes two.
        Raises BackendError (or a subclass) with a sentence a person can act on."""
        ...

    def describe(self, job_name: str) -> RemoteJob:
        """Raises NotFound for an unknown job."""
        ...

    def list_changed(self, since: datetime | None) -> list[JobSummary]:
        """Jobs created or modified after `since` (all recent ones when None), every page."""
        ...

    def stop(self, job_name: str) -> None: ...

    def log_tail(self, job_name: str, lines: int = 40) -> list[str]: ...

    def metric_series(self, job_name: str) -> MetricSeries: ...

    def progress(self, job_names: Sequence[str]) -> dict[str, Progress]:
        """The latest progress of each of these running jobs that has logged any, read in as few calls
        as the backend allows (SageMaker: one GetMetricData call covers 500 queries), not one per job."""
        ...

    def console_links(self, job_name: str, model_artifacts: str | None = None) -> dict[str, str]:
        """Human links for the job, its logs and its model (URLs, or local paths); the model link is
        built from ``model_artifacts`` as the backend reported it, never guessed from the job name."""
        ...

    def scaling_note(self, plan: LaunchPlan) -> str | None:
        """How this backend departs from the plan, said on the plan card
        (the local backend: "local: tiny model, 200 examples"); None when it runs the plan as is."""
        ...

    def forecast_target(self, plan: LaunchPlan) -> ForecastTarget | None:
        """The work and hardware of the run this backend makes of the plan, where it departs from the plan
        (the local backend's scaled-down run on this machine); None when it runs the plan as is."""
        ...

"""The port every training backend implements (SageMaker, the local runner, test doubles), and the port of
what a backend that simulates spot capacity offers besides (the local backend).

Backends translate; they decide nothing. Recovery decisions live in `jobs.lifecycle.recovery`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

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


@runtime_checkable
class SimulatedSpot(Protocol):
    """What a backend that simulates spot capacity offers beside the TrainingBackend port (the local backend
    does; on SageMaker, AWS takes capacity and nobody asks for it): a reclaim on request, and what a job's
    own log says of its progress and its checkpoints (where it resumed from reaches everyone through
    RemoteJob, as on SageMaker). The console's reclaims and progress lines use it; bot/wiring.py says whether the backend it built is one."""

    def take_capacity(self, job_name: str) -> None:
        """Reclaim the running spot job's capacity as SageMaker's image lives it (its processes die with no
        signal the script sees); it ends Stopped / MaxWaitTimeExceeded. InvalidState for a job that is not
        a running spot job."""
        ...

    def job_progress(self, job_name: str) -> dict[str, float | int] | None:
        """The job's last progress line ({"step", "max_steps", "loss", "eta_s"}); None before its first.
        NotFound while the job has no folder yet (launching)."""
        ...

    def saved_checkpoint(self, job_name: str) -> bool:
        """Whether the job has a whole checkpoint on disk (a reclaim then costs only the steps after it)."""
        ...


@runtime_checkable
class StandIn(Protocol):
    """A backend that may train a stand-in for the spec's model (the local backend trains the tiny BERT offline):
    what the job's report and curves say trained."""

    def trained_model(self, job_name: str) -> str | None:
        """The model that really trained, where the backend stood one in; None where it trained the spec's."""
        ...


@runtime_checkable
class OwnCodeGate(Protocol):
    """A backend that can refuse a team's own code (code=) outright: the local backend where its sandbox is
    not working (serve and the CLI run own code only sandboxed). The command reader asks it before any git."""

    def own_code_refusal(self) -> str | None:
        """The sentence own code is refused with here, or None where it may run."""
        ...

"""Plain records that cross the TrainingBackend port, and who asked: what a backend reports of a job
(RemoteStatus, RemoteJob with its StatusTransitions, Progress, JobSummary, MetricPoint and MetricSeries,
all in SageMaker's vocabulary, which the local backend speaks too) and the Actor behind a command.

Lineages and attempts, the domain's own records, are in jobs/lineage.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any


class RemoteStatus(str, Enum):
    """SageMaker's TrainingJobStatus; the local backend reports the same values."""

    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"
    STOPPING = "Stopping"
    STOPPED = "Stopped"

    def is_terminal(self) -> bool:
        return self in (RemoteStatus.COMPLETED, RemoteStatus.FAILED, RemoteStatus.STOPPED)


@dataclass(frozen=True)
class StatusTransition:
    status: str  # SageMaker SecondaryStatus, e.g. "Training", "Interrupted"
    start: datetime | None
    end: datetime | None
    message: str = ""


@dataclass(frozen=True)
class RemoteJob:
    """What the backend says about one job, in SageMaker's vocabulary, as plain data."""

    name: str
    status: RemoteStatus
    secondary_status: str = ""  # Starting, Downloading, Training, Interrupted, MaxWaitTimeExceeded, ...
    transitions: tuple[StatusTransition, ...] = ()
    failure_reason: str = ""
    billable_seconds: int | None = None
    training_seconds: int | None = None
    final_metrics: dict[str, float] = field(default_factory=dict)
    model_artifacts: str | None = None  # S3ModelArtifacts, or a local folder
    resumed_from_step: int | None = None  # the checkpoint step training resumed from, where the backend knows
    steps_redone: int | None = None  # steps the interrupted attempt had trained past that checkpoint (lost)
    instance_type: str = ""
    instance_count: int = 1
    spot: bool = False
    created_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    last_modified: datetime | None = None


@dataclass(frozen=True)
class Progress:
    """Where a running job's training is, from the metrics it has logged so far."""

    step: int | None = None
    max_steps: int | None = None  # the script's own total, where the backend reads it
    loss: float | None = None  # the latest training loss
    eta_seconds: float | None = None  # the script's own estimate, where the backend reads it
    steps_per_second: float | None = None  # measured over the recent steps, where the backend can
    at: datetime | None = None  # when the newest figure was logged


@dataclass(frozen=True)
class JobSummary:
    """One row of a ListTrainingJobs page: enough to know whether to describe it."""

    name: str
    status: RemoteStatus
    last_modified: datetime | None


@dataclass(frozen=True)
class Actor:
    """Who asked, and from where. `via` is "slack", "console", "cli", "schedule" or "home" (a button
    on the Slack App Home tab, which has no channel)."""

    user_id: str
    channel_id: str | None = None
    groups: tuple[str, ...] = ()
    via: str = "cli"
    display: str = ""
    # From another organization than the bot's (a Slack Connect channel): let in only by their own ID.
    external: bool = False


@dataclass(frozen=True)
class MetricPoint:
    x: float  # the step for local jobs, seconds since the job started for SageMaker
    value: float


MetricSeries = dict[str, list[MetricPoint]]

JsonDict = dict[str, Any]

"""Plain records the core passes around: lineages, attempts, and what a backend reports.

A *lineage* is what a person launched (one `/train`); an *attempt* is one backend job of it.
Spot recovery adds attempts to the same lineage, all sharing one checkpoint URI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any


class LineageStatus(str, Enum):
    PENDING = "pending"  # recorded; the first attempt's launch is not confirmed yet
    RUNNING = "running"  # an attempt is on the backend (starting, training or interrupted)
    RELAUNCHING = "relaunching"  # capacity took the last attempt; a new one is due after the backoff
    COMPLETED = "completed"  # an attempt finished training; the model is saved
    FAILED = "failed"  # the user's code failed or the launch was refused; not retried
    STOPPED = "stopped"  # a person stopped it
    GAVE_UP = "gave_up"  # capacity kept failing past the restart cap or the fallback list

    def is_terminal(self) -> bool:
        return self in _TERMINAL_LINEAGE


_TERMINAL_LINEAGE = {
    LineageStatus.COMPLETED,
    LineageStatus.FAILED,
    LineageStatus.STOPPED,
    LineageStatus.GAVE_UP,
}


class AttemptStatus(str, Enum):
    LAUNCHING = "launching"  # recorded before the backend call; outcome not known yet
    RUNNING = "running"  # the backend has the job (InProgress or Stopping)
    COMPLETED = "completed"  # the backend says Completed
    FAILED = "failed"  # the backend says Failed (any reason; see failure_reason)
    STOPPED = "stopped"  # the backend says Stopped (by a person or MaxWaitTimeExceeded)
    LAUNCH_FAILED = "launch_failed"  # the create call was refused: no such job exists

    def is_terminal(self) -> bool:
        return self not in (AttemptStatus.LAUNCHING, AttemptStatus.RUNNING)


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
    """Who asked, and from where. `via` is "slack", "console", "cli" or "schedule"."""

    user_id: str
    channel_id: str | None = None
    groups: tuple[str, ...] = ()
    via: str = "cli"
    display: str = ""


@dataclass(frozen=True)
class MetricPoint:
    x: float  # the step for local jobs, seconds since the job started for SageMaker
    value: float


MetricSeries = dict[str, list[MetricPoint]]

JsonDict = dict[str, Any]

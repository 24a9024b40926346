"""The plain records the store hands out: lineages, attempts, queued notifications, audit entries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Row

from jobs.lifecycle.state import AttemptStatus, LineageStatus
from jobs.planning.spec import JobSpec


@dataclass(frozen=True)
class Attempt:
    lineage_id: str
    number: int
    job_name: str  # f"{lineage_id}-{number}"
    instance_type: str
    spot: bool
    status: AttemptStatus
    remote_status: str
    secondary_status: str
    failure_reason: str
    billable_seconds: int | None
    training_seconds: int | None
    metrics: dict[str, float]
    model_artifacts: str | None
    resumed_from_step: int | None  # checkpoint step this attempt started from
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None
    steps_redone: int | None = None  # steps past that checkpoint the interruption lost, so trained again


@dataclass(frozen=True)
class Lineage:
    id: str
    spec: JobSpec
    backend: str
    checkpoint_uri: str
    status: LineageStatus
    launched_by: str  # Actor.user_id
    origin: str  # Actor.via
    channel: str | None  # where its card lives (thread parent)
    message_ts: str | None
    schedule: str | None
    request_id: str | None
    estimated_usd: float
    restarts: int  # relaunches so far
    next_relaunch_at: datetime | None
    next_instance_type: str | None
    next_spot: bool | None
    created_at: datetime
    updated_at: datetime
    attempts: tuple[Attempt, ...]  # ordered by number
    launch_plan: dict[str, Any] | None = None  # LaunchPlan.stored() as approved; None before schema 30

    @property
    def latest_attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None


@dataclass(frozen=True)
class Notification:
    id: int
    kind: str
    lineage_id: str | None
    channel: str | None
    payload: dict[str, Any]
    dedup_key: str
    attempts: int
    next_try_at: datetime
    created_at: datetime


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: datetime
    user: str
    via: str
    action: str
    target: str
    detail: dict[str, Any]


def to_attempt(row: Row[Any]) -> Attempt:
    return Attempt(
        lineage_id=row.lineage_id,
        number=row.number,
        job_name=row.job_name,
        instance_type=row.instance_type,
        spot=bool(row.spot),
        status=AttemptStatus(row.status),
        remote_status=row.remote_status or "",
        secondary_status=row.secondary_status or "",
        failure_reason=row.failure_reason or "",
        billable_seconds=row.billable_seconds,
        training_seconds=row.training_seconds,
        metrics={k: float(v) for k, v in (row.metrics or {}).items()},
        model_artifacts=row.model_artifacts,
        resumed_from_step=row.resumed_from_step,
        created_at=row.created_at,
        updated_at=row.updated_at,
        ended_at=row.ended_at,
        steps_redone=row.steps_redone,
    )


def to_lineage(row: Row[Any], attempts: tuple[Attempt, ...]) -> Lineage:
    return Lineage(
        id=row.id,
        spec=JobSpec.model_validate(row.spec),
        backend=row.backend,
        checkpoint_uri=row.checkpoint_uri,
        status=LineageStatus(row.status),
        launched_by=row.launched_by,
        origin=row.origin,
        channel=row.channel,
        message_ts=row.message_ts,
        schedule=row.schedule,
        request_id=row.request_id,
        estimated_usd=float(row.estimated_usd),
        restarts=row.restarts,
        next_relaunch_at=row.next_relaunch_at,
        next_instance_type=row.next_instance_type,
        next_spot=row.next_spot,
        created_at=row.created_at,
        updated_at=row.updated_at,
        attempts=attempts,
        launch_plan=row.launch_plan,
    )

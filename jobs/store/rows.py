"""The store's row mappers (rows to the domain's lineages and attempts) and the records only the store has:
queued notifications, recorded endings and audit entries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Row

from jobs.lineage import Attempt, AttemptStatus, Lineage, LineageStatus
from jobs.planning.spec import JobSpec


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
class Ending:
    """A lineage's recorded ending and the progress of the steps after it (jobs/endings reads ``steps``)."""

    lineage_id: str
    outcome: LineageStatus
    job_name: str | None
    reason: str
    facts: dict[str, Any]
    steps: dict[str, dict[str, Any]]
    next_try_at: datetime
    created_at: datetime
    settled_at: datetime | None

    def done(self, step: str) -> bool:
        return bool((self.steps.get(step) or {}).get("done_at"))


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
        per_device_batch=row.per_device_train_batch_size,
        accumulation=row.gradient_accumulation_steps,
        forecast=dict(row.forecast) if row.forecast else None,
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


def to_ending(row: Row[Any]) -> Ending:
    return Ending(
        lineage_id=row.lineage_id,
        outcome=LineageStatus(row.outcome),
        job_name=row.job_name,
        reason=row.reason or "",
        facts=dict(row.facts or {}),
        steps={str(k): dict(v) for k, v in (row.steps or {}).items()},
        next_try_at=row.next_try_at,
        created_at=row.created_at,
        settled_at=row.settled_at,
    )

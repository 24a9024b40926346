"""What SageMaker's DescribeTrainingJob and ListTrainingJobs answer, as the core's plain records (aware UTC
times, known statuses)."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any

from jobs.records import JobSummary, RemoteJob, RemoteStatus, StatusTransition

logger = logging.getLogger(__name__)


def aware_utc(value: datetime) -> datetime:
    """botocore parses timestamps into local time; the core keeps aware UTC."""
    return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _maybe_aware(value: Any) -> datetime | None:
    return aware_utc(value) if isinstance(value, datetime) else None


def _status(value: Any) -> RemoteStatus:
    try:
        return RemoteStatus(str(value))
    except ValueError:
        logger.warning("unknown TrainingJobStatus %r; treated as InProgress", value)
        return RemoteStatus.IN_PROGRESS


def _transition(row: dict[str, Any]) -> StatusTransition:
    return StatusTransition(
        status=str(row.get("Status", "")),
        start=_maybe_aware(row.get("StartTime")),
        end=_maybe_aware(row.get("EndTime")),
        message=str(row.get("StatusMessage", "")),
    )


def _optional_int(value: Any) -> int | None:
    return int(value) if value is not None else None


def remote_job(response: dict[str, Any]) -> RemoteJob:
    """DescribeTrainingJob's answer as a plain record."""
    resources = response.get("ResourceConfig", {})
    return RemoteJob(
        name=str(response["TrainingJobName"]),
        status=_status(response.get("TrainingJobStatus")),
        secondary_status=str(response.get("SecondaryStatus", "")),
        transitions=tuple(_transition(row) for row in response.get("SecondaryStatusTransitions", [])),
        failure_reason=str(response.get("FailureReason", "")),
        billable_seconds=_optional_int(response.get("BillableTimeInSeconds")),
        training_seconds=_optional_int(response.get("TrainingTimeInSeconds")),
        final_metrics={
            str(row["MetricName"]): float(row["Value"])
            for row in response.get("FinalMetricDataList", [])
            if "MetricName" in row and "Value" in row
        },
        model_artifacts=response.get("ModelArtifacts", {}).get("S3ModelArtifacts"),
        instance_type=str(resources.get("InstanceType", "")),
        instance_count=int(resources.get("InstanceCount", 1)),
        spot=bool(response.get("EnableManagedSpotTraining", False)),
        created_at=_maybe_aware(response.get("CreationTime")),
        started_at=_maybe_aware(response.get("TrainingStartTime")),
        ended_at=_maybe_aware(response.get("TrainingEndTime")),
        last_modified=_maybe_aware(response.get("LastModifiedTime")),
    )


def job_summary(row: dict[str, Any]) -> JobSummary:
    return JobSummary(
        name=str(row["TrainingJobName"]),
        status=_status(row.get("TrainingJobStatus")),
        last_modified=_maybe_aware(row.get("LastModifiedTime")),
    )

"""Checks a deploy and a promotion share: which model a lineage serves, which task, and the endpoint caps
(TRAINBOT_MAX_INSTANCES, TRAINBOT_MAX_ENDPOINT_USD_PER_HOUR) on the instances a config would run."""

from __future__ import annotations

from jobs.endpoints import texts
from jobs.errors import BudgetExceeded, InvalidState, SpecError
from jobs.lineage import AttemptStatus, Lineage, LineageStatus
from jobs.planning.prices import hourly_usd, usd
from jobs.settings import Settings


def served_model(lineage: Lineage, backend: str) -> tuple[str, str]:
    """(model data, job name) of the attempt that completed with a model, on this backend."""
    if lineage.status is not LineageStatus.COMPLETED:
        raise InvalidState(
            f"{lineage.id} {lineage.status.phrase()}, not completed: only a finished "
            "job's model can be deployed; /job shows where it is."
        )
    if lineage.backend != backend:
        raise InvalidState(
            f"{lineage.id} was trained on the {lineage.backend} backend but this bot deploys to "
            f"{backend}: deploy it from a bot with TRAINBOT_BACKEND={lineage.backend}."
        )
    done = [a for a in lineage.attempts if a.status is AttemptStatus.COMPLETED and a.model_artifacts]
    if not done:
        raise InvalidState(f"{lineage.id} completed without saving a model, so there is nothing to deploy.")
    return str(done[-1].model_artifacts), done[-1].job_name


def task_of(lineage: Lineage, *, handler: bool = False) -> str:
    """An endpoint serves a task (HF_TASK); a job of a team's own code says it only if it was given task=, or
    brings its own handler (``handler``: then "" when it has no task, and the handler decides what it serves)."""
    if lineage.spec.task is None:
        if handler:
            return ""
        raise InvalidState(texts.NO_TASK.format(lineage=lineage.id))
    return lineage.spec.task


def check_caps(settings: Settings, backend: str, *, instance_type: str, instance_count: int,
               serverless: bool) -> None:
    """TRAINBOT_MAX_INSTANCES and TRAINBOT_MAX_ENDPOINT_USD_PER_HOUR, before anything is created."""
    if serverless:
        return  # billed per request: no instances, no hourly price
    most = settings.trainbot_max_instances
    if instance_count > most:
        raise SpecError(f"instance_count must be between 1 and {most} (TRAINBOT_MAX_INSTANCES), "
                        f"not {instance_count}.")
    cap = settings.trainbot_max_endpoint_usd_per_hour
    if cap is None or backend == "local":
        return
    hourly = hourly_usd(instance_type) * instance_count
    if hourly > cap:
        raise BudgetExceeded(
            f"{instance_count} x {instance_type} costs {usd(hourly)}/h, over the {usd(cap)}/h "
            "per-endpoint limit (TRAINBOT_MAX_ENDPOINT_USD_PER_HOUR): choose a smaller instance_type or "
            "fewer instances, or serverless=yes."
        )

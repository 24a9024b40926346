"""The recovery policy: what to do when a backend job changes. A pure decision; the watcher carries it out.

What SageMaker does, and what the bot must do (docs/ARCHITECTURE.md):
- InProgress + Interrupted: SageMaker waits for spot capacity and resumes by itself -> notify once;
- Stopped (MaxWaitTimeExceeded), Failed for capacity or an internal error -> a new attempt of the same
  lineage from the same checkpoints, after a doubling backoff, moving through the fallback instance types
  and, last, on-demand where the spec allows it; past the restart cap -> give up;
- Failed for the user's code (AlgorithmError, a non-zero exit) -> never relaunch, say why;
- Stopped by a person -> nothing more; Completed -> the final report.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jobs.lifecycle import events
from jobs.lifecycle.state import AttemptStatus, LineageStatus
from jobs.planning.instances import relaunch_types
from jobs.planning.pricing import attempt_worst_case_usd, cost_of, usd
from jobs.records import RemoteJob, RemoteStatus

if TYPE_CHECKING:
    from jobs.planning.spec import JobSpec
    from jobs.settings import Settings
    from jobs.store.store import Attempt, Lineage

INTERRUPTED = "Interrupted"
MAX_WAIT_EXCEEDED = "MaxWaitTimeExceeded"
MAX_RUNTIME_EXCEEDED = "MaxRuntimeExceeded"
#: The secondary status the watcher records on an attempt whose launch never reached the backend.
LAUNCH_LOST = "LaunchLost"

# Lower-cased fragments of FailureReason that mean "no capacity", or a SageMaker-side fault worth retrying.
_CAPACITY_MARKERS = ("capacityerror", "insufficientcapacity", "insufficient capacity", "insufficientinstancecapacity")
_INTERNAL_MARKERS = ("internalservererror", "internal server error", "internalfailure", "internal error")


@dataclass(frozen=True)
class RecoveryPolicy:
    backoff_seconds: float = 30.0  # the first relaunch's delay; doubles with each relaunch; 0 = at once
    max_restarts: int = 5  # the operator's cap on relaunches of one lineage (a spec may ask for fewer)
    max_backoff_seconds: float = 3600.0  # doubling stops here
    max_job_usd: float | None = None  # TRAINBOT_MAX_JOB_USD: the most a whole lineage may be billed

    @classmethod
    def from_settings(cls, settings: Settings) -> RecoveryPolicy:
        return cls(
            backoff_seconds=settings.trainbot_relaunch_backoff_seconds,
            max_restarts=settings.trainbot_max_restarts,
            max_job_usd=settings.trainbot_max_job_usd,
        )

    def restart_cap(self, spec: JobSpec) -> int:
        # The spec's own cap, never above the operator's.
        return min(spec.max_restarts, self.max_restarts)

    def backoff_for(self, restarts: int) -> float:
        if self.backoff_seconds <= 0:
            return 0.0
        return float(min(self.backoff_seconds * 2**restarts, self.max_backoff_seconds))


@dataclass(frozen=True)
class Relaunch:
    instance_type: str
    spot: bool
    not_before: datetime
    backoff_seconds: float
    reason: str  # why the last attempt ended, in words


@dataclass(frozen=True)
class Notify:
    kind: str  # one of jobs.lifecycle.events kinds
    reason: str = ""
    lineage_status: LineageStatus | None = None  # the lineage's new status; None leaves it as it is


@dataclass(frozen=True)
class GiveUp:
    reason: str


@dataclass(frozen=True)
class Nothing:
    pass


Decision = Relaunch | Notify | GiveUp | Nothing


def decide(
    lineage: Lineage,
    attempt: Attempt,
    remote: RemoteJob,
    policy: RecoveryPolicy,
    now: datetime,
    *,
    daily_left_usd: float | None = None,
) -> Decision:
    """What to do about `remote`, the backend's view of `attempt` (whose fields are the last ones seen).
    A relaunch is a spend decision: ``daily_left_usd`` is what today's budget leaves (None: no budget)."""
    if remote.status in (RemoteStatus.IN_PROGRESS, RemoteStatus.STOPPING):
        return _while_running(attempt, remote)
    if remote.status is RemoteStatus.COMPLETED:
        return Notify(events.COMPLETED, lineage_status=LineageStatus.COMPLETED)
    if lineage.status is LineageStatus.STOPPED:
        # A person stopped it; whatever SageMaker says about the ending, nothing more happens.
        return Notify(events.STOPPED, reason=remote.failure_reason, lineage_status=LineageStatus.STOPPED)
    lost = capacity_reason(remote)
    if lost is not None:
        return _relaunch_or_give_up(lineage, attempt, remote, lost, policy, now, daily_left_usd)
    if remote.status is RemoteStatus.STOPPED and remote.secondary_status != MAX_RUNTIME_EXCEEDED:
        return Notify(events.STOPPED, reason=remote.failure_reason, lineage_status=LineageStatus.STOPPED)
    return Notify(events.FAILED, reason=failure_text(remote), lineage_status=LineageStatus.FAILED)


def _while_running(attempt: Attempt, remote: RemoteJob) -> Decision:
    # Notify on the change into Interrupted only; the outbox's dedup key makes a storm one message.
    if remote.secondary_status == INTERRUPTED and attempt.secondary_status != INTERRUPTED:
        return Notify(events.INTERRUPTED, reason="spot capacity was reclaimed")
    return Nothing()


def capacity_reason(remote: RemoteJob) -> str | None:
    """Why the job ended for lack of capacity (or a SageMaker-side fault); None when it did not."""
    reason = remote.failure_reason.lower()
    if remote.secondary_status == LAUNCH_LOST:
        return "the launch never reached the backend"
    if remote.status is RemoteStatus.STOPPED and (
        remote.secondary_status == MAX_WAIT_EXCEEDED or MAX_WAIT_EXCEEDED.lower() in reason
    ):
        return "no spot capacity within max_wait (MaxWaitTimeExceeded)"
    if remote.status is not RemoteStatus.FAILED:
        return None
    if any(marker in reason for marker in _CAPACITY_MARKERS):
        return "no capacity for the instance type (CapacityError)"
    if any(marker in reason for marker in _INTERNAL_MARKERS):
        return "SageMaker had an internal error (InternalServerError)"
    return None


def failure_text(remote: RemoteJob) -> str:
    if remote.secondary_status == MAX_RUNTIME_EXCEEDED:
        return "the job ran past max_run before training finished; raise max_run or lower the steps"
    return remote.failure_reason or f"the job ended {remote.status.value} ({remote.secondary_status or 'no detail'})"


def _relaunch_or_give_up(
    lineage: Lineage, attempt: Attempt, remote: RemoteJob, reason: str, policy: RecoveryPolicy, now: datetime,
    daily_left_usd: float | None,
) -> Decision:
    cap = policy.restart_cap(lineage.spec)
    # Attempt n means n - 1 relaunches were made, even those whose create call was refused (the store's
    # restart count only moves on a launch that went through).
    used = max(lineage.restarts, attempt.number - 1)
    if used >= cap:
        return GiveUp(f"{reason}, and the restart cap of {cap} relaunches is reached")
    targets = _next_targets(lineage.spec, attempt, remote)
    if not targets:
        return GiveUp(f"{reason} on every fallback instance type ({', '.join(_tried(lineage.spec))})")
    target = _first_affordable(lineage, targets, policy.max_job_usd, daily_left_usd)
    if isinstance(target, GiveUp):
        return GiveUp(f"{reason}, and {target.reason}")
    # A launch that never happened is redone at once, on the same type: capacity was never tried.
    backoff = 0.0 if remote.secondary_status == LAUNCH_LOST else policy.backoff_for(used)
    return Relaunch(
        instance_type=target[0],
        spot=target[1],
        not_before=now + timedelta(seconds=backoff),
        backoff_seconds=backoff,
        reason=reason,
    )


def billed_usd(lineage: Lineage) -> float:
    """What the lineage's attempts have billed so far (an attempt still running counts what it billed yet)."""
    count = lineage.spec.instance_count
    return sum(cost_of(a.instance_type, count, a.billable_seconds or 0, a.spot) for a in lineage.attempts)


def _first_affordable(
    lineage: Lineage, targets: list[tuple[str, bool]], max_job_usd: float | None, daily_left_usd: float | None
) -> tuple[str, bool] | GiveUp:
    """The first target whose worst case fits both caps: a fallback that would break one is skipped."""
    billed = billed_usd(lineage)
    spec = lineage.spec
    for instance_type, spot in targets:
        worst = attempt_worst_case_usd(instance_type, spec.instance_count, spot, spec.max_run)
        if max_job_usd is not None and billed + worst > max_job_usd:
            continue
        if daily_left_usd is not None and worst > daily_left_usd:
            continue
        return instance_type, spot
    cheapest = min(attempt_worst_case_usd(t, spec.instance_count, s, spec.max_run) for t, s in targets)
    if max_job_usd is not None and billed + cheapest > max_job_usd:
        return GiveUp(
            f"another attempt could cost up to {usd(cheapest)} on top of the {usd(billed)} billed so far, "
            f"over the {usd(max_job_usd)} per-job cap (TRAINBOT_MAX_JOB_USD)"
        )
    return GiveUp(
        f"another attempt could cost up to {usd(cheapest)}, more than the {usd(max(daily_left_usd or 0.0, 0.0))} "
        "left of today's budget (TRAINBOT_DAILY_BUDGET_USD)"
    )


def candidates(spec: JobSpec) -> list[tuple[str, bool]]:
    """(instance type, spot) in the order relaunches try them: the spec's type, its fallbacks, then
    on-demand as the last resort for a spot job whose spec allows it."""
    order = [(name, spec.spot) for name in relaunch_types(spec.instance_type, spec.distribution)]
    if spec.spot and spec.on_demand_fallback:
        order.append((spec.instance.name, False))
    return order


def _next_targets(spec: JobSpec, attempt: Attempt, remote: RemoteJob) -> list[tuple[str, bool]]:
    """Where the next attempt may go, in order: the same type again when capacity was never the verdict,
    else the candidates after the one that just lost its capacity."""
    if remote.secondary_status == LAUNCH_LOST or _is_internal_error(remote):
        return [(attempt.instance_type, attempt.spot)]
    order = candidates(spec)
    here = (attempt.instance_type, attempt.spot)
    position = order.index(here) if here in order else 0
    return order[position + 1 :]


def _is_internal_error(remote: RemoteJob) -> bool:
    reason = remote.failure_reason.lower()
    return remote.status is RemoteStatus.FAILED and any(marker in reason for marker in _INTERNAL_MARKERS)


def _tried(spec: JobSpec) -> list[str]:
    return [f"{name}{'' if spot else ' on-demand'}" for name, spot in candidates(spec)]


def remote_from_attempt(attempt: Attempt) -> RemoteJob:
    """The last backend view mirrored into an attempt, so a decision can be redone from the store alone
    (after a crash between recording an ending and acting on it)."""
    status = _REMOTE_OF_ATTEMPT.get(attempt.status, RemoteStatus.IN_PROGRESS)
    if attempt.remote_status:
        status = RemoteStatus(attempt.remote_status)
    return RemoteJob(
        name=attempt.job_name,
        status=status,
        secondary_status=attempt.secondary_status,
        failure_reason=attempt.failure_reason,
        billable_seconds=attempt.billable_seconds,
        training_seconds=attempt.training_seconds,
        final_metrics=dict(attempt.metrics),
        model_artifacts=attempt.model_artifacts,
        instance_type=attempt.instance_type,
        spot=attempt.spot,
        ended_at=attempt.ended_at,
    )


_REMOTE_OF_ATTEMPT = {
    AttemptStatus.COMPLETED: RemoteStatus.COMPLETED,
    AttemptStatus.FAILED: RemoteStatus.FAILED,
    AttemptStatus.STOPPED: RemoteStatus.STOPPED,
    AttemptStatus.LAUNCH_FAILED: RemoteStatus.FAILED,
}

"""The recovery policy: what to do when a backend job changes. A pure decision: the controller
(jobs/lifecycle/controller.py) alone calls `decide()` and carries the decision out; the watcher only brings
it what the backend said.

What SageMaker does, and what the bot must do (docs/ARCHITECTURE.md):
- InProgress + Interrupted: SageMaker waits for spot capacity and resumes by itself -> notify once;
- Stopped (MaxWaitTimeExceeded), Failed for capacity or an internal error -> a new attempt of the same
  lineage from the same checkpoints, after a doubling backoff, moving through the lineage's fallbacks in
  the order TRAINBOT_RECOVERY_POLICY names (jobs.planning.fallbacks: the planned type, types with its
  accelerator count, on-demand where the spec allows it, then, for any-count, more accelerators with the
  global batch kept); past the last one, from the top again (capacity is often back in minutes); past the
  restart cap or the money caps -> give up, naming what was tried;
- Failed for the user's code (AlgorithmError, a non-zero exit) -> never relaunch, say why;
- Stopped by a person -> nothing more; Completed -> its ending (the report and the rest follow it, in
  jobs/endings).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from jobs.lifecycle import events
from jobs.lineage import AttemptStatus, LineageStatus
from jobs.planning.batch import BatchSettings, stored_batch
from jobs.planning.fallbacks import DEFAULT_ORDER, Candidate, Fallbacks, lineage_fallbacks
from jobs.planning.prices import attempt_worst_case_usd, cost_of, usd
from jobs.records import RemoteJob, RemoteStatus

if TYPE_CHECKING:
    from jobs.lineage import Attempt, Lineage
    from jobs.planning.spec import JobSpec
    from jobs.settings import Settings

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
    order: str = DEFAULT_ORDER  # TRAINBOT_RECOVERY_POLICY: the fallback order (jobs.planning.fallbacks)

    @classmethod
    def from_settings(cls, settings: Settings) -> RecoveryPolicy:
        return cls(
            backoff_seconds=settings.trainbot_relaunch_backoff_seconds,
            max_restarts=settings.trainbot_max_restarts,
            max_job_usd=settings.trainbot_max_job_usd,
            order=settings.trainbot_recovery_policy,
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
    batch: BatchSettings | None = None  # the settings that keep the approved global batch on instance_type
    planned: BatchSettings | None = None  # the approved batch


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
        return GiveUp(f"{reason}, and the restart cap of {cap} relaunches is reached (tried {tried(lineage)})")
    fallbacks = lineage_fallbacks_of(lineage, policy.order)
    targets = _next_targets(fallbacks, attempt, remote)
    target = _first_affordable(lineage, targets, policy.max_job_usd, daily_left_usd)
    if isinstance(target, GiveUp):
        return GiveUp(f"{reason}, and {target.reason} (tried {tried(lineage)})")
    # A launch that never happened is redone at once, on the same type: capacity was never tried.
    backoff = 0.0 if remote.secondary_status == LAUNCH_LOST else policy.backoff_for(used)
    return Relaunch(
        instance_type=target.instance_type,
        spot=target.spot,
        not_before=now + timedelta(seconds=backoff),
        backoff_seconds=backoff,
        reason=reason,
        batch=target.batch,
        planned=fallbacks.candidates[0].batch,
    )


def approved_batch(lineage: Lineage) -> BatchSettings:
    """The batch the lineage was approved with (its stored plan's)."""
    spec = lineage.spec
    return stored_batch(lineage.launch_plan, spec.hyperparameters, spec.instance_type, spec.instance_count)


def lineage_fallbacks_of(lineage: Lineage, order: str = DEFAULT_ORDER) -> Fallbacks:
    return lineage_fallbacks(lineage.spec, approved_batch(lineage), order)


def tried(lineage: Lineage) -> str:
    """``ml.p3.16xlarge (on-demand) 3 times, ml.p4d.24xlarge (on-demand)``: the attempts' types, in order."""
    counts: dict[str, int] = {}
    for past in lineage.attempts:
        words = f"{past.instance_type} ({'spot' if past.spot else 'on-demand'})"
        counts[words] = counts.get(words, 0) + 1
    return ", ".join(words + (f" {n} times" if n > 1 else "") for words, n in counts.items()) or "nothing"


def billed_usd(lineage: Lineage) -> float:
    """What the lineage's attempts have billed so far (an attempt still running counts what it billed yet)."""
    count = lineage.spec.instance_count
    return sum(cost_of(a.instance_type, count, a.billable_seconds or 0, a.spot) for a in lineage.attempts)


def _first_affordable(
    lineage: Lineage, targets: list[Candidate], max_job_usd: float | None, daily_left_usd: float | None
) -> Candidate | GiveUp:
    """The first target whose worst case fits both caps: a fallback that would break one is skipped."""
    billed = billed_usd(lineage)
    spec = lineage.spec
    for target in targets:
        worst = attempt_worst_case_usd(target.instance_type, spec.instance_count, target.spot, spec.max_run)
        if max_job_usd is not None and billed + worst > max_job_usd:
            continue
        if daily_left_usd is not None and worst > daily_left_usd:
            continue
        return target
    cheapest = min(attempt_worst_case_usd(t.instance_type, spec.instance_count, t.spot, spec.max_run)
                   for t in targets)
    if max_job_usd is not None and billed + cheapest > max_job_usd:
        return GiveUp(
            f"another attempt could cost up to {usd(cheapest)} on top of the {usd(billed)} billed so far, "
            f"over the {usd(max_job_usd)} per-job cap (TRAINBOT_MAX_JOB_USD)"
        )
    return GiveUp(
        f"another attempt could cost up to {usd(cheapest)}, more than the {usd(max(daily_left_usd or 0.0, 0.0))} "
        "left of today's budget (TRAINBOT_DAILY_BUDGET_USD)"
    )


def candidates(spec: JobSpec, order: str = DEFAULT_ORDER) -> list[tuple[str, bool]]:
    """(instance type, spot) in the order relaunches try them (a spec's own batch; see lineage_fallbacks_of)."""
    batch = stored_batch(None, spec.hyperparameters, spec.instance_type, spec.instance_count)
    return [(c.instance_type, c.spot) for c in lineage_fallbacks(spec, batch, order).candidates]


def _next_targets(fallbacks: Fallbacks, attempt: Attempt, remote: RemoteJob) -> list[Candidate]:
    """Where the next attempt may go, in order: the same type again when capacity was never the verdict,
    else the candidates after the one that just lost its capacity, and then from the top (the one that
    lost it last): capacity is often back in minutes, and the backoff doubles meanwhile."""
    order = list(fallbacks.candidates)
    here = fallbacks.index(attempt.instance_type, attempt.spot)
    if remote.secondary_status == LAUNCH_LOST or _is_internal_error(remote):
        return [order[here]] if here is not None else order[:1]
    if here is None:  # a type no longer among the fallbacks (the policy changed): the top
        return order
    return order[here + 1 :] + order[: here + 1]


def _is_internal_error(remote: RemoteJob) -> bool:
    reason = remote.failure_reason.lower()
    return remote.status is RemoteStatus.FAILED and any(marker in reason for marker in _INTERNAL_MARKERS)


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

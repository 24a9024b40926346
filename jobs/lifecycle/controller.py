"""Carrying out recovery decisions on one lineage, from the store alone.

The watcher hands a lineage here after an attempt ends, and its sweep hands every active lineage here each
cycle; both read only the store, so whatever step a dead process stopped at, the next call takes it up:
- an ended latest attempt (PENDING/RUNNING lineage): `decide`, announce, then a guarded move
  (COMPLETED / FAILED / STOPPED / GAVE_UP, or RELAUNCHING with the next type, spot and due time);
- a RELAUNCHING lineage: when due, JobService.relaunch (attempt `<lineage>-<n>`, same checkpoint URI);
  a latest attempt already running means the relaunch happened and only its record was cut short;
- a relaunch whose create call was refused is decided again, as if the new attempt had failed.
Announcements go first, moves second: a crash in between redoes both, and the outbox's dedup key makes it
one message.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jobs.backend import TrainingBackend
from jobs.clock import Clock
from jobs.errors import BackendError, BackendUnavailable, CapacityError, InvalidState
from jobs.lifecycle import events
from jobs.lifecycle.forecasts import record_completion
from jobs.lifecycle.recovery import (
    LAUNCH_LOST,
    Decision,
    GiveUp,
    Notify,
    RecoveryPolicy,
    Relaunch,
    decide,
    remote_from_attempt,
)
from jobs.lifecycle.service import JobService
from jobs.records import AttemptStatus, LineageStatus, RemoteJob, RemoteStatus
from jobs.reporting.plots import plot_lineage
from jobs.reporting.reports import build_report
from jobs.store.store import Attempt, Lineage, Store

log = logging.getLogger(__name__)

_LINEAGE_OF = {
    events.COMPLETED: LineageStatus.COMPLETED,
    events.FAILED: LineageStatus.FAILED,
    events.STOPPED: LineageStatus.STOPPED,
}


@dataclass
class CycleResult:
    api_calls: int = 0  # backend port calls (list_changed counts once however many pages it read)
    listed: int = 0  # summaries list_changed returned
    described: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)  # "job: InProgress/Training -> InProgress/Interrupted"
    actions: list[str] = field(default_factory=list)  # "relaunched x-2", "notified interrupted x-1", ...
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """What `trainbot watch --once` prints: a count line, then each change, action and error."""
        head = (f"{self.api_calls} API calls, {self.listed} listed, {len(self.described)} described, "
                f"{len(self.changes)} changes, {len(self.actions)} actions, {len(self.errors)} errors")
        details = [f"  change: {c}" for c in self.changes] + [f"  action: {a}" for a in self.actions]
        return "\n".join([head, *details, *(f"  error: {e}" for e in self.errors)])


class Settler:
    def __init__(
        self,
        store: Store,
        backend: TrainingBackend,
        service: JobService,
        clock: Clock,
        policy: RecoveryPolicy,
        plots_dir: Path,
    ) -> None:
        self._store = store
        self._backend = backend
        self._service = service
        self._clock = clock
        self._policy = policy
        self._plots_dir = plots_dir

    def settle(self, lineage: Lineage, cycle: CycleResult) -> None:
        """Carry out what the lineage's state calls for: an ended latest attempt's decision, or a due relaunch."""
        latest = lineage.latest_attempt
        if latest is None:
            return
        if lineage.status is LineageStatus.RELAUNCHING:
            self._relaunch_step(lineage, latest, cycle)
            return
        if not latest.status.is_terminal():
            return
        if lineage.status is LineageStatus.PENDING and latest.status is AttemptStatus.LAUNCH_FAILED \
                and latest.secondary_status != LAUNCH_LOST:
            return  # JobService.launch is recording its own refused launch
        remote = remote_from_attempt(latest)
        decision = decide(lineage, latest, remote, self._policy, self._clock.now())
        self._carry_out(lineage, latest, remote, decision, cycle, (LineageStatus.PENDING, LineageStatus.RUNNING))

    def _carry_out(
        self,
        lineage: Lineage,
        attempt: Attempt,
        remote: RemoteJob,
        decision: Decision,
        cycle: CycleResult,
        expected: tuple[LineageStatus, ...],
    ) -> None:
        # Announce first, then move: a crash in between redoes both, and the dedup key makes it one message.
        if isinstance(decision, Relaunch):
            self._schedule_relaunch(lineage, attempt, remote, decision, cycle, expected)
        elif isinstance(decision, GiveUp):
            payload = events.gave_up(lineage.id, attempt.job_name, decision.reason, len(lineage.attempts))
            self.enqueue(lineage, payload, f"{lineage.id}:gave_up", cycle)
            self._move(lineage, expected, LineageStatus.GAVE_UP, cycle)
        elif isinstance(decision, Notify) and decision.kind in _LINEAGE_OF:
            payload = self._ending_payload(lineage, attempt, decision)
            self.enqueue(lineage, payload, change_key(attempt.job_name, remote), cycle)
            self._move(lineage, expected, _LINEAGE_OF[decision.kind], cycle)

    def _ending_payload(self, lineage: Lineage, attempt: Attempt, decision: Notify) -> dict[str, Any]:
        if decision.kind == events.COMPLETED:
            ended = replace(lineage, status=LineageStatus.COMPLETED)
            report = build_report(ended, self._backend, now=self._clock.now())
            report = record_completion(self._store, self._clock, ended, report)  # teaches later forecasts
            png = plot_lineage(ended, self._backend, self._plots_dir / f"{lineage.id}.png")
            return events.completed(lineage.id, attempt.job_name, report.to_json(), str(png) if png else None)
        if decision.kind == events.FAILED:
            return events.failed(lineage.id, attempt.job_name, decision.reason, self._log_tail(attempt))
        return events.stopped(lineage.id, attempt.job_name, decision.reason)

    def _log_tail(self, attempt: Attempt) -> list[str]:
        if attempt.status is AttemptStatus.LAUNCH_FAILED:
            return []
        try:
            return self._backend.log_tail(attempt.job_name, events.LOG_TAIL_LINES)
        except BackendError as exc:  # the reason alone still tells the story
            log.warning("no log tail for %s: %s", attempt.job_name, exc)
            return []

    def _schedule_relaunch(
        self,
        lineage: Lineage,
        attempt: Attempt,
        remote: RemoteJob,
        decision: Relaunch,
        cycle: CycleResult,
        expected: tuple[LineageStatus, ...],
    ) -> None:
        note = events.relaunch_scheduled_note(decision.reason, decision.instance_type, decision.spot,
                                              decision.backoff_seconds)
        payload = events.state_line(lineage.id, attempt.job_name, remote.status.value, remote.secondary_status,
                                    note=note)
        self.enqueue(lineage, payload, change_key(attempt.job_name, remote), cycle)
        won = self._store.transition_lineage(
            lineage.id, expected, LineageStatus.RELAUNCHING, next_relaunch_at=decision.not_before,
            next_instance_type=decision.instance_type, next_spot=decision.spot,
        )
        if not won:
            return
        cycle.actions.append(f"{lineage.id}: relaunch due {decision.not_before.isoformat()}")
        fresh = self._store.get_lineage(lineage.id)
        latest = fresh.latest_attempt
        # The guard is on the status only: another watcher may have relaunched from the same snapshot and
        # moved the lineage back to RUNNING before our move (A-B-A). Its newer attempt then finishes the
        # relaunch (RELAUNCHING with a running latest attempt -> RUNNING) instead of starting another.
        if latest is not None and (latest.number != attempt.number or decision.not_before <= self._clock.now()):
            self._relaunch_step(fresh, latest, cycle)

    def _relaunch_step(self, lineage: Lineage, latest: Attempt, cycle: CycleResult) -> None:
        if latest.status is AttemptStatus.RUNNING:
            self._finish_relaunch(lineage, latest, cycle)  # launched; the record of it was cut short
            return
        if latest.status is AttemptStatus.LAUNCHING:
            return  # under way, or checked by describe each cycle until it is found or lost
        due = lineage.next_relaunch_at
        if due is not None and due > self._clock.now():
            return
        instance_type = lineage.next_instance_type or latest.instance_type
        spot = latest.spot if lineage.next_spot is None else lineage.next_spot
        try:
            attempt = self._service.relaunch(lineage, instance_type=instance_type, spot=spot)
        except InvalidState as exc:
            log.info("%s not relaunched: %s", lineage.id, exc.message)
            return
        except BackendError as exc:
            self._relaunch_refused(lineage, exc, cycle)
            return
        cycle.api_calls += 1  # the service's CreateTrainingJob
        if attempt.status is AttemptStatus.RUNNING:
            self._finish_relaunch(lineage, attempt, cycle, backoff=_backoff_of(lineage, latest))

    def _finish_relaunch(
        self, lineage: Lineage, attempt: Attempt, cycle: CycleResult, *, backoff: float | None = None
    ) -> None:
        if self.announce_relaunched(lineage, attempt, backoff, cycle):
            # The first to announce reports it: two watchers racing on one relaunch report it once.
            cycle.actions.append(f"relaunched {lineage.id} as {attempt.job_name} on {attempt.instance_type}")
        moved = self._store.transition_lineage(
            lineage.id, [LineageStatus.RELAUNCHING], LineageStatus.RUNNING, restarts=attempt.number - 1,
            next_relaunch_at=None, next_instance_type=None, next_spot=None,
        )
        if moved:
            cycle.actions.append(f"{lineage.id}: running again as {attempt.job_name}")

    def _relaunch_refused(self, lineage: Lineage, exc: BackendError, cycle: CycleResult) -> None:
        """The create call of a relaunch was refused: decide again, as if the new attempt had failed."""
        cycle.api_calls += 1
        fresh = self._store.get_lineage(lineage.id)
        refused = fresh.latest_attempt
        if refused is None or refused.status is not AttemptStatus.LAUNCH_FAILED:
            cycle.errors.append(f"{lineage.id}: relaunch failed: {exc.message}")
            return
        remote = RemoteJob(name=refused.job_name, status=RemoteStatus.FAILED, failure_reason=_refusal(exc),
                           instance_type=refused.instance_type, spot=refused.spot)
        decision = decide(fresh, refused, remote, self._policy, self._clock.now())
        cycle.actions.append(f"{refused.job_name}: launch refused ({exc.message})")
        self._carry_out(fresh, refused, remote, decision, cycle, (LineageStatus.RELAUNCHING,))

    # -- notifications and moves ------------------------------------------------------------------

    def announce_relaunched(
        self, lineage: Lineage, attempt: Attempt, backoff: float | None, cycle: CycleResult
    ) -> bool:
        payload = events.relaunched(
            lineage.id, attempt.job_name, attempt=attempt.number, instance_type=attempt.instance_type,
            spot=attempt.spot, backoff_seconds=backoff if backoff is not None else 0.0,
            checkpoint_uri=lineage.checkpoint_uri, resumed_from_step=attempt.resumed_from_step,
        )
        return self.enqueue(lineage, payload, f"{attempt.job_name}:relaunched", cycle)

    def enqueue(self, lineage: Lineage, payload: dict[str, Any], key: str, cycle: CycleResult) -> bool:
        queued = self._store.enqueue(kind=payload["kind"], payload=payload, dedup_key=key,
                                     lineage_id=lineage.id, channel=lineage.channel)
        if queued:
            cycle.actions.append(f"notified {payload['kind']} {payload.get('job_name') or lineage.id}")
        return queued

    def _move(
        self, lineage: Lineage, expected: tuple[LineageStatus, ...], new: LineageStatus, cycle: CycleResult
    ) -> None:
        if self._store.transition_lineage(lineage.id, expected, new, next_relaunch_at=None):
            cycle.actions.append(f"{lineage.id}: {new.value}")


def change_key(job_name: str, remote: RemoteJob) -> str:
    return f"{job_name}:{remote.status.value}:{remote.secondary_status}"


def _refusal(exc: BackendError) -> str:
    # Reasons the policy reads: capacity moves on to the next type, an outage retries the same one.
    if isinstance(exc, CapacityError):
        return f"CapacityError: {exc.message}"
    if isinstance(exc, BackendUnavailable):
        return f"InternalServerError: {exc.message}"
    return exc.message


def _backoff_of(lineage: Lineage, ended: Attempt) -> float | None:
    if lineage.next_relaunch_at is None or ended.ended_at is None:
        return None
    return max(0.0, (lineage.next_relaunch_at - ended.ended_at).total_seconds())

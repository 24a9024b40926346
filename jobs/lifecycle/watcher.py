"""The watcher: one cycle notices every change of the jobs we track, records what it saw and hands it on.

A cycle costs O(changed jobs / 100) API calls, not one per job:
1. `list_changed(since=cursor - overlap)`: pages of recently modified jobs. The cursor is the newest
   LastModifiedTime seen, in the backend's clock (no skew with ours), kept in the store's meta table;
2. describe only the tracked jobs (active attempts) whose summary changed since this process last saw it,
   plus LAUNCHING attempts (a launch whose outcome was never recorded);
3. hand the active lineages to the controller (jobs/lifecycle/controller.py), which reads the store alone:
   an ended latest attempt gets its decision carried out, a due RELAUNCHING lineage is relaunched.

The watcher observes and records what it saw (an attempt's remote fields, its ending, a lost launch); it
decides nothing and announces nothing: each observation goes to the controller (`seen` before it is
recorded, so a notice is never lost to a crash; `ended` after an attempt's ending is recorded), which alone
calls `decide()`. A lineage the controller could not carry on with ends, announced, so one lineage's fault
never keeps the cursor from moving.

Exactly once: every step is a guarded store transition or a deduplicated outbox entry, and step 3 reads only
the store, so a watcher killed between any two steps (or two watchers on one database) ends with exactly one
new attempt and one announcement of each change.

``api_calls`` of a cycle comes from the call meter it is given (bot/wiring.py wraps the backend in a
`CountedBackend` and passes it as both); without one it stays 0.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

from jobs import lineage as moves
from jobs.backend import TrainingBackend
from jobs.clock import Clock
from jobs.errors import BackendError, NotFound
from jobs.lifecycle.controller import Controller
from jobs.lifecycle.cycle import CallMeter, CycleResult
from jobs.lifecycle.recovery import LAUNCH_LOST, RecoveryPolicy
from jobs.lineage import Attempt, AttemptStatus
from jobs.records import JobSummary, RemoteJob, RemoteStatus
from jobs.settings import Settings
from jobs.store.store import Store

__all__ = ["CycleResult", "Watcher", "cursor_key", "watched_key"]

log = logging.getLogger(__name__)


def cursor_key(backend_name: str) -> str:
    """Each backend's cursor is in its own clock (LastModifiedTime as it reports it), so each has its own."""
    return f"watcher.cursor.{backend_name}"


def watched_key(backend_name: str) -> str:
    """When a full cycle over this backend's jobs last ran (our clock, ISO): `trainbot status` reads it."""
    return f"watcher.watched.{backend_name}"


_MAX_LINEAGES = 100_000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)  # a stand-in time for a summary with none (those sort last)


class Watcher:
    def __init__(
        self,
        store: Store,
        backend: TrainingBackend,
        clock: Clock,
        settings: Settings,
        *,
        policy: RecoveryPolicy | None = None,
        controller: Controller | None = None,
        meter: CallMeter | None = None,
        launch_grace_seconds: float = 300.0,
        overlap_seconds: float = 120.0,
    ) -> None:
        self._store = store
        self._backend = backend
        self._clock = clock
        self._settings = settings
        self._meter = meter
        # A launch may take a while (the SDK uploads the code first): only after this is "not found" lost.
        self._grace = timedelta(seconds=launch_grace_seconds)
        # LastModifiedTime is eventually consistent: re-list a little before the cursor.
        self._overlap = timedelta(seconds=overlap_seconds)
        self._controller = controller or Controller.from_settings(store, backend, clock, settings, policy=policy)
        self._seen: dict[str, datetime] = {}  # job -> LastModifiedTime already handled by this process

    # -- the loop ---------------------------------------------------------------------------------

    def poll_once(self) -> CycleResult:
        cycle = CycleResult()
        calls_before = self._calls()
        # Only this backend's jobs: a console on the local backend and a SageMaker bot may share a store.
        active = {a.job_name: a for a in self._store.active_attempts(backend=self._backend.name)}
        summaries = self._list_changed(cycle)
        for name, summary in self._to_describe(summaries, active).items():
            self._guard(cycle, name, lambda a=active[name], s=summary: self._check(a, s, cycle))
        # A change that failed to be handled keeps the cursor put, so the next cycle lists it again.
        handled = summaries is not None and not cycle.errors
        lineages = self._store.list_lineages(active_only=True, limit=_MAX_LINEAGES, backend=self._backend.name)
        for lineage in lineages:
            self._guard(cycle, lineage.id, lambda ln=lineage: self._controller.settle(ln, cycle))
        if handled and summaries is not None:
            self._advance_cursor(summaries)
        self._seen = {k: v for k, v in self._seen.items() if k in active}
        self._store.set_meta(watched_key(self._backend.name), self._clock.now().isoformat())
        cycle.api_calls = self._calls() - calls_before
        return cycle

    def check_now(self, job_names: list[str]) -> CycleResult:
        """Look at these jobs now (an event said they changed): describe each one the store tracks as
        launching or running and mirror it as `poll_once` does (an ending is settled at once); the lineage
        of a named job that already ended is settled from the store (a relaunch that fell due). Names that
        are not ours cost no API call."""
        cycle = CycleResult()
        calls_before = self._calls()
        for name in dict.fromkeys(job_names):
            self._guard(cycle, name, lambda n=name: self._check_named(n, cycle))
        cycle.api_calls = self._calls() - calls_before
        return cycle

    def _calls(self) -> int:
        return self._meter.calls() if self._meter is not None else 0

    def _check_named(self, job_name: str, cycle: CycleResult) -> None:
        try:
            lineage = self._store.find(job_name)
        except NotFound:
            return  # not one of ours
        attempt = next((a for a in lineage.attempts if a.job_name == job_name), None)
        if lineage.backend != self._backend.name or attempt is None:
            return
        if attempt.status in (AttemptStatus.LAUNCHING, AttemptStatus.RUNNING):
            self._check(attempt, None, cycle)
        elif not lineage.status.is_terminal():
            self._controller.settle(lineage, cycle)

    def _guard(self, cycle: CycleResult, what: str, step: Any) -> None:
        # One job's trouble never blocks the others; the cursor stays put so the next cycle redoes it.
        try:
            step()
        except Exception as exc:
            log.exception("watcher: %s failed", what)
            cycle.errors.append(f"{what}: {exc}")

    # -- 1. what changed --------------------------------------------------------------------------

    def _list_changed(self, cycle: CycleResult) -> list[JobSummary] | None:
        cursor = self._store.get_meta(cursor_key(self._backend.name))
        since = datetime.fromisoformat(cursor) - self._overlap if cursor else None
        try:
            summaries = self._backend.list_changed(since)
        except BackendError as exc:
            log.warning("could not list changed jobs: %s", exc)
            cycle.errors.append(f"list_changed: {exc.message}")
            return None
        cycle.listed = len(summaries)
        return summaries

    def _to_describe(
        self, summaries: list[JobSummary] | None, active: dict[str, Attempt]
    ) -> dict[str, JobSummary | None]:
        changed: list[JobSummary] = []
        for summary in summaries or []:
            attempt = active.get(summary.name)
            if attempt is None:
                continue  # not ours, or already ended in our records
            seen = self._seen.get(summary.name)
            if seen is not None and seen == summary.last_modified and attempt.remote_status == summary.status.value:
                continue
            changed.append(summary)
        # Oldest change first: what follows from an ending (a model package's version, an announcement's place
        # in the channel) keeps the order the jobs ended in, not the listing's newest-first order.
        changed.sort(key=lambda s: (s.last_modified is None, s.last_modified or _EPOCH, s.name))
        chosen: dict[str, JobSummary | None] = {summary.name: summary for summary in changed}
        for attempt in active.values():
            if attempt.status is AttemptStatus.LAUNCHING:
                chosen.setdefault(attempt.job_name, None)
        return chosen

    def _advance_cursor(self, summaries: list[JobSummary]) -> None:
        stamps = [s.last_modified for s in summaries if s.last_modified is not None]
        if not stamps:
            return
        newest = max(stamps)
        cursor = self._store.get_meta(cursor_key(self._backend.name))
        if cursor is None or newest > datetime.fromisoformat(cursor):
            self._store.set_meta(cursor_key(self._backend.name), newest.isoformat())

    # -- 2. describe and mirror -------------------------------------------------------------------

    def _check(self, attempt: Attempt, summary: JobSummary | None, cycle: CycleResult) -> None:
        cycle.described.append(attempt.job_name)
        try:
            remote = self._backend.describe(attempt.job_name)
        except NotFound:
            self._not_found(attempt, cycle)
            return
        if (remote.status.value, remote.secondary_status) != (attempt.remote_status, attempt.secondary_status):
            before = f"{attempt.remote_status or '-'}/{attempt.secondary_status or '-'}"
            cycle.changes.append(f"{attempt.job_name}: {before} -> {remote.status.value}/{remote.secondary_status}")
        self._controller.seen(attempt, remote, cycle)  # before the record: a crash redoes the notice
        if self._record(attempt, remote):
            self._controller.ended(attempt, cycle)
        if summary is not None and summary.last_modified is not None:
            self._seen[attempt.job_name] = summary.last_modified

    def _not_found(self, attempt: Attempt, cycle: CycleResult) -> None:
        if attempt.status is not AttemptStatus.LAUNCHING:
            log.warning("%s is RUNNING in the store but unknown to the backend", attempt.job_name)
            return
        if self._clock.now() - attempt.created_at < self._grace:
            return  # its launch may still be under way
        # The launch never reached the backend: record that; settling relaunches it exactly once.
        lost = self._store.transition_attempt(
            attempt.job_name, moves.ATTEMPT_NOT_LAUNCHED,
            remote_status=RemoteStatus.FAILED.value, secondary_status=LAUNCH_LOST,
            failure_reason="the launch was never confirmed and the backend has no such job",
        )
        if lost:
            cycle.actions.append(f"launch of {attempt.job_name} lost")

    def _record(self, attempt: Attempt, remote: RemoteJob) -> bool:
        """Mirror what the backend said into the attempt; True when this call recorded its ending."""
        if attempt.status is AttemptStatus.LAUNCHING:
            self._store.transition_attempt(attempt.job_name, moves.ATTEMPT_CONFIRMED)
        fields = _mirrored(remote)
        ended = moves.ATTEMPT_ENDING.get(remote.status.value)
        if ended is None:
            self._store.update_attempt(attempt.job_name, **fields)
            return False
        return self._store.transition_attempt(attempt.job_name, ended, **fields)


def _mirrored(remote: RemoteJob) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "remote_status": remote.status.value,
        "secondary_status": remote.secondary_status,
        "failure_reason": remote.failure_reason,
        "billable_seconds": remote.billable_seconds,
        "training_seconds": remote.training_seconds,
    }
    if remote.final_metrics:
        fields["metrics"] = dict(remote.final_metrics)
    if remote.model_artifacts:
        fields["model_artifacts"] = remote.model_artifacts
    if remote.resumed_from_step is not None:
        fields["resumed_from_step"] = remote.resumed_from_step
    if remote.steps_redone is not None:
        fields["steps_redone"] = remote.steps_redone
    if remote.ended_at is not None:
        fields["ended_at"] = remote.ended_at
    return fields

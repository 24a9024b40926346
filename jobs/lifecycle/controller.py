"""The one owner of a lineage's life after "launch requested": the only code that decides, and the only code
with side effects from then on.

JobService checks a launch and records it (lineage PENDING with its approved plan, attempt 1 LAUNCHING);
the watcher observes the backend, records what it saw into the attempts and hands each observation here.
Everything else is here, and reads the store alone, so whatever step a dead process stopped at, the next
call takes it up:
- ``start``: attempt 1's create call, then CONFIRM_LAUNCH (a refusal ends the lineage FAILED, with why);
- ``seen``: a running attempt's change, as the watcher saw it: the lineage's launch confirmed, and the
  notice it calls for (`decide` says Interrupted or a state line; the first sight of a relaunched attempt);
- ``settle`` an ended latest attempt (PENDING/RUNNING lineage): `decide`, then a named move
  (COMPLETE / FAIL / STOP / GIVE_UP, or SCHEDULE_RELAUNCH with the next type, spot and due time);
- ``settle`` a due RELAUNCHING lineage: the *stored* plan on the next type and spot, as attempt
  ``<lineage>-<n>`` (the checkpoint URI announced is the one launched, by construction); a latest attempt
  already running means the relaunch happened and only its record was cut short;
- a relaunch whose create call was refused or raised is decided again, as if the new attempt had failed;
- ``stop``: a person's stop.
An ending is one write: the move and its facts (why, on which attempt) in one transaction (store.endings).
The report, the curves, the log tail, the history record and the announcement are built after it, by
jobs/endings, and retried there: a report that cannot be drawn delays a message, never changes an ending.
Notices of a running lineage go first, moves second: a crash in between redoes both, and the outbox's
dedup key makes it one message. Any other failure while carrying out a decision ends the lineage GAVE_UP
with the reason: never a lineage in a state no code leaves.
"""

from __future__ import annotations

import logging
from typing import Any

from jobs import lineage as moves
from jobs.backend import TrainingBackend
from jobs.budget import SpendLedger
from jobs.clock import Clock
from jobs.errors import BackendError, BackendUnavailable, CapacityError, NotFound, TrainbotError
from jobs.lifecycle import events
from jobs.lifecycle.cycle import CycleResult, change_key
from jobs.lifecycle.forecasts import Forecasts
from jobs.lifecycle.recovery import (
    LAUNCH_LOST,
    Decision,
    GiveUp,
    Notify,
    RecoveryPolicy,
    Relaunch,
    capacity_reason,
    decide,
    remote_from_attempt,
)
from jobs.lineage import Attempt, AttemptStatus, EndingFacts, Lineage, LineageStatus
from jobs.planning.batch import change_words, used_batch
from jobs.planning.forecast import Forecast
from jobs.planning.plan import LaunchPlan, build_plan
from jobs.records import Actor, RemoteJob, RemoteStatus
from jobs.settings import Settings
from jobs.store.store import Store

log = logging.getLogger(__name__)

_ENDING_MOVE = {events.COMPLETED: moves.COMPLETE, events.FAILED: moves.FAIL, events.STOPPED: moves.STOP}


class Controller:
    def __init__(
        self,
        store: Store,
        backend: TrainingBackend,
        clock: Clock,
        policy: RecoveryPolicy,
        ledger: SpendLedger,
    ) -> None:
        self._store = store
        self._backend = backend
        self._clock = clock
        self._policy = policy
        self._ledger = ledger
        self._forecasts = Forecasts(store, backend, clock)

    @classmethod
    def from_settings(
        cls, store: Store, backend: TrainingBackend, clock: Clock, settings: Settings,
        *, policy: RecoveryPolicy | None = None,
    ) -> Controller:
        return cls(
            store, backend, clock,
            policy or RecoveryPolicy.from_settings(settings),
            SpendLedger.from_settings(store, clock, settings),
        )

    # -- the first attempt and a person's stop ----------------------------------------------------

    def start(self, lineage: Lineage, plan: LaunchPlan, actor: Actor) -> Lineage:
        """Attempt 1's create call. Any exception from the backend ends the lineage FAILED with its reason
        (no job exists); a TrainbotError is raised on for the person who asked."""
        job_name = f"{lineage.id}-1"
        try:
            self._backend.launch(job_name, plan)
        except Exception as exc:
            reason = _launch_error_text(exc)
            self._store.transition_attempt(job_name, moves.ATTEMPT_NOT_LAUNCHED, failure_reason=reason)
            ending = EndingFacts(job_name, reason, {"told_directly": True})  # the caller hears it, raised
            self._store.transition_lineage(lineage.id, moves.FAIL, ending=ending)
            self._store.audit(actor, "launch.failed", lineage.id, {"job_name": job_name, "reason": reason})
            if isinstance(exc, TrainbotError):
                raise
            log.exception("launch of %s raised", job_name)
            raise BackendError(f"The launch of {lineage.id} failed: {reason}") from None
        # Guarded: the watcher may have confirmed it already; either way it is running now.
        self._store.transition_attempt(job_name, moves.ATTEMPT_CONFIRMED)
        if not self._store.transition_lineage(lineage.id, moves.CONFIRM_LAUNCH):
            self._stop_if_ended(lineage.id, job_name)
        log.info("launched %s as %s", lineage.id, job_name)
        return self._store.get_lineage(lineage.id)

    def stop(self, lineage: Lineage, actor: Actor) -> bool:
        """Stop the running attempt and move the lineage STOPPED; False when it had already ended."""
        latest = lineage.latest_attempt
        if latest is not None and not latest.status.is_terminal():
            try:
                self._backend.stop(latest.job_name)
            except NotFound:
                log.info("%s has no backend job to stop (its launch never went through)", latest.job_name)
        who = actor.display or actor.user_id
        ending = EndingFacts(latest.job_name if latest else None, f"stopped by {who}",
                             {"announce_key": f"{lineage.id}:stopped", "stopped_by": who})
        if not self._store.transition_lineage(lineage.id, moves.STOP, ending=ending):
            return False
        self._store.audit(actor, "stop", lineage.id, {"job_name": latest.job_name if latest else None})
        return True

    # -- what the watcher saw ---------------------------------------------------------------------

    def seen(self, attempt: Attempt, remote: RemoteJob, cycle: CycleResult) -> None:
        """The watcher saw ``remote``, a change of the running ``attempt`` (its fields are the last ones seen),
        and is about to record it: confirm the lineage's launch and queue the notice the change calls for."""
        lineage = self._store.get_lineage(attempt.lineage_id)
        if attempt.status is AttemptStatus.LAUNCHING:
            # The launch went through; its record did not (a crash, or another thread is just finishing).
            self._store.transition_lineage(lineage.id, moves.CONFIRM_LAUNCH)
        if remote.resumed_from_step is not None and attempt.resumed_from_step is None:
            self._announce_resumed(lineage, attempt, remote, cycle)
        if (remote.status.value, remote.secondary_status) == (attempt.remote_status, attempt.secondary_status):
            return
        if not attempt.remote_status and attempt.number > 1:
            self._announce_relaunched(lineage, attempt, None, cycle)
        if remote.status.is_terminal():
            return  # the ending is announced after the decision that settles it
        decision = decide(lineage, attempt, remote, self._policy, self._clock.now())
        if isinstance(decision, Notify) and decision.kind == events.INTERRUPTED:
            payload = events.interrupted(lineage.id, attempt.job_name, attempt.instance_type)
        else:
            note = remote.transitions[-1].message if remote.secondary_status == "Downloading" and remote.transitions \
                else ""  # the local image runtime's build: how far it is
            payload = events.state_line(lineage.id, attempt.job_name, remote.status.value, remote.secondary_status,
                                        note=note)
        self._enqueue(lineage, payload, change_key(attempt.job_name, remote), cycle)

    def _announce_resumed(self, lineage: Lineage, attempt: Attempt, remote: RemoteJob, cycle: CycleResult) -> None:
        """Once an attempt's log says which checkpoint it resumed from, the thread hears it (once: the key)."""
        payload = events.resumed(lineage.id, attempt.job_name, step=remote.resumed_from_step or 0,
                                 redone=remote.steps_redone, checkpoint_uri=self._checkpoints_of(lineage, attempt))
        self._enqueue(lineage, payload, f"{attempt.job_name}:resumed", cycle)

    def _checkpoints_of(self, lineage: Lineage, attempt: Attempt) -> str:
        """Where a person finds the checkpoints: the backend's own place for them (a local run's folder, never
        the s3://<TRAINBOT_BUCKET>/... it stands in for), else the lineage's checkpoint URI."""
        try:
            return self._backend.console_links(attempt.job_name).get("checkpoints") or lineage.checkpoint_uri
        except TrainbotError:
            return lineage.checkpoint_uri

    def ended(self, attempt: Attempt, cycle: CycleResult) -> None:
        """The watcher recorded ``attempt``'s ending: settle its lineage now rather than in the sweep, so
        detection to relaunch stays milliseconds however many lineages the sweep reads (the sweep still
        catches it if this process dies right here). A lineage a person stopped has ended already."""
        lineage = self._store.get_lineage(attempt.lineage_id)
        if not lineage.status.is_terminal():
            self.settle(lineage, cycle)

    # -- settling ---------------------------------------------------------------------------------

    def settle(self, lineage: Lineage, cycle: CycleResult) -> None:
        """Carry out what the lineage's state calls for; a failure to do so ends it, announced."""
        try:
            self._settle(lineage, cycle)
        except Exception as exc:  # noqa: BLE001 - any fault here must end as a recorded state
            log.exception("could not settle %s", lineage.id)
            self._end_after_fault(lineage, exc, cycle)

    def _settle(self, lineage: Lineage, cycle: CycleResult) -> None:
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
            return  # start() is recording its own refused launch
        remote = remote_from_attempt(latest)
        self._decide_and_carry_out(lineage, latest, remote, cycle, relaunching=False)

    def _decide_and_carry_out(
        self, lineage: Lineage, attempt: Attempt, remote: RemoteJob, cycle: CycleResult, *, relaunching: bool
    ) -> None:
        now = self._clock.now()
        # Today's spend is read only when a relaunch (a spend decision) is on the table.
        daily_left = self._ledger.left_today(now) if capacity_reason(remote) is not None else None
        decision = decide(lineage, attempt, remote, self._policy, now, daily_left_usd=daily_left)
        self._carry_out(lineage, attempt, remote, decision, cycle, relaunching=relaunching)

    def _carry_out(
        self, lineage: Lineage, attempt: Attempt, remote: RemoteJob, decision: Decision, cycle: CycleResult,
        *, relaunching: bool,
    ) -> None:
        if isinstance(decision, Relaunch):
            self._schedule_relaunch(lineage, attempt, remote, decision, cycle, relaunching=relaunching)
        elif isinstance(decision, GiveUp):
            self._give_up(lineage, attempt, decision.reason, cycle)
        elif isinstance(decision, Notify) and decision.kind in _ENDING_MOVE:
            facts = EndingFacts(attempt.job_name, decision.reason,
                                {"announce_key": change_key(attempt.job_name, remote)})
            self._end(lineage, _ENDING_MOVE[decision.kind], facts, cycle)

    def _give_up(self, lineage: Lineage, attempt: Attempt, reason: str, cycle: CycleResult) -> None:
        facts = EndingFacts(attempt.job_name, reason,
                            {"announce_key": f"{lineage.id}:gave_up", "attempts": len(lineage.attempts)})
        self._end(lineage, moves.GIVE_UP, facts, cycle)

    def _end(self, lineage: Lineage, move: moves.Move[LineageStatus], facts: EndingFacts, cycle: CycleResult) -> None:
        """The move and the ending's facts, in one write; what follows an ending is jobs/endings' work."""
        if self._store.transition_lineage(lineage.id, move, ending=facts, next_relaunch_at=None):
            cycle.actions.append(f"{lineage.id}: {move.target.value}")

    def _end_after_fault(self, lineage: Lineage, exc: Exception, cycle: CycleResult) -> None:
        """The bot itself could not carry on with this lineage: end it, with why, so no cycle retries it forever."""
        reason = f"trainbot could not carry on with it ({_launch_error_text(exc)})"
        fresh = self._store.get_lineage(lineage.id)
        latest = fresh.latest_attempt
        if fresh.status.is_terminal() or latest is None or not latest.status.is_terminal():
            # A job is still running (or nothing is left to end): the next cycle settles it again.
            cycle.errors.append(f"{lineage.id}: {reason}")
            return
        self._give_up(fresh, latest, reason, cycle)

    # -- relaunching ------------------------------------------------------------------------------

    def _schedule_relaunch(
        self, lineage: Lineage, attempt: Attempt, remote: RemoteJob, decision: Relaunch, cycle: CycleResult,
        *, relaunching: bool,
    ) -> None:
        change = change_words(decision.planned, decision.batch) if decision.batch and decision.planned else ""
        note = events.relaunch_scheduled_note(decision.reason, decision.instance_type, decision.spot,
                                              decision.backoff_seconds, change)
        payload = events.state_line(lineage.id, attempt.job_name, remote.status.value, remote.secondary_status,
                                    note=note)
        self._enqueue(lineage, payload, change_key(attempt.job_name, remote), cycle)
        move = moves.RESCHEDULE_RELAUNCH if relaunching else moves.SCHEDULE_RELAUNCH
        won = self._store.transition_lineage(
            lineage.id, move, next_relaunch_at=decision.not_before,
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
        attempt = self._relaunch(lineage, latest, cycle)
        if attempt is not None and attempt.status is AttemptStatus.RUNNING:
            self._finish_relaunch(lineage, attempt, cycle, backoff=_backoff_of(lineage, latest))

    def _relaunch(self, lineage: Lineage, latest: Attempt, cycle: CycleResult) -> Attempt | None:
        """A new attempt of ``lineage``: its stored plan on the chosen type and spot, exactly once (the
        attempt number comes from the snapshot decided on: two watchers ask for the same one)."""
        instance_type = lineage.next_instance_type or latest.instance_type
        spot = latest.spot if lineage.next_spot is None else lineage.next_spot
        number = latest.number + 1
        # Resolved before the attempt is recorded: a plan that cannot be replayed ends the lineage, announced.
        # It keeps the approved global batch on the new type; the attempt records the settings it uses and
        # the forecast of the run there (the card's ETA and forecast of the rest follow it).
        plan = approved_plan(lineage).for_attempt(instance_type=instance_type, spot=spot)
        per_device, accumulation = plan.recorded_batch()
        own = self._attempt_forecast(plan)
        attempt = self._store.add_attempt(lineage.id, number=number, instance_type=instance_type, spot=spot,
                                          per_device_batch=per_device, accumulation=accumulation,
                                          forecast=own.to_json() if own is not None else None)
        if attempt is None:
            log.info("attempt %d of %s was already made by another process", number, lineage.id)
            return self._store.get_attempt(f"{lineage.id}-{number}")
        self._store.audit(None, "relaunch", lineage.id,
                          {"job_name": attempt.job_name, "instance_type": instance_type, "spot": spot,
                           "per_device_train_batch_size": per_device, "gradient_accumulation_steps": accumulation})
        if self._store.get_lineage(lineage.id).status.is_terminal():
            self._store.transition_attempt(attempt.job_name, moves.ATTEMPT_NOT_LAUNCHED,
                                           failure_reason="the job was stopped or ended before its relaunch")
            return None
        try:
            self._backend.launch(attempt.job_name, plan)
        except Exception as exc:  # a refusal, or anything else: a failed attempt under the restart cap
            self._relaunch_refused(lineage, attempt, exc, cycle)
            return None
        self._store.transition_attempt(attempt.job_name, moves.ATTEMPT_CONFIRMED)
        return self._store.get_attempt(attempt.job_name)

    def _attempt_forecast(self, plan: LaunchPlan) -> Forecast | None:
        """The forecast of ``plan`` on its type; a relaunch goes ahead without one if it cannot be made."""
        try:
            return self._forecasts.add_to(plan).own_forecast
        except Exception:  # noqa: BLE001 - a forecast is a courtesy; the relaunch is the point
            log.exception("no forecast for the relaunch of %s on %s", plan.lineage_id, plan.spec.instance_type)
            return None

    def _finish_relaunch(
        self, lineage: Lineage, attempt: Attempt, cycle: CycleResult, *, backoff: float | None = None
    ) -> None:
        if self._announce_relaunched(lineage, attempt, backoff, cycle):
            # The first to announce reports it: two watchers racing on one relaunch report it once.
            cycle.actions.append(f"relaunched {lineage.id} as {attempt.job_name} on {attempt.instance_type}")
        moved = self._store.transition_lineage(
            lineage.id, moves.FINISH_RELAUNCH, restarts=attempt.number - 1,
            next_relaunch_at=None, next_instance_type=None, next_spot=None,
        )
        if moved:
            cycle.actions.append(f"{lineage.id}: running again as {attempt.job_name}")
        else:
            self._stop_if_ended(lineage.id, attempt.job_name)

    def _relaunch_refused(self, lineage: Lineage, attempt: Attempt, exc: Exception, cycle: CycleResult) -> None:
        """The create call of a relaunch failed: record the attempt, then decide again as if it had failed."""
        reason = _refusal(exc)
        if not isinstance(exc, BackendError):
            log.error("relaunch of %s raised %s", attempt.job_name, reason)
        self._store.transition_attempt(attempt.job_name, moves.ATTEMPT_NOT_LAUNCHED, failure_reason=reason)
        self._store.audit(None, "relaunch.failed", lineage.id, {"job_name": attempt.job_name, "reason": reason})
        cycle.actions.append(f"{attempt.job_name}: launch refused ({reason})")
        fresh = self._store.get_lineage(lineage.id)
        refused = self._store.get_attempt(attempt.job_name)
        remote = RemoteJob(name=refused.job_name, status=RemoteStatus.FAILED, failure_reason=reason,
                           instance_type=refused.instance_type, spot=refused.spot)
        self._decide_and_carry_out(fresh, refused, remote, cycle, relaunching=True)

    # -- notices --------------------------------------------------------------------------------------

    def _announce_relaunched(
        self, lineage: Lineage, attempt: Attempt, backoff: float | None, cycle: CycleResult
    ) -> bool:
        plan = approved_plan(lineage)
        planned = plan.approved_batch
        used = used_batch(planned, attempt.instance_type, attempt.per_device_batch, attempt.accumulation)
        payload = events.relaunched(
            lineage.id, attempt.job_name, attempt=attempt.number, instance_type=attempt.instance_type,
            spot=attempt.spot, backoff_seconds=backoff if backoff is not None else 0.0,
            checkpoint_uri=plan.checkpoint_uri, resumed_from_step=attempt.resumed_from_step,
            planned=planned, used=used,
        )
        return self._enqueue(lineage, payload, f"{attempt.job_name}:relaunched", cycle)

    def _enqueue(self, lineage: Lineage, payload: dict[str, Any], key: str, cycle: CycleResult) -> bool:
        queued = self._store.outbox.enqueue(kind=payload["kind"], payload=payload, dedup_key=key,
                                            lineage_id=lineage.id, channel=lineage.channel)
        if queued:
            cycle.actions.append(f"notified {payload['kind']} {payload.get('job_name') or lineage.id}")
        return queued

    def _stop_if_ended(self, lineage_id: str, job_name: str) -> None:
        # Stopped while we launched: the new job must not train on, unwatched and unpaid for.
        if self._store.get_lineage(lineage_id).status.is_terminal():
            log.warning("%s ended while %s was launching; stopping that job", lineage_id, job_name)
            self._backend.stop(job_name)


def approved_plan(lineage: Lineage) -> LaunchPlan:
    """The plan the lineage was launched with. Lineages recorded before plans were stored are rebuilt
    from their spec into their *own* checkpoint prefix, never from today's TRAINBOT_BUCKET."""
    if lineage.launch_plan is not None:
        return LaunchPlan.from_stored(lineage.spec, lineage.id, lineage.launch_plan)
    bucket = lineage.checkpoint_uri.removeprefix("s3://").split("/", 1)[0]
    return build_plan(lineage.spec, bucket=bucket, lineage_id=lineage.id,
                      launched_by=lineage.launched_by, origin=lineage.origin)


def _launch_error_text(exc: Exception) -> str:
    if isinstance(exc, TrainbotError):
        return exc.message
    # Not a sentence of ours (ValueError: embedded null byte): its kind and the start of its text.
    return f"{type(exc).__name__}: {str(exc)[:200]}" if str(exc) else type(exc).__name__


def _refusal(exc: Exception) -> str:
    # Reasons the policy reads: capacity moves on to the next type, an outage retries the same one.
    if isinstance(exc, CapacityError):
        return f"CapacityError: {exc.message}"
    if isinstance(exc, BackendUnavailable):
        return f"InternalServerError: {exc.message}"
    return _launch_error_text(exc)


def _backoff_of(lineage: Lineage, ended: Attempt) -> float | None:
    if lineage.next_relaunch_at is None or ended.ended_at is None:
        return None
    return max(0.0, (lineage.next_relaunch_at - ended.ended_at).total_seconds())

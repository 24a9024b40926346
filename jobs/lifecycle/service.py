"""The use-cases the handlers and the CLI call: plan, launch, relaunch, get, list, stop.

Launch records before it calls the backend and completes the record after, so a crash in between leaves a
lineage PENDING with attempt 1 LAUNCHING: "the launch was asked for, its outcome is unknown". The watcher
reconciles such records (describe the job: found -> RUNNING, not found -> launch again or mark it failed).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable
from datetime import datetime, time, timezone
from typing import Any

from jobs.backend import TrainingBackend
from jobs.clock import Clock
from jobs.errors import BudgetExceeded, InvalidState, NotFound, PermissionDenied, TrainbotError
from jobs.lifecycle.forecasts import Forecasts
from jobs.permissions import AccessPolicy
from jobs.planning.grammar import parse_command
from jobs.planning.plan import LINEAGE_PLACEHOLDER, LaunchPlan, build_plan, checkpoint_uri
from jobs.planning.pricing import check_job_budget, usd
from jobs.planning.spec import JobSpec, spec_from_fields
from jobs.records import Actor, AttemptStatus, LineageStatus
from jobs.settings import Settings
from jobs.store.store import Attempt, DuplicateLineage, Lineage, Store

log = logging.getLogger(__name__)

#: A lineage id must leave room for "-<attempt>" within SageMaker's 63-character job names.
MAX_LINEAGE_ID = 50
LINEAGE_ID = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?")
_TASK_SHORT = {"question-answering": "qa", "text-classification": "cls"}
_ACTIVE_LINEAGE = tuple(s for s in LineageStatus if not s.is_terminal())


def default_lineage_id(spec: JobSpec) -> str:
    """``{preset or task-short}-{8 hex}``: readable in a list, unique, a valid job-name prefix."""
    stem = spec.preset or _TASK_SHORT.get(spec.task, spec.task)
    stem = re.sub(r"[^a-zA-Z0-9]+", "-", stem).strip("-")[: MAX_LINEAGE_ID - 9] or "job"
    return f"{stem}-{secrets.token_hex(4)}"


class JobService:
    def __init__(
        self,
        *,
        store: Store,
        backend: TrainingBackend,
        settings: Settings,
        clock: Clock,
        new_lineage_id: Callable[[JobSpec], str] | None = None,
    ) -> None:
        self._store = store
        self._backend = backend
        self._settings = settings
        self._clock = clock
        self._new_id = new_lineage_id or default_lineage_id
        self._policy = AccessPolicy.from_settings(settings)
        self._forecasts = Forecasts(store, backend, clock)

    @property
    def policy(self) -> AccessPolicy:
        return self._policy

    def plan(self, text: str) -> LaunchPlan:
        """What ``text`` would launch, with no network and no record."""
        spec = self._parse(text)
        return self._forecasts.add_to(build_plan(
            spec,
            bucket=self._settings.trainbot_bucket,
            lineage_id=LINEAGE_PLACEHOLDER,
            launched_by="",
            origin="",
            max_restarts=self._settings.trainbot_max_restarts,
            max_job_usd=self._settings.trainbot_max_job_usd,
        ))

    # -- launch -----------------------------------------------------------------------------------

    def launch(
        self,
        text_or_spec: str | JobSpec,
        *,
        actor: Actor,
        request_id: str | None = None,
        schedule: str | None = None,
    ) -> Lineage:
        """Check, record, launch. Same ``request_id`` twice -> the first lineage, no second launch."""
        spec = self._parse(text_or_spec) if isinstance(text_or_spec, str) else text_or_spec
        self._guarded(actor, "launch", request_id or "-", lambda: self._policy.check_can_use(actor))
        if request_id is not None and (existing := self._store.find_by_request(request_id)) is not None:
            log.info("request %s already launched %s", request_id, existing.id)
            return existing
        lineage_id = self._lineage_id(spec)
        plan = self._forecasts.add_to(build_plan(
            spec,
            bucket=self._settings.trainbot_bucket,
            lineage_id=lineage_id,
            launched_by=actor.user_id,
            origin=actor.via,
            max_restarts=self._settings.trainbot_max_restarts,
            max_job_usd=self._settings.trainbot_max_job_usd,
        ))
        self._guarded(actor, "launch", lineage_id, lambda: self._check_budgets(plan))
        try:
            lineage = self._record_launch(plan, actor, request_id, schedule)
        except DuplicateLineage:
            # Two processes raced on one request id (a Slack retry): the other one recorded it first.
            if request_id is not None and (existing := self._store.find_by_request(request_id)) is not None:
                return existing
            raise
        self._forecasts.record_launch(lineage.id, plan)
        return self._start(lineage, plan, actor)

    def _record_launch(
        self, plan: LaunchPlan, actor: Actor, request_id: str | None, schedule: str | None
    ) -> Lineage:
        bucket = self._settings.trainbot_bucket
        lineage = self._store.create_lineage(
            lineage_id=plan.lineage_id,
            spec=plan.spec,
            backend=self._backend.name,
            checkpoint_uri=checkpoint_uri(bucket, plan.lineage_id),
            actor=actor,
            estimated_usd=plan.cost.worst_case_usd,
            request_id=request_id,
            schedule=schedule,
        )
        self._store.add_attempt(
            lineage.id, number=1, instance_type=plan.spec.instance_type, spot=plan.spec.spot
        )
        self._store.audit(
            actor,
            "launch",
            lineage.id,
            {
                "job_name": f"{lineage.id}-1",
                "instance_type": plan.spec.instance_type,
                "instance_count": plan.spec.instance_count,
                "spot": plan.spec.spot,
                "estimated_usd": round(plan.cost.worst_case_usd, 2),
                "request_id": request_id,
                "schedule": schedule,
            },
        )
        return lineage

    def _start(self, lineage: Lineage, plan: LaunchPlan, actor: Actor) -> Lineage:
        job_name = f"{lineage.id}-1"
        try:
            self._backend.launch(job_name, plan)
        except TrainbotError as exc:  # ConfigError and SpecError too: no job exists
            self._store.transition_attempt(
                job_name, [AttemptStatus.LAUNCHING], AttemptStatus.LAUNCH_FAILED, failure_reason=exc.message
            )
            self._store.transition_lineage(lineage.id, [LineageStatus.PENDING], LineageStatus.FAILED)
            self._store.audit(
                actor, "launch.failed", lineage.id, {"job_name": job_name, "reason": exc.message}
            )
            raise
        # Guarded: the watcher may have reconciled it already; either way it is running now.
        self._store.transition_attempt(job_name, [AttemptStatus.LAUNCHING], AttemptStatus.RUNNING)
        if not self._store.transition_lineage(lineage.id, [LineageStatus.PENDING], LineageStatus.RUNNING):
            self._stop_if_ended(lineage.id, job_name)
        log.info("launched %s as %s", lineage.id, job_name)
        return self._store.get_lineage(lineage.id)

    def _check_budgets(self, plan: LaunchPlan) -> None:
        check_job_budget(plan.cost, self._settings.trainbot_max_job_usd)
        daily = self._settings.trainbot_daily_budget_usd
        if daily is None:
            return
        spent = self._store.estimated_spend_since(_start_of_utc_day(self._clock.now()))
        if spent + plan.cost.worst_case_usd > daily:
            raise BudgetExceeded(
                f"Today's jobs could already cost up to {usd(spent)} and this one up to "
                f"{usd(plan.cost.worst_case_usd)}, over the {usd(daily)} daily limit (TRAINBOT_DAILY_BUDGET_USD): "
                "wait until 00:00 UTC, make the job smaller or shorter, or ask an admin to raise the limit."
            )

    # -- relaunch ---------------------------------------------------------------------------------

    def relaunch(
        self, lineage: Lineage, *, instance_type: str, spot: bool, actor: Actor | None = None
    ) -> Attempt:
        """A new attempt of ``lineage`` from its checkpoints (same lineage id, so the same checkpoint URI).

        The attempt number comes from the ``lineage`` the caller decided on, not a fresh read: two watchers
        acting on the same snapshot both ask for the same number and only one of them launches."""
        spec = self._respec(lineage.spec, instance_type=instance_type, spot=spot)
        number = max((a.number for a in lineage.attempts), default=0) + 1
        attempt = self._store.add_attempt(
            lineage.id, number=number, instance_type=spec.instance_type, spot=spot
        )
        if attempt is None:
            log.info("attempt %d of %s was already made by another process", number, lineage.id)
            return self._store.get_attempt(f"{lineage.id}-{number}")
        self._store.audit(
            actor,
            "relaunch",
            lineage.id,
            {
                "job_name": attempt.job_name,
                "instance_type": spec.instance_type,
                "spot": spot,
            },
        )
        if self._store.get_lineage(lineage.id).status.is_terminal():
            return self._abandon(attempt, "the job was stopped or ended before its relaunch")
        plan = build_plan(
            spec,
            bucket=self._settings.trainbot_bucket,
            lineage_id=lineage.id,
            launched_by=lineage.launched_by,
            origin=lineage.origin,
        )
        try:
            self._backend.launch(attempt.job_name, plan)
        except TrainbotError as exc:  # ConfigError and SpecError too: no job exists
            # The lineage keeps its status (RELAUNCHING): what comes next is the watcher's decision.
            self._store.transition_attempt(
                attempt.job_name,
                [AttemptStatus.LAUNCHING],
                AttemptStatus.LAUNCH_FAILED,
                failure_reason=exc.message,
            )
            self._store.audit(
                actor, "relaunch.failed", lineage.id, {"job_name": attempt.job_name, "reason": exc.message}
            )
            raise
        self._store.transition_attempt(attempt.job_name, [AttemptStatus.LAUNCHING], AttemptStatus.RUNNING)
        self._mark_relaunched(lineage.id, attempt)
        return self._store.get_attempt(attempt.job_name)

    def _respec(self, spec: JobSpec, *, instance_type: str, spot: bool) -> JobSpec:
        # Revalidated rather than model_copy(update=...): a switch to or from spot changes max_wait,
        # and a fallback type must still satisfy the spec's rules.
        fields: dict[str, Any] = spec.model_dump(mode="json")
        fields.update(instance_type=instance_type, spot=spot)
        if not spot:
            fields["max_wait"] = None
        return spec_from_fields(fields, max_instances=self._settings.trainbot_max_instances)

    def _mark_relaunched(self, lineage_id: str, attempt: Attempt) -> None:
        moved = self._store.transition_lineage(
            lineage_id,
            _ACTIVE_LINEAGE,
            LineageStatus.RUNNING,
            restarts=attempt.number - 1,
            next_relaunch_at=None,
            next_instance_type=None,
            next_spot=None,
        )
        if not moved:
            self._stop_if_ended(lineage_id, attempt.job_name)

    def _stop_if_ended(self, lineage_id: str, job_name: str) -> None:
        # Stopped while we launched: the new job must not train on, unwatched and unpaid for.
        if self._store.get_lineage(lineage_id).status.is_terminal():
            log.warning("%s ended while %s was launching; stopping that job", lineage_id, job_name)
            self._backend.stop(job_name)

    def _abandon(self, attempt: Attempt, reason: str) -> Attempt:
        self._store.transition_attempt(
            attempt.job_name, [AttemptStatus.LAUNCHING], AttemptStatus.LAUNCH_FAILED, failure_reason=reason
        )
        raise InvalidState(f"Job {attempt.lineage_id} was not relaunched: {reason}.")

    # -- queries and stop -------------------------------------------------------------------------

    def get(self, ref: str) -> Lineage:
        return self._store.find(ref)

    def list(self, *, active_only: bool = False, limit: int = 50) -> list[Lineage]:
        return self._store.list_lineages(active_only=active_only, limit=limit)

    def attach_message(self, lineage_id: str, channel: str, ts: str) -> None:
        self._store.set_message(lineage_id, channel, ts)

    def stop(self, ref: str, *, actor: Actor) -> Lineage:
        """Stop the lineage's running attempt and mark the lineage STOPPED (launcher or admin only)."""
        lineage = self._store.find(ref)
        self._guarded(
            actor, "stop", lineage.id, lambda: self._policy.check_can_manage(actor, lineage, verb="stop")
        )
        if lineage.status.is_terminal():
            raise _already_ended(lineage)
        self._check_same_backend(lineage, "stop")
        latest = lineage.latest_attempt
        if latest is not None and not latest.status.is_terminal():
            try:
                self._backend.stop(latest.job_name)
            except NotFound:
                log.info("%s has no backend job to stop (its launch never went through)", latest.job_name)
        if not self._store.transition_lineage(lineage.id, _ACTIVE_LINEAGE, LineageStatus.STOPPED):
            raise _already_ended(self._store.get_lineage(lineage.id))
        self._store.audit(actor, "stop", lineage.id, {"job_name": latest.job_name if latest else None})
        return self._store.get_lineage(lineage.id)

    # -- helpers ----------------------------------------------------------------------------------

    def _check_same_backend(self, lineage: Lineage, verb: str) -> None:
        # A console (local) and a SageMaker bot may share one store; each acts on its own jobs only.
        if lineage.backend != self._backend.name:
            raise InvalidState(
                f"{lineage.id} runs on the {lineage.backend} backend and this bot runs {self._backend.name}: "
                f"{verb} it from a bot with TRAINBOT_BACKEND={lineage.backend}."
            )

    def _parse(self, text: str) -> JobSpec:
        return parse_command(text, max_instances=self._settings.trainbot_max_instances)

    def _lineage_id(self, spec: JobSpec) -> str:
        lineage_id = self._new_id(spec)
        if len(lineage_id) > MAX_LINEAGE_ID or not LINEAGE_ID.fullmatch(lineage_id):
            raise ValueError(f"lineage id {lineage_id!r} is not a valid SageMaker job-name prefix")
        return lineage_id

    def _guarded(self, actor: Actor, action: str, target: str, check: Callable[[], None]) -> None:
        """Run a permission or budget check; a refusal is audited, then raised."""
        try:
            check()
        except (PermissionDenied, BudgetExceeded) as exc:
            self._store.audit(
                actor, f"{action}.refused", target, {"reason": exc.message, "kind": type(exc).__name__}
            )
            raise


def _start_of_utc_day(now: datetime) -> datetime:
    return datetime.combine(now.astimezone(timezone.utc).date(), time.min, tzinfo=timezone.utc)


def _already_ended(lineage: Lineage) -> InvalidState:
    return InvalidState(
        f"Job {lineage.id} has already ended ({lineage.status.value}); there is nothing to stop."
    )

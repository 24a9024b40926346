"""The use-cases the handlers and the CLI call: plan, launch, get, list, stop.

Launch checks (access, the per-job cap, today's budget), records the lineage PENDING with its approved plan
and attempt 1 LAUNCHING, and hands it to the controller, the only code with side effects from there on. A
crash in between leaves "the launch was asked for, its outcome is unknown", which the watcher reconciles
(describe the job: found -> RUNNING, not found -> launch again or mark it failed).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Callable
from pathlib import Path

from jobs.backend import SimulatedSpot, TrainingBackend
from jobs.budget import SpendLedger
from jobs.clock import Clock
from jobs.errors import BadInput, BudgetExceeded, InvalidState, PermissionDenied
from jobs.lifecycle.controller import Controller
from jobs.lifecycle.forecasts import Forecasts
from jobs.lineage import Attempt, Lineage
from jobs.permissions import AccessPolicy
from jobs.planning.local_paths import check_local_paths
from jobs.planning.plan import LINEAGE_PLACEHOLDER, LaunchPlan, build_plan
from jobs.planning.pricing import check_job_budget
from jobs.planning.reader import CommandReader
from jobs.planning.spec import JobSpec
from jobs.recent import RecentReads
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import DuplicateLineage, Store

log = logging.getLogger(__name__)

#: A lineage id must leave room for "-<attempt>" within SageMaker's 63-character job names.
MAX_LINEAGE_ID = 50
LINEAGE_ID = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?")
_TASK_SHORT = {"question-answering": "qa", "text-classification": "cls"}
#: A chat surface asks for a /train's spec more than once while acknowledging it (whether it needs git, then
#: its plan), and parsing is half that ack's work: a spec is kept this long (a recipe changed shows after it).
PARSE_MEMORY_SECONDS = 5.0


def default_lineage_id(spec: JobSpec) -> str:
    """``{preset or task-short}-{8 hex}``: readable in a list, unique, a valid job-name prefix."""
    stem = spec.preset or _TASK_SHORT.get(spec.task or "", spec.task or Path(spec.entry or "job").stem)
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
        reader: CommandReader | None = None,
        simulation: SimulatedSpot | None = None,
    ) -> None:
        """``simulation``: the backend's simulated spot capacity, where it has one (the local backend's, for
        ``trainbot capacity``); wiring passes the backend itself, as ``backend`` may be a counting wrapper."""
        self._store = store
        self._backend = backend
        self._simulation = simulation
        self._settings = settings
        self._clock = clock
        self._new_id = new_lineage_id or default_lineage_id
        self._policy = AccessPolicy.from_settings(settings)
        self._ledger = SpendLedger.from_settings(store, clock, settings)
        self.controller = Controller.from_settings(store, backend, clock, settings)
        # Recipes, the grammar, then own code allowed and pinned (bot.wiring passes the full one).
        self._reader = reader or CommandReader.of(
            max_instances=settings.trainbot_max_instances, code_sources=settings.trainbot_code_sources
        )
        self._forecasts = Forecasts(store, backend, clock)
        self._parses: RecentReads[str, JobSpec] = RecentReads(PARSE_MEMORY_SECONDS)

    @property
    def policy(self) -> AccessPolicy:
        return self._policy

    def parse(self, text: str) -> JobSpec:
        """The spec ``text`` names (recipes and the grammar), with no allowlist and no git."""
        return self._parses.get(text, lambda: self._reader.parse(text))

    def check(self, text: str) -> JobSpec:
        """Everything about ``text`` that needs no network (the grammar, recipes, the code allowlist, local
        paths): what a schedule is checked with when it is added, as its git REF is resolved at each run."""
        # The parse is the one the card's plan reads next (remembered): the ack parses a /train once.
        spec = self._reader.allowed(self.parse(text))
        check_local_paths(spec, self._settings, backend=self._backend.name)
        return spec

    def waits_on_code_host(self, spec: JobSpec) -> bool:
        """Whether planning ``spec`` (a checked one) asks a git host (CommandReader.waits_on_code_host)."""
        return self._reader.waits_on_code_host(spec)

    def plan(self, text: str | JobSpec) -> LaunchPlan:
        """What ``text`` would launch, with no record; a git REF is resolved unless the spec pins its commit."""
        spec = self._parse(text)
        check_local_paths(spec, self._settings, backend=self._backend.name)
        return self._forecasts.add_to(build_plan(
            spec,
            bucket=self._settings.trainbot_bucket,
            lineage_id=LINEAGE_PLACEHOLDER,
            launched_by="",
            origin="",
            max_restarts=self._settings.trainbot_max_restarts,
            max_job_usd=self._settings.trainbot_max_job_usd,
            recovery_order=self._settings.trainbot_recovery_policy,
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
        spec = self._reader.read(text_or_spec)
        self._guarded(actor, "launch", request_id or "-", lambda: self._policy.check_can_use(actor))
        check_local_paths(spec, self._settings, backend=self._backend.name)
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
            recovery_order=self._settings.trainbot_recovery_policy,
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
        return self.controller.start(lineage, plan, actor)

    def _record_launch(
        self, plan: LaunchPlan, actor: Actor, request_id: str | None, schedule: str | None
    ) -> Lineage:
        lineage = self._store.create_lineage(
            lineage_id=plan.lineage_id,
            spec=plan.spec,
            backend=self._backend.name,
            checkpoint_uri=plan.checkpoint_uri,
            actor=actor,
            estimated_usd=plan.cost.worst_case_usd,
            request_id=request_id,
            schedule=schedule,
            launch_plan=plan.stored(),
        )
        per_device, accumulation = plan.recorded_batch()
        self._store.add_attempt(
            lineage.id, number=1, instance_type=plan.spec.instance_type, spot=plan.spec.spot,
            per_device_batch=per_device, accumulation=accumulation,
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

    def _check_budgets(self, plan: LaunchPlan) -> None:
        check_job_budget(plan.cost, self._settings.trainbot_max_job_usd)
        self._ledger.check(plan.cost.worst_case_usd, self._clock.now())

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
        if not self.controller.stop(lineage, actor):
            raise _already_ended(self._store.get_lineage(lineage.id))
        return self._store.get_lineage(lineage.id)

    def take_capacity(self, ref: str, *, actor: Actor) -> Attempt:
        """A simulated spot reclaim of the lineage's running attempt (the local backend's; launcher or admin
        only): its processes die as a reclaimed instance's do, and the watcher recovers it. BadInput otherwise."""
        lineage = self._store.find(ref)
        self._guarded(actor, "capacity", lineage.id,
                      lambda: self._policy.check_can_manage(actor, lineage, verb="take capacity from"))
        self._check_same_backend(lineage, "take capacity from")
        attempt = lineage.latest_attempt
        if not lineage.spec.spot:
            raise BadInput(f"{lineage.id} is not a spot job, so there is no spot capacity to take away.")
        if attempt is None or attempt.status.is_terminal() or lineage.status.is_terminal():
            raise BadInput(f"{lineage.id} has no running attempt (it {lineage.status.phrase()}); there is nothing to "
                           "take away.")
        if self._simulation is None:
            raise BadInput(
                f"Taking capacity away is a simulated spot reclaim of the local backend; on {self._backend.name} "
                "spot capacity is the cloud's to take."
            )
        try:
            self._simulation.take_capacity(attempt.job_name)
        except InvalidState as exc:  # it ended between the look and the signal
            raise BadInput(exc.message) from None
        self._store.audit(actor, "capacity", lineage.id, {"job_name": attempt.job_name})
        return attempt

    # -- helpers ----------------------------------------------------------------------------------

    def _check_same_backend(self, lineage: Lineage, verb: str) -> None:
        # A console (local) and a SageMaker bot may share one store; each acts on its own jobs only.
        if lineage.backend != self._backend.name:
            raise InvalidState(
                f"{lineage.id} runs on the {lineage.backend} backend and this bot runs {self._backend.name}: "
                f"{verb} it from a bot with TRAINBOT_BACKEND={lineage.backend}."
            )

    def _parse(self, text: str | JobSpec) -> JobSpec:
        if isinstance(text, str):
            return self._reader.pin(self.parse(text))
        return self._reader.read(text)

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

def _already_ended(lineage: Lineage) -> InvalidState:
    return InvalidState(
        f"Job {lineage.id} has already ended (it {lineage.status.phrase()}); there is nothing to stop."
    )

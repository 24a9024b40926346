"""Promotions and rollbacks: a live endpoint updated in place (a new endpoint config, then UpdateEndpoint;
SageMaker shifts the traffic blue/green), its name and URL unchanged, and what it served kept as history.

The service decides (who may, which model, which instances, within which caps) and records; the backend
only carries out, and never waits. An update is recorded UPDATING and claimed on the endpoint's row before
the backend is asked (one update at a time); `follow` (the watch cycle, jobs/endpoints/update_follower.py)
sees it serve or fail, then moves the history, approves or rejects the model package, and queues the message
for the job's thread. A step cut short by a crash is taken up again, and every message has a dedup key.
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING

from jobs.clock import Clock
from jobs.comparison import final_metrics
from jobs.endpoints import texts
from jobs.endpoints.checks import check_caps, served_model, task_of
from jobs.endpoints.options import check_name, model_name, parse_options
from jobs.endpoints.port import DeployRequest, EndpointBackend, Rollout, UpdateRequest
from jobs.endpoints.promotion_plan import PromotionPlan, Side, hourly, instances_for, rollout_for
from jobs.endpoints.revisions import Action, Revision, RevisionStatus, RevisionStore
from jobs.endpoints.store import Endpoint, EndpointCycle, EndpointStore
from jobs.endpoints.update_follower import UpdateFollower
from jobs.errors import BadInput, InvalidState, NotFound, TrainbotError
from jobs.permissions import AccessPolicy
from jobs.planning.serving import choose_framework
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import Store

if TYPE_CHECKING:
    from jobs.registry.service import RegistryService

log = logging.getLogger(__name__)

_UPDATING = (RevisionStatus.UPDATING,)
#: A revision's remote status once the backend took its update call (a retry then calls it no more).
REQUESTED = "Requested"


class PromotionService:
    def __init__(self, *, store: Store, endpoints: EndpointStore, backend: EndpointBackend, settings: Settings,
                 clock: Clock, registry: RegistryService | None = None) -> None:
        self._store = store
        self._endpoints = endpoints
        self._revisions = RevisionStore(store, clock=clock)
        self._backend = backend
        self._settings = settings
        self._clock = clock
        self._policy = AccessPolicy.from_settings(settings)
        self.registry = registry
        self._follower = UpdateFollower(store=store, endpoints=endpoints, revisions=self._revisions, backend=backend,
                                        clock=clock, registry=registry)

    @property
    def revisions(self) -> RevisionStore:
        return self._revisions

    # -- promoting --------------------------------------------------------------------------------

    def plan(self, job_ref: str, endpoint_name: str, *, options: dict[str, str], actor: Actor) -> PromotionPlan:
        """Every check of a promotion and no side effect."""
        endpoint = self._in_service(endpoint_name)
        self._policy.check_owns_endpoint(actor, endpoint.name, endpoint.deployed_by, verb="promote into it")
        lineage = self._store.find(job_ref)
        # Serving a model is its launcher's (or an admin's) decision wherever it goes, as for a deploy: owning
        # the endpoint is not enough, since the promotion also approves the model's package when it serves.
        self._policy.check_can_manage(actor, lineage, verb=texts.SERVE_VERB)
        self._check_idle(endpoint)
        model_data, job_name = served_model(lineage, self._backend.name)
        task = task_of(lineage)
        if task != endpoint.task:
            raise InvalidState(texts.TASK_DIFFERS.format(name=endpoint.name, task=endpoint.task,
                                                         lineage=lineage.id, other=task))
        if lineage.id == endpoint.lineage_id and job_name == endpoint.job_name:
            raise InvalidState(texts.ALREADY_SERVES.format(name=endpoint.name, lineage=lineage.id))
        opts = parse_options(options)
        if opts.name is not None and opts.name != endpoint.name:
            raise BadInput(f"name={opts.name} names another endpoint than {endpoint.name}: drop it.")
        instance_type, count, serverless, memory = instances_for(opts, endpoint)
        check_caps(self._settings, self._backend.name, instance_type=instance_type, instance_count=count,
                   serverless=serverless)
        framework, note = None, None
        if self._backend.name != "local":
            spec = lineage.spec
            choice = choose_framework(spec.transformers_version, spec.pytorch_version, spec.py_version, spec.task)
            framework, note = choice.framework, choice.note
        stamp = f"{self._clock.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
        model = DeployRequest(
            name=endpoint.name, model_name=model_name(endpoint.name, stamp), model_data=model_data, task=task,
            framework=framework, instance_type=instance_type, instance_count=count, serverless=serverless,
            memory_mb=memory, max_concurrency=opts.max_concurrency,
        )
        rollout = rollout_for(opts, endpoint=endpoint.name, instance_count=count, serverless=serverless,
                              inherited_alarm=self._last_alarm(endpoint.name))
        update = UpdateRequest(endpoint.name, model.model_name, model, rollout)
        current = self._side(endpoint.lineage_id, endpoint.job_name, endpoint.where, endpoint.hourly_usd())
        new = self._side(lineage.id, job_name, _where(model, self._backend.name),
                         hourly(self._backend.name, instance_type, count, serverless))
        written = {k: v for k, v in options.items() if k.strip().lower() not in ("name", "endpoint")}
        return PromotionPlan(endpoint, lineage, update, current, new, written, note)

    def promote(self, plan: PromotionPlan, *, actor: Actor, reason: str = "",
                request_id: str | None = None) -> Revision:
        """Record the update, claim the endpoint for it, ask the backend. ``request_id`` makes it once only
        (a scheduled promotion: see `promote_once`)."""
        current = self.current(plan.name)
        model = plan.model
        revision = self._revisions.add({
            "endpoint": plan.name, "action": Action.PROMOTE.value, "status": RevisionStatus.UPDATING.value,
            "lineage_id": plan.lineage.id, "job_name": plan.new.job_name, "model_name": model.model_name,
            "model_data": model.model_data, "config_name": plan.update.config_name,
            "instance_type": model.instance_type, "instance_count": model.instance_count,
            "serverless": model.serverless, "memory_mb": model.memory_mb,
            "canary_percent": plan.update.rollout.canary_percent, "alarm": plan.update.rollout.alarm or "",
            "requested_by": actor.user_id, "via": actor.via, "reason": reason, "request_id": request_id,
            "replaces": current.id,
        })
        if revision.model_name != model.model_name:  # the request id was taken an instant before
            return self._resume(revision)
        self._start(revision, plan.update)
        self._store.audit(actor, "endpoint.promote", plan.name, {
            "lineage_id": plan.lineage.id, "replaces": current.lineage_id, "revision": revision.id,
            "config": plan.update.config_name, "reason": reason, "alarm": plan.update.rollout.alarm,
        })
        log.info("promoting %s into endpoint %s (revision %d)", plan.lineage.id, plan.name, revision.id)
        return self._revisions.get(revision.id)

    def promote_once(self, job_ref: str, endpoint_name: str, *, request_id: str, actor: Actor,
                     reason: str = "", options: dict[str, str] | None = None) -> Revision:
        """A promotion keyed by ``request_id`` (a schedule's, once per lineage): asked before, its revision
        is returned, and an update a crash cut short is carried on; else planned and started now."""
        found = self._revisions.by_request(request_id)
        if found is not None:
            return self._resume(found)
        plan = self.plan(job_ref, endpoint_name, options=options or {}, actor=actor)
        return self.promote(plan, actor=actor, reason=reason, request_id=request_id)

    def _resume(self, revision: Revision) -> Revision:
        """An UPDATING promotion whose claim or backend call a crash cut short is carried on (with the names
        recorded); anything else, the backend's answer included, is returned as it is."""
        endpoint = self._endpoints.find(revision.endpoint)
        if revision.status is RevisionStatus.UPDATING and not revision.remote_status and endpoint is not None \
                and endpoint.updating_revision in (None, revision.id):
            self._start(revision, UpdateRequest(revision.endpoint, revision.config_name,
                                                self._model_of(revision, endpoint), _rollout_of(revision)))
        return self._revisions.get(revision.id)

    def _model_of(self, revision: Revision, endpoint: Endpoint) -> DeployRequest:
        framework = None
        if self._backend.name != "local":
            spec = self._store.get_lineage(revision.lineage_id).spec
            framework = choose_framework(spec.transformers_version, spec.pytorch_version, spec.py_version, spec.task).framework
        return DeployRequest(
            name=revision.endpoint, model_name=revision.model_name, model_data=revision.model_data,
            task=endpoint.task, framework=framework, instance_type=revision.instance_type,
            instance_count=revision.instance_count, serverless=revision.serverless, memory_mb=revision.memory_mb,
        )

    def _start(self, revision: Revision, update: UpdateRequest) -> None:
        endpoint = self._endpoints.get(revision.endpoint)
        if endpoint.updating_revision != revision.id and not self._endpoints.claim_update(endpoint.name, revision.id):
            reason = "another update of this endpoint started at the same moment"
            self._revisions.move(revision.id, _UPDATING, RevisionStatus.FAILED, failure_reason=reason,
                                 ended_at=self._clock.now())
            self._check_idle(self._endpoints.get(endpoint.name))
            raise InvalidState(f"Endpoint {endpoint.name} is being updated by someone else: try again shortly.")
        try:
            self._backend.update(update)
        except TrainbotError as exc:
            self._revisions.move(revision.id, _UPDATING, RevisionStatus.FAILED, failure_reason=exc.user_message(),
                                 ended_at=self._clock.now())
            self._endpoints.finish_update(endpoint.name, revision.id, None)
            raise
        self._revisions.mirror(revision.id, REQUESTED)

    # -- rolling back -----------------------------------------------------------------------------

    def check_rollback(self, name: str, *, actor: Actor, expected: int | None = None) -> tuple[Revision, Revision]:
        """(what serves now, what a rollback returns to), if ``actor`` may roll back now; no side effect.
        ``expected``: the revision a Rollback button was for, which must still be the one serving."""
        endpoint = self._in_service(name)
        self._policy.check_owns_endpoint(actor, endpoint.name, endpoint.deployed_by, verb="roll it back")
        self._check_idle(endpoint)
        current = self.current(endpoint.name)
        if expected is not None and current.id != expected:
            gone = self._revisions.get(expected) if expected else None
            raise InvalidState(texts.NO_LONGER_SERVES.format(
                name=endpoint.name, lineage=gone.lineage_id if gone else "that model", current=current.lineage_id))
        target = next((r for r in self._revisions.with_status(endpoint.name, RevisionStatus.REPLACED)
                       if r.config_name != current.config_name), None)
        if target is None:
            raise InvalidState(texts.NOTHING_TO_ROLL_BACK.format(name=endpoint.name, lineage=current.lineage_id))
        return current, target

    def rollback(self, name: str, *, actor: Actor, reason: str = "", expected: int | None = None) -> Revision:
        """Back to the config served before, in place; the replaced model's package is Rejected with who and
        why, when ``actor`` may change it (its launcher or an admin: see `package_kept`)."""
        current, target = self.check_rollback(name, actor=actor, expected=expected)
        revision = self._revisions.add({
            **target.serving_fields(), "endpoint": current.endpoint, "action": Action.ROLLBACK.value,
            "status": RevisionStatus.UPDATING.value, "canary_percent": None, "alarm": "",
            "requested_by": actor.user_id, "via": actor.via, "reason": reason, "replaces": current.id,
            "restores": target.id,
        })
        self._start(revision, UpdateRequest(current.endpoint, target.config_name, None, Rollout(wait_seconds=0)))
        why = reason or "rolled back"
        kept = self.package_kept(current.lineage_id, actor)
        if self.registry is not None and not kept:
            self.registry.reject(current.lineage_id, actor=actor,
                                 reason=f"rolled back out of {current.endpoint} by {actor.user_id}: {why}")
        elif self.registry is not None:
            self._store.audit(actor, "registry.approval_kept", current.lineage_id, {
                "endpoint": current.endpoint, "revision": revision.id, "reason": kept})
        self._store.audit(actor, "endpoint.rollback", current.endpoint, {
            "from": current.lineage_id, "to": target.lineage_id, "revision": revision.id, "reason": reason,
            "package_rejected": self.registry is not None and not kept,
        })
        log.info("rolling endpoint %s back from %s to %s", current.endpoint, current.lineage_id, target.lineage_id)
        return self._revisions.get(revision.id)

    def package_kept(self, lineage_id: str, actor: Actor) -> str:
        """"" when a rollback by ``actor`` rejects ``lineage_id``'s package (its launcher, or an admin); else
        the sentence saying the package keeps its approval, and why. An endpoint's owner rolls back what
        their endpoint serves, but another person's package is theirs to approve or reject."""
        try:
            lineage = self._store.get_lineage(lineage_id)
        except NotFound:
            return ""  # nothing left to approve or reject
        if self._policy.may_manage(actor, lineage):
            return ""
        return texts.PACKAGE_KEPT.format(lineage=lineage.id, owner=lineage.launched_by)

    # -- the first deploy, and the end ------------------------------------------------------------

    def record_deploy(self, endpoint: Endpoint, actor: Actor) -> None:
        """The endpoint's creation as its first revision (it serves once the endpoint is in service)."""
        self._revisions.add({
            "endpoint": endpoint.name, "action": Action.DEPLOY.value, "status": RevisionStatus.UPDATING.value,
            "lineage_id": endpoint.lineage_id, "job_name": endpoint.job_name, "model_name": endpoint.model_name,
            "model_data": endpoint.model_data, "config_name": endpoint.serving_config,
            "instance_type": endpoint.instance_type, "instance_count": endpoint.instance_count,
            "serverless": endpoint.serverless, "memory_mb": endpoint.memory_mb, "requested_by": actor.user_id,
            "via": actor.via,
        })

    def deploy_ended(self, name: str, *, served: bool, reason: str = "") -> None:
        """The endpoint came up (its deploy revision serves) or failed to."""
        now = self._clock.now()
        for revision in self._revisions.with_status(name, RevisionStatus.UPDATING):
            if revision.action is not Action.DEPLOY:
                continue
            if served:
                self._revisions.move(revision.id, _UPDATING, RevisionStatus.SERVING, serving_since=now)
            else:
                self._revisions.move(revision.id, _UPDATING, RevisionStatus.FAILED, failure_reason=reason,
                                     ended_at=now)

    def retire(self, name: str) -> list[str]:
        """The endpoint is being undeployed: its history ends; returns the configs to delete with it."""
        return self._revisions.retire(name)

    # -- reading ----------------------------------------------------------------------------------

    def current(self, name: str) -> Revision:
        """The revision serving now; an endpoint from before revisions were kept gets one from its row."""
        serving = self._revisions.with_status(name, RevisionStatus.SERVING)
        if serving:
            return serving[0]
        endpoint = self._endpoints.get(name)
        return self._revisions.add({
            "endpoint": name, "action": Action.DEPLOY.value, "status": RevisionStatus.SERVING.value,
            "lineage_id": endpoint.lineage_id, "job_name": endpoint.job_name, "model_name": endpoint.model_name,
            "model_data": endpoint.model_data, "config_name": endpoint.serving_config,
            "instance_type": endpoint.instance_type, "instance_count": endpoint.instance_count,
            "serverless": endpoint.serverless, "memory_mb": endpoint.memory_mb,
            "requested_by": endpoint.deployed_by, "via": "deploy", "serving_since": endpoint.ready_at,
            "request_id": f"adopted:{name}:{endpoint.created_at.isoformat()}",
        })

    def history(self, name: str, *, limit: int = 50) -> tuple[Endpoint, list[Revision]]:
        endpoint = self._endpoints.get(check_name(name))
        return endpoint, self._revisions.history(endpoint.name, limit=limit)

    def package_label(self, lineage_id: str) -> str | None:
        return self._follower.package_label(lineage_id)

    # -- following --------------------------------------------------------------------------------

    def follow(self, cycle: EndpointCycle) -> None:
        """Every update under way once: served, not taken, or still moving (see update_follower)."""
        self._follower.follow(cycle)

    # -- helpers ----------------------------------------------------------------------------------

    def _in_service(self, name: str) -> Endpoint:
        try:
            endpoint = self._endpoints.get(check_name(name))
        except BadInput:
            raise NotFound(f"There is no endpoint {name.strip()!r}; /deploy JOB name=NAME makes one.") from None
        if endpoint.status.is_terminal():
            raise NotFound(f"Endpoint {endpoint.name} is {endpoint.status.value}: /deploy JOB name={endpoint.name} "
                           "makes it again.")
        if endpoint.status.value != "in_service":
            raise InvalidState(texts.NOT_IN_SERVICE.format(name=endpoint.name,
                                                           status=endpoint.status.value.replace("_", " ")))
        return endpoint

    def _check_idle(self, endpoint: Endpoint) -> None:
        if endpoint.updating_revision is None:
            return
        under_way = self._revisions.get(endpoint.updating_revision)
        raise InvalidState(texts.UPDATE_UNDER_WAY.format(name=endpoint.name, lineage=under_way.lineage_id,
                                                         who=under_way.requested_by))

    def _last_alarm(self, name: str) -> str:
        for revision in self._revisions.history(name, limit=20):
            if revision.action is Action.PROMOTE:
                return revision.alarm
        return ""

    def _side(self, lineage_id: str, job_name: str, where: str, hourly_usd: float | None) -> Side:
        try:
            metrics = final_metrics(self._store.get_lineage(lineage_id))
        except NotFound:
            metrics = {}
        package = self.registry.find(lineage_id) if self.registry is not None else None
        return Side(lineage_id, job_name, metrics, package.label if package and package.version else None,
                    package.approval.value if package else None, where, hourly_usd)


def _rollout_of(revision: Revision) -> Rollout:
    return Rollout(canary_percent=revision.canary_percent, wait_seconds=300 if revision.canary_percent else 0,
                   alarm=revision.alarm or None)


def _where(request: DeployRequest, backend: str) -> str:
    return texts.where(request.instance_type, request.instance_count, request.serverless, request.memory_mb, backend)

"""Endpoints: a completed job's model deployed for inference, followed until it answers, asked, and removed.

`EndpointService` is what handlers and the CLI call. It decides (who may, which job, which framework, which
name) and records; the `EndpointBackend` (SageMaker hosting or local processes) only carries out. A deploy
is recorded CREATING before the backend is asked, and the backend never waits: `poll_once` (the watcher's
cycle) follows CREATING endpoints to in service or failed and queues the message for the job's thread.
`idle_report` lists endpoints nobody has asked for a while, with what they have cost, once a day a channel.
"""

from __future__ import annotations

import builtins
import logging
import secrets
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobs.clock import Clock
from jobs.endpoints import texts as texts
from jobs.endpoints.checks import check_caps, served_model, task_of
from jobs.endpoints.options import (
    ROLLOUT_KEYS,
    DeployOptions,
    check_name,
    default_name,
    model_name,
    normalize_answer,
    parse_options,
    prediction_payload,
)
from jobs.endpoints.port import DeployRequest, EndpointBackend, EndpointStatus, InferenceCode, RemoteEndpoint
from jobs.endpoints.promotions import PromotionService
from jobs.endpoints.store import LIVE, DeployPlan, Endpoint, EndpointCycle, EndpointStore, IdleEndpoint
from jobs.errors import BadInput, InvalidState, NotFound, TrainbotError
from jobs.lineage import Lineage
from jobs.permissions import AccessPolicy
from jobs.planning.prices import SECONDS_PER_HOUR, usd
from jobs.planning.serving import (
    TEXT_GENERATION,
    check_text_generation_instance,
    choose_framework,
    text_generation_instance,
)
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import Store

if TYPE_CHECKING:
    from jobs.registry.service import RegistryService

__all__ = ["DeployPlan", "Endpoint", "EndpointCycle", "EndpointService", "IdleEndpoint"]

log = logging.getLogger(__name__)

_CREATING = (EndpointStatus.CREATING.value,)
#: The remote status recorded once the backend accepted the deploy (until a describe says more).
ASKED = "Creating"
#: How long a deploy may take to reach the backend (the SDK creates the model and its config first)
#: before "no such endpoint" means it never will (the process died between the record and the call).
DEPLOY_GRACE = timedelta(minutes=10)


def inference_code(lineage: Lineage, opts: DeployOptions) -> InferenceCode | None:
    """``entry_point=`` (and ``source_dir=``) as the team's handler in the code the job trained with, at its
    pinned commit; None without entry_point=."""
    if opts.entry_point is None:
        if opts.source_dir is not None:
            raise BadInput("source_dir= goes with entry_point=: name the handler, e.g. entry_point=inference.py.")
        return None
    estimator = dict((lineage.launch_plan or {}).get("estimator") or {})
    if lineage.spec.code is None or not estimator:
        raise InvalidState(texts.HANDLER_NEEDS_CODE.format(lineage=lineage.id))
    code = {k: estimator[k] for k in ("git_config", "source_dir") if k in estimator}
    return InferenceCode(entry_point=opts.entry_point, folder=opts.source_dir or "", code=code)


def has_model_handler(model_data: str) -> bool:
    """A local model folder that carries its handler (code/inference.py), as a model.tar.gz may; an S3 archive
    is not opened here (its handler, if any, runs all the same: the toolkit finds it)."""
    from pathlib import Path

    return not model_data.startswith("s3://") and (Path(model_data) / "code" / "inference.py").is_file()


class EndpointService:
    def __init__(self, *, store: Store, backend: EndpointBackend, settings: Settings, clock: Clock,
                 registry: RegistryService | None = None) -> None:
        self._store = store
        self._endpoints = EndpointStore(store, clock=clock)
        self._backend = backend
        self._settings = settings
        self._clock = clock
        self._policy = AccessPolicy.from_settings(settings)
        #: Updates in place of these endpoints: promotions, rollbacks, and what each served.
        self.promotions = PromotionService(store=store, endpoints=self._endpoints, backend=backend,
                                           settings=settings, clock=clock, registry=registry)

    @property
    def backend_name(self) -> str:
        return self._backend.name

    # -- deploy -----------------------------------------------------------------------------------

    def plan(self, job_ref: str, *, options: dict[str, str], actor: Actor) -> DeployPlan:
        """Every check of a deploy and no side effect: the launcher or an admin, a completed job with a
        model on this backend, valid options, a free name, an inference framework."""
        lineage = self._store.find(job_ref)
        self._policy.check_can_manage(actor, lineage, verb="deploy")
        model_data, job_name = served_model(lineage, self._backend.name)
        opts = parse_options(options)
        if opts.given & set(ROLLOUT_KEYS):
            raise BadInput(texts.ROLLOUT_ONLY_PROMOTING)
        if lineage.spec.task == TEXT_GENERATION and self._backend.name != "local":
            opts = text_generation_options(opts, lineage.spec.model)
        self._check_caps(opts)
        name = opts.name or default_name(lineage.id)
        self._check_free(name)
        spec = lineage.spec
        framework, note = None, None
        if self._backend.name != "local":
            choice = choose_framework(spec.transformers_version, spec.pytorch_version, spec.py_version, spec.task)
            framework, note = choice.framework, choice.note
        handler = inference_code(lineage, opts)
        request = DeployRequest(
            name=name,
            model_name=model_name(name, f"{self._clock.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"),
            model_data=model_data,
            task=task_of(lineage, handler=handler is not None or has_model_handler(model_data)),
            handler=handler,
            framework=framework,
            instance_type=opts.instance_type,
            instance_count=opts.instance_count,
            serverless=opts.serverless,
            memory_mb=opts.memory_mb,
            max_concurrency=opts.max_concurrency,
        )
        return DeployPlan(lineage, job_name, request, opts, self._backend.name, note)

    def promotion_target(self, options: dict[str, str]) -> str | None:
        """The endpoint a deploy's ``name=`` names when it exists and is live (a deploy into it is a promotion
        offer, not a refusal); None for a new endpoint."""
        name = next((v for k, v in options.items() if k.strip().lower() in ("name", "endpoint")), "").strip()
        found = self._endpoints.find(name) if name else None
        return found.name if found is not None and found.status.value in LIVE else None

    def deploy(self, job_ref: str, *, options: dict[str, str], actor: Actor) -> Endpoint:
        """Plan and start a deploy; returns the endpoint recorded CREATING (the backend does not wait)."""
        return self.start(self.plan(job_ref, options=options, actor=actor), actor=actor)

    def start(self, plan: DeployPlan, *, actor: Actor) -> Endpoint:
        """Record the endpoint CREATING (its name is ours from here on), then ask the backend; a refusal
        marks it failed and is raised. Until the backend has been asked, the record's remote status is
        empty, and a poller that finds no such endpoint meanwhile leaves it be (see `_follow`)."""
        request = plan.request
        created = self._endpoints.create(self._row(plan, actor))
        try:
            self.promotions.record_deploy(created, actor)
            self._backend.deploy(request)
        except Exception as exc:  # no record is left creating, and nothing the backend began is left behind
            reason = exc.user_message() if isinstance(exc, TrainbotError) else "the deploy failed on our side"
            self._fail(request.name, reason)
            self._cleanup(request.name)
            raise
        self._endpoints.mirror(request.name, ASKED, if_unset=True)  # a poller may have seen more already
        detail = {
            "endpoint": request.name,
            "model_data": request.model_data,
            "framework_note": plan.framework_note,
        }
        self._store.audit(actor, "endpoint.deploy", plan.lineage.id, detail)
        log.info("deploying %s as endpoint %s", plan.lineage.id, request.name)
        return self._endpoints.get(request.name)

    def _check_caps(self, opts: DeployOptions) -> None:
        check_caps(self._settings, self._backend.name, instance_type=opts.instance_type,
                   instance_count=opts.instance_count, serverless=opts.serverless)

    def _check_free(self, name: str) -> None:
        found = self._endpoints.find(name)
        if found is not None and found.status.value in LIVE:
            raise InvalidState(
                f"Endpoint {name} already exists ({found.status.value.replace('_', ' ')}, from "
                f"{found.lineage_id}): use it, `/undeploy {name}` first, or pass name=... for a second one."
            )

    def _row(self, plan: DeployPlan, actor: Actor) -> dict[str, Any]:
        request = plan.request
        return {
            "name": request.name,
            "lineage_id": plan.lineage.id,
            "job_name": plan.job_name,
            "backend": self._backend.name,
            "model_name": request.model_name,
            "model_data": request.model_data,
            "task": request.task,
            "framework": request.framework.label() if request.framework else "",
            "framework_note": plan.framework_note or "",
            "instance_type": request.instance_type,
            "instance_count": request.instance_count,
            "serverless": request.serverless,
            "memory_mb": request.memory_mb,
            "deployed_by": actor.user_id,
            "channel": actor.channel_id or plan.lineage.channel,
        }

    # -- reading ----------------------------------------------------------------------------------

    def get(self, name: str) -> Endpoint:
        return self._endpoints.get(name)

    def list(self, *, include_ended: bool = False) -> list[Endpoint]:
        """Newest first; creating and in-service ones unless ``include_ended``."""
        return self._endpoints.list(include_ended=include_ended)

    def serving(self) -> dict[str, builtins.list[str]]:
        """Lineage id -> the live endpoints serving its model now (where each package is deployed)."""
        found: dict[str, builtins.list[str]] = {}
        for endpoint in self._endpoints.list():
            found.setdefault(endpoint.lineage_id, []).append(endpoint.name)
        return found

    # -- undeploy and predict ---------------------------------------------------------------------

    def check_undeploy(self, name: str, *, actor: Actor) -> Endpoint:
        """The endpoint, if ``actor`` may undeploy it now (the job's launcher or an admin); no side effect. A
        failed one may be undeployed too: whatever its deploy left is removed, and its name is free."""
        endpoint = self._failed(name) or self._live(name)
        if actor.user_id == endpoint.deployed_by:  # its owner
            return endpoint
        lineage = self._store.get_lineage(endpoint.lineage_id)
        self._policy.check_can_manage(actor, lineage, verb="undeploy endpoints of")
        return endpoint

    def undeploy(self, name: str, *, actor: Actor) -> Endpoint:
        """Delete the endpoint and its config (the model stays); the job's launcher or an admin only."""
        endpoint = self.check_undeploy(name, actor=actor)
        self._backend.delete(endpoint.name, configs=self.promotions.retire(endpoint.name))
        self._endpoints.move(endpoint.name, (*LIVE, EndpointStatus.FAILED.value), EndpointStatus.DELETED,
                             ended_at=self._clock.now())
        self._store.audit(actor, "endpoint.undeploy", endpoint.lineage_id, {"endpoint": endpoint.name})
        return self._endpoints.get(endpoint.name)

    def check_predict(self, name: str, inputs: dict[str, str], *, actor: Actor) -> Endpoint:
        """The endpoint, if ``actor`` may ask it and ``inputs`` suit its task; no backend call."""
        self._policy.check_can_use(actor)
        endpoint = self._live(name)
        prediction_payload(endpoint.task, inputs)
        return endpoint

    def predict(self, name: str, inputs: dict[str, str], *, actor: Actor) -> dict[str, Any]:
        """Ask the endpoint; the answer always carries ``answer`` and ``score``."""
        endpoint = self.check_predict(name, inputs, actor=actor)
        payload = prediction_payload(endpoint.task, inputs)
        if endpoint.status is EndpointStatus.CREATING:
            endpoint = self._follow(endpoint, EndpointCycle())  # the watcher may not have looked yet
        if endpoint.status is not EndpointStatus.IN_SERVICE:
            reason = f" ({endpoint.failure_reason.rstrip('.')})" if endpoint.failure_reason else ""
            raise InvalidState(
                f"Endpoint {endpoint.name} is {endpoint.status.value.replace('_', ' ')}{reason}; "
                "the job's thread says when it is ready."
            )
        raw = self._backend.invoke(endpoint.name, payload)
        self._endpoints.count_invocation(endpoint.name)
        return normalize_answer(raw)

    def _failed(self, name: str) -> Endpoint | None:
        found = self._endpoints.find(name.strip())
        return found if found is not None and found.status is EndpointStatus.FAILED else None

    def _live(self, name: str) -> Endpoint:
        try:
            endpoint = self._endpoints.get(check_name(name))
        except BadInput:
            raise NotFound(
                f"There is no endpoint {name.strip()!r}; `trainbot deploy JOB` (or /deploy JOB) makes one."
            ) from None
        if endpoint.status.is_terminal():
            raise NotFound(
                f"Endpoint {endpoint.name} is {endpoint.status.value} (since "
                f"{_when(endpoint.ended_at or endpoint.updated_at)}): /deploy {endpoint.lineage_id} brings it back."
            )
        return endpoint

    # -- following --------------------------------------------------------------------------------

    def poll_once(self) -> EndpointCycle:
        """Follow every CREATING endpoint once; queue `endpoint_ready` / `endpoint_failed` for its thread."""
        cycle = EndpointCycle()
        for endpoint in self._endpoints.list():
            if endpoint.status is not EndpointStatus.CREATING:
                continue
            try:
                self._follow(endpoint, cycle)
            except TrainbotError as exc:
                log.warning("could not follow endpoint %s: %s", endpoint.name, exc.user_message())
        self.promotions.follow(cycle)  # updates in place under way
        return cycle

    def _follow(self, endpoint: Endpoint, cycle: EndpointCycle) -> Endpoint:
        cycle.followed += 1
        try:
            remote = self._backend.describe(endpoint.name)
        except NotFound:
            if not endpoint.remote_status:
                if self._clock.now() - endpoint.created_at < DEPLOY_GRACE:
                    return endpoint  # recorded, and the backend is being asked right now
                remote = RemoteEndpoint(endpoint.name, "Failed", "the deploy never reached the backend")
            else:
                remote = RemoteEndpoint(
                    endpoint.name, "Failed", "the backend no longer has it (deleted outside the bot?)"
                )
        if remote.ready:
            now = self._clock.now()
            if self._endpoints.move(
                endpoint.name, _CREATING, EndpointStatus.IN_SERVICE, remote_status=remote.status, ready_at=now
            ):
                self.promotions.deploy_ended(endpoint.name, served=True)
                self._announce_ready(self._endpoints.get(endpoint.name))
                cycle.ready.append(endpoint.name)
        elif remote.failed:
            reason = remote.failure_reason or f"the backend reports {remote.status}"
            if self._fail(endpoint.name, reason, remote_status=remote.status):
                self._cleanup(endpoint.name)
                cycle.failed.append(endpoint.name)
        elif remote.status != endpoint.remote_status:
            self._endpoints.mirror(endpoint.name, remote.status)
        return self._endpoints.get(endpoint.name)

    def _announce_ready(self, endpoint: Endpoint) -> None:
        access = self._backend.access(endpoint.name)
        hourly = endpoint.hourly_usd()
        cost = "per request (serverless)" if hourly is None else f"{usd(hourly)}/h"
        text = texts.ready_text(
            name=endpoint.name,
            lineage=endpoint.lineage_id,
            where=endpoint.where,
            task=endpoint.task,
            cost=cost,
            access=access,
            framework_note=endpoint.framework_note or None,
        )
        payload = {
            **_base(texts.ENDPOINT_READY, endpoint, text),
            **texts.snippets(endpoint.name, endpoint.task, access),
            "console_url": access.console_url,
            "invocation_url": access.invocation_url,
            "hourly_usd": hourly,
            "framework": endpoint.framework,
        }
        self._enqueue(texts.ENDPOINT_READY, endpoint, payload)

    def _fail(self, name: str, reason: str, *, remote_status: str = "") -> bool:
        """CREATING -> FAILED and the thread told; False when another process got there first."""
        reason = reason.rstrip(".") + "."
        now = self._clock.now()
        moved = self._endpoints.move(
            name,
            _CREATING,
            EndpointStatus.FAILED,
            failure_reason=reason,
            remote_status=remote_status,
            ended_at=now,
        )
        if moved:
            self.promotions.deploy_ended(name, served=False, reason=reason)
            endpoint = self._endpoints.get(name)
            text = texts.FAILED.format(name=name, lineage=endpoint.lineage_id, reason=reason)
            self._enqueue(
                texts.ENDPOINT_FAILED,
                endpoint,
                {**_base(texts.ENDPOINT_FAILED, endpoint, text), "reason": reason},
            )
        return moved

    def _enqueue(self, kind: str, endpoint: Endpoint, payload: dict[str, Any]) -> None:
        stamp = endpoint.created_at.strftime("%Y%m%dT%H%M%S%f")
        self._store.outbox.enqueue(
            kind=kind,
            payload=payload,
            lineage_id=endpoint.lineage_id,
            channel=endpoint.channel,
            dedup_key=f"{kind}:{endpoint.name}:{stamp}",
        )

    def _cleanup(self, name: str) -> None:
        """A failed SageMaker endpoint still holds its name and config: remove them so a redeploy can."""
        try:
            self._backend.delete(name)
        except TrainbotError as exc:
            log.warning("could not clean up failed endpoint %s: %s", name, exc.user_message())

    # -- idle endpoints ---------------------------------------------------------------------------

    def idle_report(self) -> builtins.list[IdleEndpoint]:
        """In-service endpoints not asked for longer than TRAINBOT_ENDPOINT_IDLE_HOURS, with what they cost;
        queues one `endpoints_idle` note a day in each channel that has any."""
        now = self._clock.now()
        limit = timedelta(hours=self._settings.trainbot_endpoint_idle_hours)
        idle: builtins.list[IdleEndpoint] = []
        for endpoint in self._endpoints.list():
            since = endpoint.last_invoked_at or endpoint.ready_at
            if endpoint.status is not EndpointStatus.IN_SERVICE or since is None or now - since <= limit:
                continue
            hourly = endpoint.hourly_usd()
            up_hours = (now - (endpoint.ready_at or endpoint.created_at)).total_seconds() / SECONDS_PER_HOUR
            running = None if hourly is None else hourly * up_hours
            idle.append(IdleEndpoint(endpoint, (now - since).total_seconds(), hourly, running))
        self._enqueue_idle(idle, now)
        return idle

    def _enqueue_idle(self, idle: builtins.list[IdleEndpoint], now: datetime) -> None:
        by_channel: dict[str | None, builtins.list[IdleEndpoint]] = {}
        for item in idle:
            by_channel.setdefault(item.endpoint.channel, []).append(item)
        hours = self._settings.trainbot_endpoint_idle_hours
        for channel, items in by_channel.items():
            lines = [texts.IDLE_HEAD.format(count=len(items), hours=hours), *map(_idle_line, items)]
            payload = {
                "kind": texts.ENDPOINTS_IDLE,
                "text": "\n".join(lines),
                "endpoints": [item.endpoint.name for item in items],
                "running_usd": round(sum(item.running_usd or 0.0 for item in items), 2),
            }
            self._store.outbox.enqueue(
                kind=texts.ENDPOINTS_IDLE,
                payload=payload,
                channel=channel,
                dedup_key=f"{texts.ENDPOINTS_IDLE}:{channel or '-'}:{now.date().isoformat()}",
            )


def text_generation_options(opts: DeployOptions, model: str | None) -> DeployOptions:
    """A causal LM is served by TGI on a GPU: the type its weights need unless one was typed (a typed one too
    small is refused), never serverless (it has no GPU)."""
    if opts.serverless:
        raise BadInput("A text-generation model is served by TGI on a GPU instance, which serverless endpoints do "
                       "not have: drop serverless=yes.")
    if "instance_type" not in opts.given:
        return replace(opts, instance_type=text_generation_instance(model))
    check_text_generation_instance(model, opts.instance_type)
    return opts


def _base(kind: str, endpoint: Endpoint, text: str) -> dict[str, Any]:
    return {
        "kind": kind,
        "lineage_id": endpoint.lineage_id,
        "job_name": endpoint.job_name,
        "endpoint": endpoint.name,
        "text": text,
    }


def _when(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC")


def _idle_line(item: IdleEndpoint) -> str:
    endpoint = item.endpoint
    return texts.IDLE_LINE.format(
        name=endpoint.name,
        lineage=endpoint.lineage_id,
        where=endpoint.where,
        idle=texts.hours(item.idle_seconds / SECONDS_PER_HOUR),
        hourly="?" if item.hourly_usd is None else usd(item.hourly_usd),
        total="?" if item.running_usd is None else usd(item.running_usd),
    )

"""The registry: which group a lineage's model belongs to, its package (registered once, keyed by the
lineage id), and its approval as promotions and rollbacks decide it.

Every package is a row in the store (the local backend has nothing else); on the SageMaker backend with
TRAINBOT_REGISTRY=on it is also a model package in SageMaker's Model Registry, carrying the inference
image, the model data URL, the task, the lineage id, the commit of own code, and the final metrics.
"""

from __future__ import annotations

import builtins
import logging
import re

from jobs.clock import Clock
from jobs.comparison import final_metrics
from jobs.errors import BackendError, NotFound
from jobs.lineage import AttemptStatus, Lineage, LineageStatus
from jobs.planning.serving import choose_framework
from jobs.records import Actor
from jobs.registry.port import Approval, PackageRequest, RegistryBackend
from jobs.registry.store import REGISTERING, ModelPackage, PackageStore
from jobs.settings import Settings
from jobs.store.store import Store

log = logging.getLogger(__name__)

DEFAULT_GROUP = "trainbot-{task}"
_NOT_GROUP = re.compile(r"[^a-zA-Z0-9-]+")


def group_for(lineage: Lineage) -> str:
    """``registry=NAME``, else the schedule that launched it, else ``trainbot-TASK`` (``trainbot-own-code``)."""
    if lineage.spec.registry:
        return lineage.spec.registry
    if lineage.schedule:
        return _group_name(lineage.schedule)
    return DEFAULT_GROUP.format(task=lineage.spec.task or "own-code")


def _group_name(name: str) -> str:
    # Schedule names may hold "_"; a Model Package Group name is letters, digits and hyphens.
    cleaned = _NOT_GROUP.sub("-", name).strip("-")[:63].strip("-")
    return cleaned or "trainbot"


def model_of(lineage: Lineage) -> tuple[str, str] | None:
    """(model data, job name) of the attempt that completed with a model; None when none did."""
    if lineage.status is not LineageStatus.COMPLETED:
        return None
    done = [a for a in lineage.attempts if a.status is AttemptStatus.COMPLETED and a.model_artifacts]
    return (str(done[-1].model_artifacts), done[-1].job_name) if done else None


class RegistryService:
    def __init__(self, *, store: Store, remote: RegistryBackend | None, settings: Settings, clock: Clock) -> None:
        self._store = store
        self._packages = PackageStore(store, clock=clock)
        self._remote = remote if settings.registry_on else None
        self._clock = clock

    @property
    def packages(self) -> PackageStore:
        return self._packages

    @property
    def remote_name(self) -> str | None:
        """Where packages are registered besides the store ("sagemaker"), or None."""
        return self._remote.name if self._remote is not None else None

    # -- registering ------------------------------------------------------------------------------

    def register(self, lineage_id: str) -> ModelPackage | None:
        """The lineage's package, registered now unless it was before; None when it produced no model.
        Safe to run twice (or in two processes): the lineage id keys the row and the remote package."""
        found = self._packages.find(lineage_id)
        if found is not None and found.status != REGISTERING:
            return found
        lineage = self._store.get_lineage(lineage_id)
        model = model_of(lineage)
        if model is None:
            return None
        model_data, job_name = model
        request = self._request(lineage, model_data, job_name)
        self._packages.claim({
            "lineage_id": lineage.id, "group_name": request.group, "backend": lineage.backend,
            "job_name": job_name, "model_data": model_data, "task": request.task,
            "code_commit": request.commit, "metrics": request.metrics,
        })
        if self._remote is None or lineage.backend != self._remote.name:
            package = self._packages.registered(lineage.id, version=None)
        else:
            remote = self._remote.register(request)
            package = self._packages.registered(lineage.id, version=remote.version, arn=remote.arn,
                                                image=remote.image)
        self._store.audit(None, "registry.register", lineage.id,
                          {"group": package.group_name, "version": package.version, "arn": package.arn})
        log.info("registered %s as %s", lineage.id, package.label)
        return package

    def _request(self, lineage: Lineage, model_data: str, job_name: str) -> PackageRequest:
        spec = lineage.spec
        framework = None
        if lineage.backend != "local":
            framework = choose_framework(spec.transformers_version, spec.pytorch_version, spec.py_version, spec.task).framework
        return PackageRequest(
            group=group_for(lineage), lineage_id=lineage.id, job_name=job_name, model_data=model_data,
            task=spec.task or "", framework=framework, code=spec.code or "", commit=spec.code_commit or "",
            metrics=final_metrics(lineage), schedule=lineage.schedule or "", launched_by=lineage.launched_by,
        )

    # -- approval ---------------------------------------------------------------------------------

    def approve(self, lineage_id: str, *, actor: Actor | None, reason: str) -> ModelPackage | None:
        return self._set(lineage_id, Approval.APPROVED, actor, reason)

    def reject(self, lineage_id: str, *, actor: Actor | None, reason: str) -> ModelPackage | None:
        return self._set(lineage_id, Approval.REJECTED, actor, reason)

    def _set(self, lineage_id: str, approval: Approval, actor: Actor | None, reason: str) -> ModelPackage | None:
        """The store's approval, then the remote registry's; a remote refusal is logged and audited (the
        promotion or rollback it follows has happened all the same)."""
        try:
            package = self.register(lineage_id)
        except (NotFound, BackendError) as exc:
            log.warning("%s could not be registered before its approval: %s", lineage_id, exc.message)
            package = self._packages.find(lineage_id)
        if package is None:
            return None
        who = actor.user_id if actor else "trainbot"
        self._packages.set_approval(lineage_id, approval, by=who, reason=reason)
        if package.arn and self._remote is not None:
            try:
                self._remote.set_approval(package.arn, approval, f"{approval.value} by {who}: {reason}"[:1000],
                                          {"lineage_id": lineage_id, "approval_by": who})
            except BackendError as exc:
                log.warning("the registry kept %s's approval at %s: %s", package.label, package.approval.value,
                            exc.message)
                self._store.audit(actor, "registry.approval_failed", lineage_id, {"reason": exc.message})
        self._store.audit(actor, f"registry.{approval.name.lower()}", lineage_id,
                          {"package": package.label, "reason": reason})
        return self._packages.get(lineage_id)

    # -- reading ----------------------------------------------------------------------------------

    def find(self, lineage_id: str) -> ModelPackage | None:
        return self._packages.find(lineage_id)

    def list(self, group: str | None = None, *, limit: int = 50) -> builtins.list[ModelPackage]:
        if group is not None and not self._packages.list(group, limit=1):
            known = ", ".join(name for name, _, _ in self._packages.groups()[:10]) or "none yet"
            raise NotFound(f"There is no model line {group!r} in the registry; the lines are: {known}.")
        return self._packages.list(group, limit=limit)

    def groups(self) -> builtins.list[tuple[str, int]]:
        return [(name, count) for name, count, _ in self._packages.groups()]

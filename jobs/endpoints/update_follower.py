"""Following the updates in place under way (the watch cycle): an update that serves moves the endpoint's
history on (the revision serves, the one before is replaced or rolled back), approves the promoted package,
and tells the job's thread what serves now; one that does not take (failed, or rolled back by SageMaker on
its alarm) leaves the endpoint as it was and says why. Every step is a guarded move, so two processes
following the same update make one change and one message.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from jobs.clock import Clock
from jobs.endpoints import texts
from jobs.endpoints.port import EndpointBackend, RemoteEndpoint
from jobs.endpoints.revisions import Action, Revision, RevisionStatus, RevisionStore
from jobs.endpoints.store import LIVE, EndpointCycle, EndpointStore
from jobs.errors import NotFound, TrainbotError
from jobs.records import Actor
from jobs.registry.port import Approval
from jobs.store.store import Store

if TYPE_CHECKING:
    from jobs.registry.service import RegistryService

log = logging.getLogger(__name__)

_UPDATING = (RevisionStatus.UPDATING,)
_SERVING = (RevisionStatus.SERVING,)
#: SageMaker reports these while it moves an endpoint; seen once, an InService on the old config after
#: them means the update was rolled back.
_MOVING = ("Updating", "RollingBack", "SystemUpdating")
#: An InService on the old config this long after the update was asked for is a rollback too.
UPDATE_GRACE = timedelta(minutes=10)


class UpdateFollower:
    def __init__(self, *, store: Store, endpoints: EndpointStore, revisions: RevisionStore,
                 backend: EndpointBackend, clock: Clock, registry: RegistryService | None) -> None:
        self._store = store
        self._endpoints = endpoints
        self._revisions = revisions
        self._backend = backend
        self._clock = clock
        self.registry = registry

    def follow(self, cycle: EndpointCycle) -> None:
        """Every update under way once: served, not taken, or still moving."""
        for revision in self._revisions.with_status(None, RevisionStatus.UPDATING):
            if revision.action is Action.DEPLOY:
                continue  # the endpoint's creation: EndpointService follows it
            cycle.followed += 1
            try:
                self._follow(revision)
            except TrainbotError as exc:
                log.warning("could not follow the update of %s: %s", revision.endpoint, exc.user_message())

    def _follow(self, revision: Revision) -> None:
        endpoint = self._endpoints.find(revision.endpoint)
        if endpoint is None or endpoint.status.value not in LIVE:
            self._not_taken(revision, "the endpoint was removed while it was being updated.", rejected=False)
            return
        try:
            remote = self._backend.describe(revision.endpoint)
        except NotFound:
            remote = RemoteEndpoint(revision.endpoint, "Failed", "the backend no longer has it")
        if remote.ready and remote.config_name in ("", revision.config_name) and not remote.failure_reason:
            self._served(revision)
        elif remote.failed:
            self._not_taken(revision, remote.failure_reason or f"the endpoint is {remote.status}.", rejected=False)
        elif remote.ready and (remote.failure_reason or revision.remote_status in _MOVING
                               or self._clock.now() - revision.created_at > UPDATE_GRACE):
            reason = remote.failure_reason or texts.AUTO_ROLLED_BACK.format(alarm=revision.alarm or "-")
            self._not_taken(revision, reason, rejected=True)
        elif remote.status != revision.remote_status:
            self._revisions.mirror(revision.id, remote.status)

    def _served(self, revision: Revision) -> None:
        now = self._clock.now()
        if not self._revisions.move(revision.id, _UPDATING, RevisionStatus.SERVING, serving_since=now,
                                    remote_status="InService"):
            return  # another process saw it first
        previous = self._revisions.get(revision.replaces) if revision.replaces else None
        if previous is not None:
            ended = RevisionStatus.ROLLED_BACK if revision.action is Action.ROLLBACK else RevisionStatus.REPLACED
            self._revisions.move(previous.id, _SERVING, ended, ended_at=now)
        if revision.restores:
            self._revisions.move(revision.restores, (RevisionStatus.REPLACED,), RevisionStatus.RESTORED, ended_at=now)
        self._endpoints.finish_update(revision.endpoint, revision.id, revision.serving_fields())
        who = Actor(revision.requested_by, via=revision.via)
        # Who asked was checked when they asked (PromotionService.plan: the model's launcher or an admin, by
        # user or group), so the approval is theirs; the groups are not known here to check again.
        if revision.action is Action.PROMOTE and self.registry is not None:
            self.registry.approve(revision.lineage_id, actor=who, reason=f"promoted into {revision.endpoint}"
                                  + (f": {revision.reason}" if revision.reason else ""))
        self._announce_served(revision, previous)

    def _not_taken(self, revision: Revision, reason: str, *, rejected: bool) -> None:
        now = self._clock.now()
        if not self._revisions.move(revision.id, _UPDATING, RevisionStatus.FAILED, failure_reason=reason,
                                    ended_at=now):
            return
        self._endpoints.finish_update(revision.endpoint, revision.id, None)
        if rejected and revision.action is Action.PROMOTE and self.registry is not None:
            self.registry.reject(revision.lineage_id, actor=None, reason=f"not taken by {revision.endpoint}: {reason}")
        previous = self._revisions.get(revision.replaces) if revision.replaces else None
        text = texts.UPDATE_FAILED.format(name=revision.endpoint, lineage=revision.lineage_id,
                                          reason=reason.rstrip(".") + ".",
                                          previous=previous.lineage_id if previous else "what it served")
        self._enqueue(texts.ENDPOINT_UPDATE_FAILED, revision, revision.lineage_id, text, {"reason": reason})

    def _announce_served(self, revision: Revision, previous: Revision | None) -> None:
        was = previous.lineage_id if previous else "nothing"
        if revision.action is Action.ROLLBACK:
            text = texts.ROLLED_BACK.format(
                name=revision.endpoint, who=revision.requested_by, lineage=revision.lineage_id,
                package=self._package_words(revision.lineage_id), previous=was,
                reason=f" ({revision.reason.rstrip('.')})" if revision.reason else "")
            if previous is not None:
                text += self._kept_words(previous.lineage_id, revision.requested_by)
            thread = previous.lineage_id if previous else revision.lineage_id
            self._enqueue(texts.ENDPOINT_ROLLED_BACK, revision, thread, text, {"previous_lineage_id": was})
            return
        who = f"{revision.requested_by}'s schedule" if revision.via == "schedule" else revision.requested_by
        text = texts.PROMOTED.format(name=revision.endpoint, lineage=revision.lineage_id,
                                     package=self._package_words(revision.lineage_id), who=who, previous=was)
        self._enqueue(texts.ENDPOINT_PROMOTED, revision, revision.lineage_id, text, {"previous_lineage_id": was})

    def _enqueue(self, kind: str, revision: Revision, thread_lineage: str, text: str, extra: dict[str, Any]) -> None:
        """Into the thread of ``thread_lineage``'s job (its channel), once per revision."""
        try:
            channel = self._store.get_lineage(thread_lineage).channel
        except NotFound:
            channel = None
        payload = {"kind": kind, "text": text, "endpoint": revision.endpoint, "revision": revision.id,
                   "lineage_id": revision.lineage_id, "job_name": revision.job_name,
                   "action": revision.action.value, "by": revision.requested_by, **extra}
        self._store.outbox.enqueue(kind=kind, payload=payload, lineage_id=thread_lineage, channel=channel,
                                   dedup_key=f"{kind}:{revision.endpoint}:{revision.id}")

    def _kept_words(self, lineage_id: str, requested_by: str) -> str:
        """A rollback by someone who may not change ``lineage_id``'s package left it as it was: say so (the
        rollback's own call decided it, PromotionService.package_kept; its package shows what it decided)."""
        if self.registry is None:
            return ""
        try:
            owner = self._store.get_lineage(lineage_id).launched_by
        except NotFound:
            return ""
        package = self.registry.find(lineage_id)
        if owner == requested_by or (package is not None and package.approval is Approval.REJECTED):
            return ""
        return " " + texts.PACKAGE_KEPT.format(lineage=lineage_id, owner=owner)

    def _package_words(self, lineage_id: str) -> str:
        label = self.package_label(lineage_id)
        return f" (package {label})" if label else ""

    def package_label(self, lineage_id: str) -> str | None:
        package = self.registry.find(lineage_id) if self.registry is not None else None
        return package.label if package is not None and package.version is not None else None

"""A local endpoint world for promotions: a store holding one completed local lineage per model folder, and the
endpoint service (with its registry) the bot builds on the local backend. Used by the local promotion tests and
bench/promote.py."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from jobs.backends.local.endpoints import LocalEndpoints
from jobs.clock import SystemClock
from jobs.endpoints.revisions import RevisionStatus
from jobs.endpoints.service import EndpointService
from jobs.records import Actor
from jobs.registry.service import RegistryService
from jobs.settings import Settings
from jobs.store.store import Store
from tests.support.endpoints import LAUNCHER, completed_lineage


@dataclass
class LocalPromotion:
    home: Path
    store: Store
    service: EndpointService
    registry: RegistryService
    backend: LocalEndpoints

    def port(self, endpoint: str) -> int:
        """The loopback port the endpoint's own server listens on."""
        return int(json.loads((self.home / "local-endpoints" / endpoint / "run" / "server.json").read_text())["port"])

    def follow(self, revision_id: int, seconds: float) -> RevisionStatus:
        """Poll as the watcher does until the update in place is over; its final status."""
        deadline = time.monotonic() + seconds
        while True:
            self.service.poll_once()
            status = self.service.promotions.revisions.get(revision_id).status
            if status is not RevisionStatus.UPDATING:
                return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"revision {revision_id} did not finish in {seconds:.0f} s")
            time.sleep(0.05)


def local_promotion(home: Path, models: dict[str, Path], *, actor: Actor = LAUNCHER) -> LocalPromotion:
    """``models``: lineage id -> the model folder its completed attempt left."""
    clock = SystemClock()
    store = Store(f"sqlite:///{home / 'trainbot.db'}", clock=clock)
    store.migrate()
    settings = Settings(trainbot_home=home, trainbot_backend="local")
    registry = RegistryService(store=store, remote=None, settings=settings, clock=clock)
    backend = LocalEndpoints(home, clock)
    service = EndpointService(store=store, backend=backend, settings=settings, clock=clock, registry=registry)
    for lineage_id, model in models.items():
        completed_lineage(store, lineage_id, backend="local", model_artifacts=str(model), actor=actor)
    return LocalPromotion(home, store, service, registry, backend)

"""A local endpoint updated in place for real: two tiny BERTs (different weights) saved by the offline
assets' builder, the first served by the endpoint's own process on loopback, the second promoted into it
while a steady stream of requests keeps coming, then rolled back. Every answer names the config that gave
it (X-Trainbot-Config): no request fails, requests started before the swap finish on the old model, and
once one answer came from the new model every later request does. A model that cannot load never takes
traffic: the old one keeps serving and the update is recorded as not taken."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

import pytest

from jobs.backends.local.offline_assets import build_tiny_bert
from jobs.endpoints.revisions import RevisionStatus
from jobs.endpoints.service import EndpointService
from jobs.registry.port import Approval
from jobs.registry.service import RegistryService
from tests.support.endpoints import LAUNCHER
from tests.support.invocations import QUESTION, Answer, InvocationStream
from tests.support.local_promotion import LocalPromotion, local_promotion

pytestmark = pytest.mark.timeout(300)

@dataclass
class Rig:
    world: LocalPromotion
    name: str
    port: int

    @property
    def service(self) -> EndpointService:
        return self.world.service

    @property
    def registry(self) -> RegistryService:
        return self.world.registry


def wait_for(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    home = tmp_path_factory.mktemp("local-promotion")
    models = home / "data"
    for index in (1, 2):
        build_tiny_bert(models / f"model-{index}", seed=index)
    (models / "broken").mkdir()
    (models / "broken" / "config.json").write_text("{not json")
    world = local_promotion(home, {lineage: models / folder for lineage, folder in
                                   (("qa-1", "model-1"), ("qa-2", "model-2"), ("qa-broken", "broken"))})
    service = world.service
    name = service.deploy("qa-1", options={"name": "prod-local"}, actor=LAUNCHER).name
    try:
        wait_for(lambda: bool(service.poll_once().ready) or service.get(name).status.value == "in_service", 180,
                 "the local endpoint to load its model")
        yield Rig(world, name, world.port(name))
    finally:
        world.backend.delete(name)


def follow_until_over(rig: Rig, revision_id: int) -> RevisionStatus:
    return rig.world.follow(revision_id, 180)


def more_traffic(stream: InvocationStream, count: int, what: str) -> None:
    target = stream.count() + count
    wait_for(lambda: stream.count() >= target, 60, what)


def served_at(answers: list[Answer], moment: float) -> tuple[list[Answer], list[Answer]]:
    return [a for a in answers if a.ended <= moment], [a for a in answers if a.started >= moment]


def test_a_promotion_and_a_rollback_swap_the_model_without_failing_a_request(rig: Rig) -> None:
    first = rig.service.get(rig.name).serving_config
    asked = rig.service.predict(rig.name, QUESTION["inputs"], actor=LAUNCHER)  # /predict, as before any swap
    assert set(asked) >= {"answer", "score"}
    with InvocationStream(rig.port) as stream:
        wait_for(lambda: stream.count() >= 20, 60, "steady traffic")
        plan = rig.service.promotions.plan("qa-2", rig.name, options={}, actor=LAUNCHER)
        asked = time.monotonic()
        revision = rig.service.promotions.promote(plan, actor=LAUNCHER)
        assert follow_until_over(rig, revision.id) is RevisionStatus.SERVING
        swapped = time.monotonic()
        more_traffic(stream, 20, "traffic after the swap")
        # Taken before the call: the local endpoint may swap back inside it, and an answer it gives then
        # comes from the old model by design.
        rolled = time.monotonic()
        back = rig.service.promotions.rollback(rig.name, actor=LAUNCHER, reason="a test of the way back")
        assert follow_until_over(rig, back.id) is RevisionStatus.SERVING
        restored = time.monotonic()
        more_traffic(stream, 20, "traffic after the rollback")
    answers = sorted(stream.answers, key=lambda a: a.started)
    assert stream.errors == [] and {a.status for a in answers} == {200}, stream.errors
    before, _ = served_at(answers, asked)
    assert before and {a.config for a in before} == {first}  # in flight or done before: the old model
    _, after = served_at(answers, swapped)
    between = [a for a in after if a.ended <= rolled]
    assert between and {a.config for a in between} == {revision.config_name}
    _, final = served_at(answers, restored)
    assert final and {a.config for a in final} == {first}
    # Once an answer came from the new model, no later request got the old one (and back again).
    first_new = min(a.ended for a in answers if a.config == revision.config_name)
    assert all(a.config == revision.config_name for a in answers if first_new <= a.started < rolled)
    assert rig.service.get(rig.name).lineage_id == "qa-1"
    assert rig.registry.find("qa-2").approval is Approval.REJECTED


def test_a_model_that_does_not_load_never_takes_traffic(rig: Rig) -> None:
    serving = rig.service.get(rig.name).serving_config
    with InvocationStream(rig.port, threads=2) as stream:
        wait_for(lambda: stream.count() >= 10, 60, "steady traffic")
        revision = rig.service.promotions.promote(
            rig.service.promotions.plan("qa-broken", rig.name, options={}, actor=LAUNCHER), actor=LAUNCHER)
        assert follow_until_over(rig, revision.id) is RevisionStatus.FAILED
        more_traffic(stream, 10, "traffic after the failed swap")
    assert stream.errors == [] and {a.config for a in stream.answers} == {serving}
    failed = rig.service.promotions.revisions.get(revision.id)
    assert "the new model did not load" in failed.failure_reason
    assert rig.service.get(rig.name).updating_revision is None
    assert datetime.now(timezone.utc) >= failed.created_at

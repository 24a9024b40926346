"""The promotion surfaces through the router (as Slack and the console call them), on a real store with the
in-memory endpoint peer: the Promote card within Slack's limits with both sides and their cost, the button
values round-tripping (and a forged one refused), the outbox's lines with the right button, /models and
/endpoint."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from handlers import cards, promotion, router
from handlers.blocks import buttons_in
from jobs.endpoints.service import EndpointService
from jobs.errors import BackendError
from jobs.registry.service import RegistryService
from jobs.releases import texts as release_texts
from tests.handlers.fakes import ALICE, World, make_world, walk_limits
from tests.support.endpoints import FakeEndpoints, completed_lineage


@pytest.fixture
def world(tmp_path: Path) -> tuple[World, EndpointService, FakeEndpoints]:
    world = make_world(tmp_path)
    fake = FakeEndpoints()
    registry = RegistryService(store=world.store, remote=None, settings=world.settings, clock=world.clock)
    service = EndpointService(store=world.store, backend=fake, settings=world.settings, clock=world.clock,
                              registry=registry)
    world.services = dataclasses.replace(world.services, endpoints=service, registry=registry)
    metrics = {"eval_f1": 80.0, "eval_exact_match": 70.0, "eval_loss": 1.25}
    for lineage, bump in (("qa-1", 0.0), ("qa-2", 4.5)):
        completed_lineage(world.store, lineage)
        world.store.update_attempt(f"{lineage}-1", metrics={k: v + bump for k, v in metrics.items()})
        registry.register(lineage)
    service.deploy("qa-1", options={"name": "prod"}, actor=ALICE)
    fake.set_status("prod", "InService")
    service.poll_once()
    return world, service, fake


def test_the_promote_card_shows_both_sides_with_their_cost_within_slacks_limits(world) -> None:
    world, service, fake = world
    reply = router.run_command(world.ctx(), "deploy", "qa-2 name=prod instance_count=2 alarm=yes")
    assert reply.text.startswith("Promoting qa-2 into endpoint prod in place (it serves qa-1 now): 10% of capacity")
    assert "rolled back by SageMaker if alarm prod-5xx fires" in reply.text
    walk_limits(reply.blocks)
    fields = [f["text"] for b in reply.blocks if "fields" in b for f in b["fields"]]
    assert fields[0].startswith("*Serving now*\nqa-1") and fields[1].startswith("*Would serve*\nqa-2")
    assert "trainbot-question-answering v2 (pending)" in fields[1]
    assert [f for f in fields if f.startswith("*Cost*")] == ["*Cost*\n$0.74/h", "*Cost*\n$1.47/h"]
    assert "*eval_f1*\n84.5" in fields and "*Runs on*\n2 x ml.g4dn.xlarge" in fields
    [button] = buttons_in(reply.blocks)
    assert json.loads(button["value"]) == {"job": "qa-2", "endpoint": "prod",
                                           "options": {"instance_count": "2", "alarm": "yes"}}
    assert fake.of("update") == []
    answered = router.run_action(world.ctx(), cards.ACTION_PROMOTE, button["value"])
    assert answered is not None and answered.text == "Promoting qa-2 into prod: its thread says when it serves."
    [(_, _, update)] = fake.of("update")
    assert update.model.instance_count == 2 and update.rollout.alarm == "prod-5xx"


def test_a_forged_button_value_is_refused_in_one_sentence(world) -> None:
    world, _, fake = world
    for value in ("not json", '{"job": "qa-2"}', '{"endpoint": "prod", "revision": "1; drop"}'):
        action = cards.ACTION_PROMOTE if "job" in value or value == "not json" else cards.ACTION_ROLLBACK
        reply = router.run_action(world.ctx(), action, value)
        assert reply is not None and reply.text == promotion.BAD_BUTTON
    assert fake.of("update") == []


def test_the_outbox_lines_carry_the_button_a_person_wants_next(world) -> None:
    offered = {"kind": release_texts.RELEASE, "text": "Schedule nightly: qa-2 regressed <b>", "lineage_id": "qa-2",
               "endpoint": "prod", "offer": True, "revision": None}
    text, blocks = promotion.render(release_texts.RELEASE, offered)
    assert blocks[0]["text"]["text"].endswith("&lt;b&gt;")  # outside text escaped
    [promote] = buttons_in(blocks)
    assert promote["action_id"] == cards.ACTION_PROMOTE and json.loads(promote["value"])["job"] == "qa-2"
    _, blocks = promotion.render("endpoint_promoted", {"text": "prod now serves qa-2", "endpoint": "prod",
                                                       "revision": 7, "lineage_id": "qa-2"})
    [rollback] = buttons_in(blocks)
    assert rollback["action_id"] == cards.ACTION_ROLLBACK and json.loads(rollback["value"]) == {
        "endpoint": "prod", "revision": 7}
    _, blocks = promotion.render("endpoint_update_failed", {"text": "did not take", "endpoint": "prod"})
    assert buttons_in(blocks) == []


def test_models_and_endpoint_read_the_registry_and_the_history(world) -> None:
    world, _, _ = world
    models = router.run_command(world.ctx(), "models", "")
    assert "Model lines (1)" in models.text and "trainbot-question-answering: 2 versions" in models.text
    line = router.run_command(world.ctx(), "models", "trainbot-question-answering")
    assert "v1 qa-1: pending · eval_exact_match 70, eval_f1 80, eval_loss 1.25; serves prod" in line.text
    assert "v2 qa-2: pending" in line.text and "not deployed" in line.text
    assert router.run_command(world.ctx(), "models", "nope").text.startswith("There is no model line 'nope'")
    history = router.run_command(world.ctx(), "endpoint", "prod")
    assert history.text.startswith("Endpoint prod: in service, serving qa-1")
    assert "deployed qa-1 (trainbot-question-answering v1) by U_ALICE: serving now" in history.text
    assert router.run_command(world.ctx(), "rollback", "").text == promotion.USAGE_ROLLBACK
    assert "nothing to roll back to" in router.run_command(world.ctx(), "rollback", "prod").text


def test_a_promotion_that_fails_after_the_ack_is_told_escaped(world) -> None:
    """What the cloud answered is outside text: a failure told after the Promote press is escaped once."""
    world, service, fake = world
    fake.update_error = BackendError("UpdateEndpoint refused <!channel> & <@U0BOSS>")
    reply = router.run_command(world.ctx(), "deploy", "qa-2 name=prod")
    [button] = buttons_in(reply.blocks)
    router.run_action(world.ctx(), cards.ACTION_PROMOTE, button["value"])
    [told] = [s.text for s in world.chat.of("ephemeral") if "failed" in s.text]
    assert "&lt;!channel&gt; &amp; &lt;@U0BOSS&gt;" in told and "<!channel>" not in told, told

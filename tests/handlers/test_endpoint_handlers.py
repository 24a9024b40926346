"""/deploy, /predict, /undeploy and the card's Deploy button through the router: checks answered at once,
backend calls only off the ack path, outcomes told to the person who asked, refusals as one sentence."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from handlers import cards, endpoints, router
from handlers.chat import Reply
from handlers.context import CommandContext
from jobs.endpoints.port import EndpointStatus
from jobs.endpoints.service import EndpointService
from jobs.errors import BackendError, InvalidState
from jobs.lineage import LineageStatus
from jobs.records import Actor
from tests.handlers.fakes import ALICE, BOB, CHANNEL, Deferred, World, make_world, walk_limits
from tests.support.endpoints import FakeEndpoints, completed_lineage

QA_TEXT = "bert-1-ep question=\u201cWhat is the city?\u201d context=\u201cthe city is kalo .\u201d"  # Slack's quotes


@dataclass
class Rig:
    world: World
    backend: FakeEndpoints
    service: EndpointService
    later: Deferred

    def ctx(self, actor: Actor = ALICE) -> CommandContext:
        return self.world.ctx(actor)

    def command(self, name: str, text: str, actor: Actor = ALICE) -> Reply:
        return router.run_command(self.ctx(actor), name, text)

    def told(self) -> list[str]:
        return [s.text for s in self.world.chat.of("ephemeral")]


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    world = make_world(tmp_path)
    backend = FakeEndpoints()
    service = EndpointService(store=world.store, backend=backend, settings=world.settings, clock=world.clock)
    later = Deferred()
    world.services = replace(world.services, endpoints=service, run_later=later)
    completed_lineage(world.store, "bert-1")
    return Rig(world, backend, service, later)


def live(rig: Rig) -> str:
    rig.command("/deploy", "bert-1")
    rig.later.run()
    rig.backend.set_status("bert-1-ep", "InService")
    rig.service.poll_once()
    return "bert-1-ep"


def test_deploy_answers_with_a_card_and_calls_the_backend_only_off_the_ack_path(rig: Rig) -> None:
    reply = rig.command("/deploy", "bert-1 instance_type=ml.g4dn.2xlarge instances=2")
    assert rig.backend.of("deploy") == []
    assert reply.text.startswith("Deploying bert-1 as endpoint bert-1-ep on 2 x ml.g4dn.2xlarge")
    flat = json.dumps(reply.blocks)
    assert (
        "bert-1-ep" in flat
        and "transformers 4.28.1 / PyTorch 2.0.0 / py310" in flat
        and "/h while up" in flat
    )
    walk_limits(reply.blocks)
    rig.later.run()
    [(_, name, request)] = rig.backend.of("deploy")
    assert (name, request.instance_type, request.instance_count) == ("bert-1-ep", "ml.g4dn.2xlarge", 2)
    assert rig.service.get(name).status is EndpointStatus.CREATING and rig.told() == []


def test_the_cards_deploy_button_deploys_the_lineage(rig: Rig) -> None:
    reply = router.run_action(rig.ctx(), cards.ACTION_DEPLOY, "bert-1")
    assert reply is not None and "bert-1-ep" in reply.text
    rig.later.run()
    assert [c[1] for c in rig.backend.of("deploy")] == ["bert-1-ep"]
    with pytest.raises(InvalidState, match="already exists"):  # a second click: the router makes it a reply
        endpoints.on_deploy(rig.ctx(), "bert-1")


def test_the_plan_card_says_which_image_when_the_training_versions_have_none(rig: Rig) -> None:
    completed_lineage(
        rig.world.store,
        "old-1",
        text="bert-squad distribution=ddp transformers=4.46.1 pytorch=2.3.0 py=py311",
    )
    reply = rig.command("/deploy", "old-1")
    flat = json.dumps(reply.blocks)
    assert "no Hugging Face inference image" in flat and "transformers 4.48.0 / PyTorch 2.3.0 / py311" in flat
    assert reply.blocks[-1]["type"] == "context"


def test_deploy_refusals_are_one_sentence_and_nothing_is_deployed(rig: Rig) -> None:
    refused = rig.command("/deploy", "bert-1", actor=BOB)
    assert refused.text.startswith("Only the person who launched bert-1") and refused.ephemeral
    assert [e.action for e in rig.world.store.audit_log()][:1] == ["deploy.refused"]
    completed_lineage(rig.world.store, "run-1", status=LineageStatus.RUNNING)
    assert "not completed" in rig.command("/deploy", "run-1").text
    assert "no option 'gpus'" in rig.command("/deploy", "bert-1 gpus=8").text
    assert rig.command("/deploy", "").text.startswith("Usage: /deploy JOB")
    rig.later.run()
    assert rig.backend.of("deploy") == [] and "\n" not in refused.text


def test_a_deploy_the_backend_refuses_is_told_to_the_person(rig: Rig) -> None:
    rig.command("/deploy", "bert-1")
    rig.backend.deploy_error = BackendError("SageMaker refused: quota.")
    rig.later.run()
    assert rig.told() == ["Deploying bert-1-ep failed: SageMaker refused: quota."]
    assert rig.service.get("bert-1-ep").status is EndpointStatus.FAILED


def test_predict_answers_with_the_answer_and_its_score(rig: Rig) -> None:
    name = live(rig)
    rig.backend.answers.append({"score": 0.934, "start": 12, "end": 16, "answer": "kalo"})
    reply = rig.command("/predict", QA_TEXT)
    assert reply.text == f"Asking {name}…" and rig.backend.of("invoke") == []
    rig.later.run()
    assert rig.backend.of("invoke")[0][2] == {
        "inputs": {"question": "What is the city?", "context": "the city is kalo ."}
    }
    assert rig.told() == [f"{name}: kalo (score 0.93)"]


def test_predict_refusals_come_at_once(rig: Rig) -> None:
    name = live(rig)
    assert "needs both" in rig.command("/predict", f'{name} question="Who?"').text
    assert "no endpoint 'nope'" in rig.command("/predict", 'nope text="hi"').text
    assert "unbalanced quote" in rig.command("/predict", f'{name} question="Who').text
    assert rig.command("/predict", name).text.startswith("Usage: /predict NAME")
    rig.later.run()
    assert rig.backend.of("invoke") == []


def test_undeploy_deletes_off_the_ack_path_for_the_launcher_only(rig: Rig) -> None:
    name = live(rig)
    assert rig.command("/undeploy", name, actor=BOB).text.startswith("Only the person who launched bert-1")
    reply = rig.command("/undeploy", name)
    assert reply.text.startswith(f"Undeploying {name}") and rig.backend.of("delete") == []
    rig.later.run()
    assert [c[1] for c in rig.backend.of("delete")] == [name]
    assert rig.told() == [f"{name}: endpoint and its config deleted; the model is kept."]
    assert "deleted" in rig.command("/undeploy", name).text


def test_without_an_endpoint_service_the_commands_say_so(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    assert (
        router.run_command(world.ctx(), "/deploy", "bert-1").text
        == "Deploying is not set up on this bot yet."
    )
    assert world.ctx().channel_id == CHANNEL

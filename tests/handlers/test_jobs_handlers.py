"""/jobs, /job, /stop and the Stop button: answers, refusals with audit, the card redrawn after a stop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handlers import cards, router
from handlers.blocks import buttons_in
from jobs.lineage import Lineage, LineageStatus
from tests.handlers.fakes import ALICE, BOB, CHANNEL, World, make_world, walk_limits


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def launched(world: World, text: str = "distilbert-spot") -> Lineage:
    lineage = world.jobs.launch(text, actor=ALICE)
    world.jobs.attach_message(lineage.id, CHANNEL, "55.0001")
    return world.jobs.get(lineage.id)


def test_jobs_lists_them_and_says_so_when_empty(world: World) -> None:
    assert "No jobs yet" in router.run_command(world.ctx(), "/jobs", "").text
    first, second = launched(world), launched(world, "bert-squad")
    reply = router.run_command(world.ctx(), "/jobs", "")
    flat = json.dumps(reply.blocks)
    assert first.id in flat and second.id in flat and reply.ephemeral
    walk_limits(reply.blocks)


def test_job_shows_the_card_with_attempts(world: World) -> None:
    lineage = launched(world)
    reply = router.run_command(world.ctx(), "/job", lineage.id)
    flat = json.dumps(reply.blocks)
    assert f"{lineage.id}-1" in flat and "distilbert-base-uncased" in flat
    assert [b["text"]["text"] for b in buttons_in(reply.blocks)] == ["Stop"]
    walk_limits(reply.blocks)


def test_unknown_job_and_missing_argument(world: World) -> None:
    assert "'nope'" in router.run_command(world.ctx(), "/job", "nope").text
    assert router.run_command(world.ctx(), "/stop", " ").text.startswith("Usage: /stop")


def test_stop_by_someone_else_is_refused_and_audited(world: World) -> None:
    lineage = launched(world)
    reply = router.run_command(world.ctx(BOB), "/stop", lineage.id)
    assert "Only the person who launched" in reply.text
    assert world.backend.stopped == []
    refusal, = [e for e in world.store.audit_log() if e.action == "stop.refused"]
    assert refusal.user == "U_BOB" and refusal.target == lineage.id


def test_stop_button_by_a_stranger_is_refused_too(world: World) -> None:
    lineage = launched(world)
    reply = router.run_action(world.ctx(BOB), cards.ACTION_STOP, lineage.id)
    assert reply is not None and "Only the person who launched" in reply.text
    assert world.backend.stopped == []


def test_admin_may_stop_anyones_job(tmp_path: Path) -> None:
    world = make_world(tmp_path, trainbot_admins=("U_BOB",))
    lineage = launched(world)
    router.run_command(world.ctx(BOB), "/stop", lineage.id)
    assert world.backend.stopped == [f"{lineage.id}-1"]


def test_stop_stops_the_job_off_the_ack_path_and_redraws_the_card(world: World) -> None:
    lineage = launched(world)
    reply = router.run_action(world.ctx(), cards.ACTION_STOP, lineage.id)
    assert reply is not None and "Stopping" in reply.text
    assert world.backend.stopped == [f"{lineage.id}-1"]
    assert world.jobs.get(lineage.id).status is LineageStatus.STOPPED
    update, = world.chat.of("update")
    assert update.ts == "55.0001" and "stopped" in update.text
    assert buttons_in(update.blocks or []) == []


def test_stopping_an_ended_job_says_so(world: World) -> None:
    lineage = launched(world)
    router.run_command(world.ctx(), "/stop", lineage.id)
    reply = router.run_command(world.ctx(), "/stop", lineage.id)
    assert "already ended" in reply.text


def test_unexpected_errors_are_one_generic_sentence(world: World, caplog: pytest.LogCaptureFixture) -> None:
    def boom(*args: object, **kwargs: object) -> list[Lineage]:
        raise RuntimeError("secret=xoxb-123 in a stack")

    world.jobs.list = boom  # type: ignore[method-assign]
    reply = router.run_command(world.ctx(), "/jobs", "")
    assert reply.text.startswith("Something went wrong") and "xoxb" not in reply.text
    assert "RuntimeError" in caplog.text


def test_unknown_command_and_action(world: World) -> None:
    assert "Unknown command" in router.run_command(world.ctx(), "/nope", "").text
    reply = router.run_action(world.ctx(), "nope", "")
    assert reply is not None and "no longer handled" in reply.text


def test_late_commands_answer_even_before_their_handlers_exist(world: World) -> None:
    for name in ("deploy", "predict", "undeploy", "schedule"):
        assert router.run_command(world.ctx(), name, "").text


def test_console_finds_buttons_by_label(world: World) -> None:
    reply = router.run_command(world.ctx(), "/train", "bert-squad")
    button = router.find_button(reply.blocks, "launch")
    assert button is not None and button.action_id == cards.ACTION_LAUNCH
    assert router.find_button(reply.blocks, "nope") is None


def test_the_cards_deploy_button_goes_to_the_endpoints_handler(world: World) -> None:
    lineage = launched(world)
    reply = router.run_action(world.ctx(), cards.ACTION_DEPLOY, lineage.id)
    assert reply is not None and "Deploying is not set up" in reply.text  # no EndpointService in this world

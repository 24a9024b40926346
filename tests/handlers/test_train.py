"""/train and its plan card's buttons, through the router, on a real store and the scripted backend."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handlers import cards, router, texts, train
from handlers.blocks import buttons_in
from handlers.chat import Reply
from jobs.lineage import LineageStatus
from jobs.records import Actor
from tests.handlers.fakes import (
    ALICE,
    BOB,
    CHANNEL,
    Deferred,
    ModalRecordingChat,
    World,
    free_text_arguments,
    make_world,
    walk_limits,
)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def plan(world: World, text: str = "bert-squad spot=yes", actor: Actor = ALICE) -> Reply:
    return router.run_command(world.ctx(actor), "/train", text)


def button_value(reply: Reply, action_id: str) -> str:
    return next(b["value"] for b in buttons_in(reply.blocks) if b["action_id"] == action_id)


def test_help_answers_with_the_grammar(world: World) -> None:
    for text in ("help", ""):
        reply = plan(world, text)
        assert reply.ephemeral and "bert-squad" in reply.text and "help KEY" in reply.text
        walk_limits(reply.blocks)
        assert "bert-squad" in json.dumps(reply.blocks) and "spot" in json.dumps(reply.blocks)


def test_plan_card_shows_spec_cost_savings_and_buttons(world: World) -> None:
    reply = plan(world)
    assert reply.ephemeral
    walk_limits(reply.blocks)
    flat = json.dumps(reply.blocks)
    assert "bert-large-uncased-whole-word-masking" in flat and "2 x ml.p3.16xlarge" in flat
    assert "Managed spot" in flat and "saves" in flat and "Forecast: about " in flat and "Worst case $" in flat
    labels = [b["text"]["text"] for b in buttons_in(reply.blocks)]
    assert labels == ["Launch", "Edit", "Cancel"]
    request_id, text = train.decode_value(world.ctx(), button_value(reply, cards.ACTION_LAUNCH))
    assert text == "bert-squad spot=yes" and len(request_id) == 32
    assert world.backend.calls_of("launch") == []


def test_on_demand_plan_says_what_spot_would_save(world: World) -> None:
    flat = json.dumps(plan(world, "distilbert-spot spot=no").blocks)
    assert "With spot=yes it would cost about" in flat


def test_scaling_note_of_the_backend_is_on_the_card(world: World) -> None:
    world.backend.scaling_note = lambda plan: "local: tiny model, 200 examples"  # type: ignore[method-assign]
    assert "local: tiny model, 200 examples" in json.dumps(plan(world).blocks)


def test_bad_input_is_one_sentence_naming_the_token(world: World) -> None:
    reply = plan(world, "bert-squad instances=lots")
    assert reply.ephemeral and "lots" in reply.text and "\n" not in reply.text and "Traceback" not in reply.text


def test_stranger_refused_by_command_and_audited(tmp_path: Path) -> None:
    world = make_world(tmp_path, trainbot_allowed_users=("U_ALICE",))
    reply = plan(world, actor=BOB)
    assert "not allowed" in reply.text and not reply.blocks
    refusals = [e for e in world.store.audit_log() if e.action == "train.refused"]
    assert len(refusals) == 1 and refusals[0].user == "U_BOB"


def test_stranger_refused_by_button_even_with_a_valid_card(tmp_path: Path) -> None:
    world = make_world(tmp_path, trainbot_allowed_users=("U_ALICE",))
    value = button_value(plan(world), cards.ACTION_LAUNCH)  # Alice's card, pressed by Bob
    reply = router.run_action(world.ctx(BOB), cards.ACTION_LAUNCH, value)
    assert reply is not None and "not allowed" in reply.text
    assert world.backend.calls_of("launch") == [] and world.chat.said == []
    assert [e.action for e in world.store.audit_log()] == [f"{cards.ACTION_LAUNCH}.refused"]


def test_launch_posts_the_card_launches_and_updates_it(world: World) -> None:
    value = button_value(plan(world), cards.ACTION_LAUNCH)
    reply = router.run_action(world.ctx(), cards.ACTION_LAUNCH, value)
    assert reply is not None and "Launching" in reply.text
    assert len(world.backend.created) == 1
    post, = world.chat.of("post")
    assert post.channel == CHANNEL and "Launching" in post.text
    update = world.chat.of("update")[-1]
    lineage = world.jobs.list()[0]
    assert update.ts == post.ts and lineage.id in update.text
    assert (lineage.channel, lineage.message_ts) == (CHANNEL, post.ts)
    assert lineage.status is LineageStatus.RUNNING
    assert [b["text"]["text"] for b in buttons_in(update.blocks or [])] == ["Stop"]
    walk_limits(update.blocks or [])


def test_double_click_launches_once(world: World) -> None:
    value = button_value(plan(world), cards.ACTION_LAUNCH)
    router.run_action(world.ctx(), cards.ACTION_LAUNCH, value)
    again = router.run_action(world.ctx(), cards.ACTION_LAUNCH, value)
    assert again is not None and "already launched" in again.text
    assert len(world.backend.created) == 1 and len(world.chat.of("post")) == 1


def test_clicks_racing_the_background_launch_launch_once(tmp_path: Path) -> None:
    later = Deferred()
    world = make_world(tmp_path, run_later=later)
    value = button_value(plan(world), cards.ACTION_LAUNCH)
    first = router.run_action(world.ctx(), cards.ACTION_LAUNCH, value)
    second = router.run_action(world.ctx(), cards.ACTION_LAUNCH, value)
    assert first is not None and second is None and len(later.work) == 1
    later.run()
    assert len(world.backend.created) == 1 and len(world.store.list_lineages()) == 1


def test_refused_launch_updates_the_card_and_tells_the_user(tmp_path: Path) -> None:
    world = make_world(tmp_path, trainbot_max_job_usd=1.0)
    value = button_value(plan(world), cards.ACTION_LAUNCH)
    router.run_action(world.ctx(), cards.ACTION_LAUNCH, value)
    assert world.backend.created == []
    assert "Not launched" in world.chat.of("update")[-1].text
    ephemeral, = world.chat.of("ephemeral")
    assert ephemeral.user == "U_ALICE" and "TRAINBOT_MAX_JOB_USD" in ephemeral.text


def test_chat_down_at_launch_still_launches(world: World) -> None:
    world.chat.failing.add("post")
    value = button_value(plan(world), cards.ACTION_LAUNCH)
    router.run_action(world.ctx(), cards.ACTION_LAUNCH, value)
    assert len(world.backend.created) == 1 and world.jobs.list()[0].message_ts is None


def test_a_command_too_long_for_a_button_value_round_trips(world: World) -> None:
    text = "bert-squad " + " ".join(f"hp.{name}={'x' * 40}" for name in free_text_arguments()[:60])
    reply = plan(world, text)
    value = button_value(reply, cards.ACTION_LAUNCH)
    assert len(value) < 100
    assert train.decode_value(world.ctx(), value)[1] == text
    walk_limits(reply.blocks)


def test_a_forged_button_value_is_a_clear_reply(world: World) -> None:
    reply = router.run_action(world.ctx(), cards.ACTION_LAUNCH, "not json")
    assert reply is not None and reply.text == texts.STALE_BUTTON


def test_cancel(world: World) -> None:
    value = button_value(plan(world), cards.ACTION_CANCEL)
    reply = router.run_action(world.ctx(), cards.ACTION_CANCEL, value)
    assert reply is not None and reply.text == texts.CANCELLED and world.backend.calls == []


def test_edit_reprompts_where_there_are_no_modals(world: World) -> None:
    value = button_value(plan(world), cards.ACTION_EDIT)
    reply = router.run_action(world.ctx(), cards.ACTION_EDIT, value)
    assert reply is not None and "/train bert-squad spot=yes" in reply.text


def test_edit_opens_a_modal_and_its_submission_plans_again(tmp_path: Path) -> None:
    world = make_world(tmp_path, chat=ModalRecordingChat())
    value = button_value(plan(world, "bert-squad spot=yes hp.data_seed=3"), cards.ACTION_EDIT)
    assert router.run_action(world.ctx(trigger_id="trig-1"), cards.ACTION_EDIT, value) is None
    modal, = world.chat.of("modal")
    view = modal.extra["view"]
    walk_limits(view["blocks"], max_blocks=100)
    initial = {b["block_id"]: b["element"].get("initial_value", "") for b in view["blocks"]}
    assert initial["instance_count"] == "2" and initial["spot"] == "yes"
    assert initial["options"] == "bert-squad hp.data_seed=3"
    assert train.modal_channel(view["private_metadata"]) == CHANNEL
    initial["instance_count"] = "4"
    reply = router.run_submission(world.ctx(), cards.EDIT_CALLBACK, initial)
    assert "4 x ml.p3.16xlarge" in json.dumps(reply.blocks)
    initial["instance_count"] = "many"
    with pytest.raises(train.FieldErrors) as caught:
        router.run_submission(world.ctx(), cards.EDIT_CALLBACK, initial)
    assert list(caught.value.errors) == ["instance_count"] and "many" in caught.value.errors["instance_count"]


def edit_fields(world: World, text: str = "bert-squad spot=yes") -> dict[str, str]:
    """The Edit modal's fields as drawn for the plan of ``text``."""
    spec = world.jobs.plan(text).spec
    view = train.edit_modal(spec, text, CHANNEL)
    return {b["block_id"]: b["element"].get("initial_value", "") for b in view["blocks"]}


@pytest.mark.parametrize(("changes", "field", "words"), [
    # the case: the sentence names distribution=...model, and a substring match put it under Model
    ({"instance_count": "2", "distribution": "none"}, "instance_count", "needs distribution"),
    ({"instance_count": "2", "distribution": "none", "model": "roberta-large"}, "instance_count", "needs distribution"),
    ({"instance_count": "99"}, "instance_count", "TRAINBOT_MAX_INSTANCES"),
    ({"instance_type": "ml.nope.xlarge"}, "instance_type", "ml.nope"),
    ({"instance_type": "ml.g5.xlarge", "distribution": "data", "instance_count": "2"}, "distribution", "dataparallel"),
    ({"max_run": "soon"}, "max_run", "soon"),
    ({"max_wait": "60", "max_run": "2h"}, "max_wait", "at least max_run"),
    ({"model": "not a model"}, "model", "not a usable name"),
    ({"dataset": "mnli"}, "dataset", "text-classification data"),
    ({"spot": "perhaps"}, "spot", "perhaps"),
    ({"distribution": "sideways"}, "distribution", "sideways"),
    ({"options": "bert-squad hp.bf16=yes hp.fp16=no"}, "instance_type", "bf16=yes needs"),
    ({"options": "bert-squad hp.bf16=yes"}, "options", "cannot both be on"),
    ({"options": "bert-squad nonsense=1"}, "options", "nonsense"),
    ({"options": "bert-squad transformers_version=4.0.0"}, "options", "4.0.0"),
])
def test_each_edit_modal_error_shows_under_its_own_field(world: World, changes: dict[str, str], field: str,
                                                         words: str) -> None:
    values = edit_fields(world) | changes
    with pytest.raises(train.FieldErrors) as caught:
        router.run_submission(world.ctx(), cards.EDIT_CALLBACK, values)
    assert list(caught.value.errors) == [field], caught.value.errors
    assert words in caught.value.errors[field]

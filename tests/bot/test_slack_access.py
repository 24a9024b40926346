"""Issue 12, item 8: every command, button and modal obeys TRAINBOT_ALLOWED_USERS / TRAINBOT_ALLOWED_CHANNELS.

Each name in router.COMMANDS, router.ACTIONS and router.SUBMISSIONS goes as a signed request into the real
Bolt app over HTTP: a stranger (a user outside the list, or an allowed user in a channel outside it) gets
the very sentence /train answers, audited, and nothing runs; an allowed user in an allowed channel is not
refused. The console and the CLI keep their operator standing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from handlers import cards, router, train
from handlers.blocks import buttons_in
from jobs.errors import PermissionDenied
from jobs.records import Actor
from tests.support.slack_bot import HttpRig, block_action, http_rig, slash_command, view_submission

SECRET = "access-signing-secret"
ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
STRANGERS = {
    "user_outside_the_list": Actor("U_MALLORY", channel_id="C_ML", via="slack"),
    "channel_outside_the_list": Actor("U_ALICE", channel_id="C_RANDOM", via="slack"),
}
#: What each command is typed with; a command not named here is sent with no text.
COMMAND_TEXT = {
    "train": "bert-squad", "job": "{lineage}", "stop": "{lineage}", "deploy": "{lineage}",
    "predict": "some-endpoint text=hello", "undeploy": "some-endpoint", "schedule": "list",
}


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[HttpRig]:
    with http_rig(tmp_path, secret=SECRET, trainbot_allowed_users=("U_ALICE",),
                  trainbot_allowed_channels=("C_ML",)) as rig:
        yield rig


def refusal(rig: HttpRig, actor: Actor) -> str:
    """The sentence /train answers this actor with."""
    with pytest.raises(PermissionDenied) as refused:
        rig.world.jobs.policy.check_can_use(actor)
    return refused.value.user_message()


def lineage_of_alice(rig: HttpRig) -> str:
    """The running lineage of Alice's that /job, /stop, /deploy and the buttons name (launched once)."""
    existing = rig.world.store.list_lineages()
    if existing:
        return existing[0].id
    lineage = rig.world.jobs.launch("distilbert-spot", actor=ALICE)
    rig.world.jobs.attach_message(lineage.id, "C_ML", "1700000000.000001")
    return lineage.id


def run_command(rig: HttpRig, name: str, actor: Actor) -> str:
    text = COMMAND_TEXT.get(name, "").format(lineage=lineage_of_alice(rig))
    status, body = rig.bot.post(slash_command(f"/{name}", text, user=actor.user_id, channel=actor.channel_id or "",
                                              response_url=rig.slack.response_url()))
    rig.settle()
    assert status == 200
    return str(json.loads(body)["text"])


def action_value(rig: HttpRig, action_id: str) -> str:
    if action_id in (cards.ACTION_STOP, cards.ACTION_DEPLOY):
        return lineage_of_alice(rig)
    card = router.run_command(rig.world.ctx(ALICE), "train", "distilbert-spot")
    return next(b["value"] for b in buttons_in(card.blocks) if b["action_id"] == cards.ACTION_LAUNCH)


def press(rig: HttpRig, action_id: str, actor: Actor) -> list[str]:
    """Press a button on an ephemeral card; what the presser was answered (through response_url)."""
    value = action_value(rig, action_id)
    status, _ = rig.bot.post(block_action(action_id, value, user=actor.user_id, channel=actor.channel_id or "",
                                          response_url=rig.slack.response_url(), trigger_id="trig.x"))
    rig.settle()
    assert status == 200
    return [str(call.params.get("text", "")) for call in rig.slack.calls_to("response")]


def submit(rig: HttpRig, callback_id: str, actor: Actor) -> list[str]:
    """Submit the Edit modal; what the submitter was answered (chat.postEphemeral)."""
    text = "distilbert-spot"
    view = train.edit_modal(rig.world.jobs.plan(text).spec, text, actor.channel_id or "")
    values = {b["block_id"]: b["element"].get("initial_value", "") for b in view["blocks"]}
    status, _ = rig.bot.post(view_submission(callback_id, values, view["private_metadata"], user=actor.user_id))
    rig.settle()
    assert status == 200
    return [str(call.params.get("text", "")) for call in rig.slack.calls_to("chat.postEphemeral")]


def refusals(rig: HttpRig) -> list[str]:
    return [entry.action for entry in rig.world.store.audit_log() if entry.action.endswith(".refused")]


@pytest.mark.parametrize("stranger", list(STRANGERS))
@pytest.mark.parametrize("name", list(router.COMMANDS))
def test_every_command_refuses_strangers_with_the_train_sentence(rig: HttpRig, name: str, stranger: str) -> None:
    actor = STRANGERS[stranger]
    lineage_of_alice(rig)
    launched = len(rig.world.backend.calls)
    assert run_command(rig, name, actor) == refusal(rig, actor)
    assert refusals(rig) == [f"{name}.refused"]
    assert len(rig.world.backend.calls) == launched  # nothing ran for the stranger
    assert rig.slack.calls_to("response") == [] and rig.slack.calls_to("chat.postEphemeral") == []


@pytest.mark.parametrize("name", list(router.COMMANDS))
def test_every_command_answers_an_allowed_user(rig: HttpRig, name: str) -> None:
    assert "not allowed" not in run_command(rig, name, ALICE)
    assert refusals(rig) == []


@pytest.mark.parametrize("stranger", list(STRANGERS))
@pytest.mark.parametrize("action_id", list(router.ACTIONS))
def test_every_button_refuses_strangers(rig: HttpRig, action_id: str, stranger: str) -> None:
    actor = STRANGERS[stranger]
    lineage_of_alice(rig)
    launched = len(rig.world.backend.calls)
    assert press(rig, action_id, actor) == [refusal(rig, actor)]
    assert refusals(rig) == [f"{action_id}.refused"]
    assert len(rig.world.backend.calls) == launched and rig.slack.calls_to("views.open") == []


@pytest.mark.parametrize("action_id", list(router.ACTIONS))
def test_every_button_answers_an_allowed_user(rig: HttpRig, action_id: str) -> None:
    answers = press(rig, action_id, ALICE)
    assert all("not allowed" not in answer for answer in answers)
    assert answers or rig.slack.calls_to("views.open")  # Edit answers with a modal
    assert refusals(rig) == []


@pytest.mark.parametrize("stranger", list(STRANGERS))
@pytest.mark.parametrize("callback_id", list(router.SUBMISSIONS))
def test_every_modal_refuses_strangers(rig: HttpRig, callback_id: str, stranger: str) -> None:
    actor = STRANGERS[stranger]
    assert submit(rig, callback_id, actor) == [refusal(rig, actor)]
    assert refusals(rig) == [f"{callback_id}.refused"]


@pytest.mark.parametrize("callback_id", list(router.SUBMISSIONS))
def test_every_modal_answers_an_allowed_user(rig: HttpRig, callback_id: str) -> None:
    answers = submit(rig, callback_id, ALICE)
    assert len(answers) == 1 and "not allowed" not in answers[0]
    assert refusals(rig) == []


@pytest.mark.parametrize("via", ["console", "cli"])
def test_the_console_and_the_cli_keep_their_operator_standing(rig: HttpRig, via: str) -> None:
    operator = Actor(f"{via}:root", channel_id=None, via=via)
    for name in router.COMMANDS:
        text = COMMAND_TEXT.get(name, "").format(lineage=lineage_of_alice(rig))
        reply = router.run_command(rig.world.ctx(operator), name, text)
        assert "not allowed" not in reply.text and "cannot be used" not in reply.text, (name, reply.text)
    rig.settle()
    assert refusals(rig) == []

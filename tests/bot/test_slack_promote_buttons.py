"""The Promote and Rollback buttons with their permissions, as Slack sends them (signed block_actions into
the real Bolt app over HTTP), on (moto's) SageMaker: `/deploy JOB name=prod` on an endpoint that exists
answers with the Promote card (the model serving now and the new one side by side); a stranger's press is
refused in one sentence, audited, and nothing is updated; the owner's press promotes in place; the thread
hears what serves, with a Rollback button that a stranger cannot press and an admin can; `/rollback` by a
stranger is refused too. UpdateEndpoint, which moto lacks, is checked against botocore's service model with
a Stubber (tests/support/update_endpoint.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from handlers import cards
from handlers.blocks import buttons_in
from jobs.records import Actor
from tests.bot.promotion_rig import Bot, button, promotion_bot
from tests.support.moto_server import MotoAws, moto_aws, moto_server  # noqa: F401  (fixtures)
from tests.support.slack_bot import home_opened

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
REFUSED = "Only the owner of endpoint prod (U_ALICE, who deployed it) or an admin (TRAINBOT_ADMINS: U_ADMIN)"


@pytest.fixture
def bot(tmp_path: Path, moto_aws: MotoAws) -> Iterator[Bot]:  # noqa: F811
    with promotion_bot(tmp_path, moto_aws, trainbot_admins=("U_ADMIN",)) as running:
        yield running


def trained(bot: Bot, f1: float) -> str:
    lineage = bot.runtime.jobs.launch("bert-squad", actor=ALICE)
    bot.runtime.jobs.attach_message(lineage.id, "C_ML", f"1700000001.{len(bot.updates.requests) + f1:.0f}")
    bot.finish_job(lineage.id, {"eval_f1": f1})
    bot.cycle()
    return lineage.id


def test_promote_and_rollback_buttons_obey_the_owner_and_the_admins(bot: Bot) -> None:
    first, second = trained(bot, 80.0), trained(bot, 84.5)
    bot.command("/deploy", f"{first} name=prod")
    bot.cycle()
    sagemaker = bot.aws.client("sagemaker")
    first_config = sagemaker.describe_endpoint(EndpointName="prod")["EndpointConfigName"]

    card = bot.command("/deploy", f"{second} name=prod")
    assert card["response_type"] == "ephemeral" and card["text"].startswith(f"Promoting {second} into endpoint prod")
    fields = json.dumps(card["blocks"])
    assert "Serving now" in fields and "Would serve" in fields and first in fields and second in fields
    assert "84.5" in fields and "80" in fields and "/h" in fields
    promote = button(card, "Promote")
    assert promote is not None and promote["action_id"] == cards.ACTION_PROMOTE
    assert bot.updates.requests == []  # a card is an offer

    told = bot.press(cards.ACTION_PROMOTE, promote["value"], user="U_MALLORY", ephemeral=True)
    assert any(text.startswith(f"{REFUSED} may promote into it; ask one of them.") for text in told), told
    assert bot.updates.requests == []
    refusals = [e for e in bot.runtime.store.audit_log() if e.action == f"{cards.ACTION_PROMOTE}.refused"]
    assert [e.user for e in refusals] == ["U_MALLORY"]

    told = bot.press(cards.ACTION_PROMOTE, promote["value"], user="U_ALICE", ephemeral=True)
    assert told == [f"Promoting {second} into prod: its thread says when it serves."]
    assert bot.updates.last_for("prod")["EndpointConfigName"] != first_config
    bot.cycle()
    [served] = [c for c in bot.slack.calls_to("chat.postMessage") if "prod now serves" in str(c.params.get("text"))]
    assert served.params["thread_ts"] and f"prod now serves {second}" in served.params["text"]
    rollback = button(served, "Rollback")
    assert rollback is not None

    told = bot.press(cards.ACTION_ROLLBACK, rollback["value"], user="U_MALLORY")
    assert any(text.startswith(f"{REFUSED} may roll it back; ask one of them.") for text in told), told
    assert len(bot.updates.requests) == 1
    slash = bot.command("/rollback", "prod", user="U_MALLORY")
    assert slash["text"].startswith(REFUSED)

    told = bot.press(cards.ACTION_ROLLBACK, rollback["value"], user="U_ADMIN")
    assert told == [f"Rolling endpoint prod back to {first} (it serves {second} now)."]
    assert bot.updates.last_for("prod")["EndpointConfigName"] == first_config
    bot.cycle()
    assert sagemaker.describe_endpoint(EndpointName="prod")["EndpointConfigName"] == first_config
    package = bot.runtime.registry.find(second)
    described = sagemaker.describe_model_package(ModelPackageName=package.arn)
    assert described["ModelApprovalStatus"] == "Rejected"
    assert described["ApprovalDescription"].startswith("Rejected by U_ADMIN: rolled back out of prod by U_ADMIN")
    actions = [(e.action, e.user) for e in bot.runtime.store.audit_log(target="prod")]
    assert ("endpoint.promote", "U_ALICE") in actions and ("endpoint.rollback", "U_ADMIN") in actions

    told = bot.press(cards.ACTION_ROLLBACK, rollback["value"], user="U_ADMIN")  # pressed again, late
    assert told == [f"Endpoint prod no longer serves {second} (it serves {first} now): /rollback prod rolls back "
                    "what serves now."]
    assert len(bot.updates.requests) == 2


def test_a_promotion_that_makes_the_endpoint_worse_asks_first_naming_the_regression(bot: Bot) -> None:
    """Issue 35, item 2: a Promote of a model worse on the comparison's metric carries Slack's confirm dialog
    naming the regression; a Promote button that did not ask (a schedule's line) answers with that card as a
    second step instead of promoting; the destructive buttons' dialogs name their job or endpoint."""
    good, worse = trained(bot, 90.0), trained(bot, 80.0)
    bot.command("/deploy", f"{good} name=prod")
    bot.cycle()

    card = bot.command("/deploy", f"{worse} name=prod")
    sentence = f"{worse} is worse than {good}, which prod serves now: eval_f1 90 → 80 (-10.00 points)."
    assert f":warning: {sentence}" in json.dumps(card["blocks"], ensure_ascii=False)
    promote = button(card, "Promote")
    assert promote is not None and promote["style"] == "danger"
    assert promote["confirm"]["title"]["text"] == "Promote a worse model?"
    assert promote["confirm"]["text"]["text"] == sentence
    assert promote["confirm"]["confirm"]["text"] == "Promote anyway"

    # A button that never asked: the second step is the card with the question, and nothing is updated.
    unasked = json.dumps({"job": worse, "endpoint": "prod", "options": {}}, separators=(",", ":"))
    told = bot.press(cards.ACTION_PROMOTE, unasked, user="U_ALICE", ephemeral=True)
    assert told == [f"{sentence} Promote it anyway? The card asks before it promotes."]
    assert bot.updates.requests == []
    second_step = [c for c in bot.slack.calls_to("response") if c.params.get("blocks")][-1]
    assert button(second_step, "Promote")["confirm"]["text"]["text"] == sentence

    # Past Slack's dialog (the press of the card's button), it promotes.
    told = bot.press(cards.ACTION_PROMOTE, promote["value"], user="U_ALICE", ephemeral=True)
    assert told == [f"Promoting {worse} into prod: its thread says when it serves."]
    assert len(bot.updates.requests) == 1
    bot.cycle()
    [served] = [c for c in bot.slack.calls_to("chat.postMessage") if "prod now serves" in str(c.params.get("text"))]
    rollback = button(served, "Rollback")
    assert rollback is not None and rollback["confirm"]["title"]["text"] == "Roll prod back?"
    assert f"before {worse}" in rollback["confirm"]["text"]["text"]

    status, _ = bot.http.post_event(home_opened())
    assert status == 200
    bot.work.settle(timeout=60)
    home = bot.slack.calls_to("views.publish")[-1]
    view = home.params["view"]
    view = json.loads(view) if isinstance(view, str) else view
    undeploy = next(b for b in buttons_in(view["blocks"]) if b["text"]["text"] == "Undeploy")
    assert undeploy["confirm"]["title"]["text"] == "Undeploy prod?"
    assert "Applications calling prod get errors" in undeploy["confirm"]["text"]["text"]


def test_the_stop_buttons_question_names_its_job(bot: Bot) -> None:
    card = bot.command("/train", "bert-squad")
    launch = button(card, "Launch")
    assert launch is not None
    bot.press(cards.ACTION_LAUNCH, launch["value"], user="U_ALICE", ephemeral=True)
    [lineage] = bot.runtime.jobs.list()
    drawn = [c for c in bot.slack.calls_to("chat.update") if button(c, "Stop") is not None][-1]
    stop = button(drawn, "Stop")
    assert stop["confirm"]["title"]["text"] == f"Stop {lineage.id}?"

"""Issue 26, item 3: the platform's own requests, sent over real HTTP to the real Bolt app as Slack sends them.

ssl_check probes (unsigned), redelivered events (x-slack-retry-num / x-slack-retry-reason, keyed by event_id
in the store so replicas agree), and payloads from Enterprise Grid, org-wide installs, shared channels and
DMs, from the shapes in Slack's reference (the slash command, block_actions and Events API payload pages, and
the org-wide apps' reference payloads).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.slack_app import Redeliveries, create_app
from bot.slack_chat import SlackChat
from handlers import cards, texts, train
from handlers.blocks import buttons_in
from jobs.records import Actor
from jobs.store.inbound import InboundEvents
from tests.support.slack_api import TEAM, SlackApiServer
from tests.support.slack_bot import (
    HttpBot,
    HttpRig,
    block_action,
    home_opened,
    http_rig,
    signed_headers,
    slash_command,
    unpaced_web_client,
    view_submission,
)

SECRET = "platform-signing-secret"
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[HttpRig]:
    with http_rig(tmp_path, secret=SECRET) as rig:
        rig.slack.clear()  # the app's auth.test at start
        yield rig


# ---------------------------------------------------------------- ssl_check


def test_an_unsigned_ssl_check_is_answered_200_and_nothing_is_acted_on(rig: HttpRig,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        status, body = rig.bot.send("token=gIkuvaNzQIHg97ATvDxqgjtO&ssl_check=1", {"Content-Type": FORM})
    assert (status, body) == (200, "")
    assert rig.slack.calls == [] and rig.world.store.audit_log() == []
    assert "ssl_check" in caplog.text


@pytest.mark.parametrize("body", [
    "token=x&ssl_check=1&command=%2Fstop&text=job-1&user_id=U_ALICE",  # a command riding on the probe
    "ssl_check=1&ssl_check=1&token=x",
    "ssl_check=0&token=x",
    "token=x&ssl_check=1" + "&token=y" * 200,
    "payload=%7B%22type%22%3A%22block_actions%22%7D&ssl_check=1",
])
def test_anything_else_unsigned_is_still_refused(rig: HttpRig, body: str) -> None:
    assert rig.bot.send(body, {"Content-Type": FORM})[0] == 401
    assert rig.bot.send("token=x&ssl_check=1", {"Content-Type": "application/json"})[0] == 401
    assert rig.slack.calls == [] and rig.world.store.audit_log() == []


def test_a_signed_ssl_check_is_answered_too(rig: HttpRig) -> None:
    body = "token=x&ssl_check=1"
    assert rig.bot.send(body, signed_headers(SECRET, body))[0] == 200
    assert rig.world.store.audit_log() == []


# ---------------------------------------------------------------- redelivered events


def test_an_event_whose_first_delivery_failed_is_handled_when_slack_retries_it(rig: HttpRig) -> None:
    """The first delivery never arrived (Slack says http_error): the retry is the only one there is."""
    event = home_opened("U_ALICE")
    assert rig.bot.post_event(event, retry_num=1, retry_reason="http_error")[0] == 200
    rig.slack.wait_calls("views.publish")
    rig.settle()
    assert rig.bot.post_event(event, retry_num=2, retry_reason="http_error")[0] == 200
    rig.settle()
    assert len(rig.slack.calls_to("views.publish")) == 1


def test_a_retry_of_an_event_that_was_received_is_dropped(rig: HttpRig) -> None:
    event = home_opened("U_ALICE")
    assert rig.bot.post_event(event)[0] == 200
    rig.slack.wait_calls("views.publish")
    assert rig.bot.post_event(event, retry_num=1, retry_reason="http_timeout")[0] == 200
    rig.settle()
    assert len(rig.slack.calls_to("views.publish")) == 1
    other = home_opened("U_ALICE")
    other["event_id"] = "Ev2"
    rig.bot.post_event(other)
    rig.slack.wait_calls("views.publish", 2)


def test_replicas_on_one_store_agree_on_what_was_received(rig: HttpRig) -> None:
    """The first delivery reached one replica, Slack's retry the other: it is dropped there too."""
    client = unpaced_web_client(rig.world.settings)
    twin = create_app(rig.world.settings, rig.world.services, client=client,
                      chat=SlackChat(client), http=True)
    other = HttpBot(twin, secret=SECRET).start()
    try:
        event = home_opened("U_ALICE")
        assert rig.bot.post_event(event)[0] == 200
        rig.slack.wait_calls("views.publish")
        assert other.post_event(event, retry_num=1, retry_reason="http_timeout")[0] == 200
        rig.settle()
        assert len(rig.slack.calls_to("views.publish")) == 1
    finally:
        other.stop()


def test_a_delivery_a_listener_failed_on_gives_its_claim_back(rig: HttpRig) -> None:
    inbound = InboundEvents(rig.world.store, rig.world.clock)
    assert inbound.claim("EvBROKEN")
    Redeliveries(inbound).failed({"type": "event_callback", "event_id": "EvBROKEN"})  # answered 500
    Redeliveries(inbound).failed({"type": "block_actions"})  # nothing to give back
    event = home_opened("U_ALICE")
    event["event_id"] = "EvBROKEN"
    rig.bot.post_event(event, retry_num=1, retry_reason="http_error")
    rig.slack.wait_calls("views.publish")


def test_a_retried_command_is_still_not_acted_on_twice(rig: HttpRig) -> None:
    """Slack does not retry commands; one with a retry header (no event_id) is acknowledged and dropped."""
    assert rig.bot.post(slash_command("/stop", "nope", user="U_BOB"), retry_num=1) == (200, "")
    assert rig.world.store.audit_log() == []


# ---------------------------------------------------------------- the Edit modal's errors


def test_an_edit_modal_error_is_shown_under_its_own_field(rig: HttpRig) -> None:
    """`instance_count=2 needs distribution=data, ddp or model` went under Model (a substring match)."""
    spec = rig.world.jobs.plan("bert-squad").spec
    view = train.edit_modal(spec, "bert-squad", "C_ML")
    values = {b["block_id"]: b["element"].get("initial_value", "") for b in view["blocks"]}
    values |= {"instance_count": "2", "distribution": "none"}
    status, body = rig.bot.post(view_submission(cards.EDIT_CALLBACK, values, view["private_metadata"]))
    answer = json.loads(body)
    assert status == 200 and answer["response_action"] == "errors"
    assert list(answer["errors"]) == ["instance_count"] and "needs distribution" in answer["errors"]["instance_count"]


# ---------------------------------------------------------------- where the bot cannot post


def launch_value(blocks: list[dict]) -> str:
    return next(b["value"] for b in buttons_in(blocks) if b["action_id"] == cards.ACTION_LAUNCH)


@pytest.mark.parametrize(("channel", "channel_name", "says"), [
    ("D0PEOPLE", "directmessage", "will be in your DM with trainbot"),
    ("G0SECRET", "privategroup", "/invite @trainbot"),
])
def test_train_where_the_bot_cannot_post_says_where_the_job_will_post_and_launch_works(
        rig: HttpRig, channel: str, channel_name: str, says: str) -> None:
    """Issue 35, item 13: Slack takes /train in a DM between people or a private channel the bot is not in (its
    channel_name says which) but refuses the bot's posts there. The card says, before Launch, where the job's
    card and thread will be, and its Launch starts the job there at once (no second card, no lookup)."""
    rig.slack.hide(channel)
    status, body = rig.bot.post(slash_command("/train", "distilbert-spot", channel=channel, channel_name=channel_name,
                                              response_url=rig.slack.response_url("cmd")))
    card = json.loads(body)
    assert status == 200 and says in json.dumps(card["blocks"])
    assert [b["text"]["text"] for b in buttons_in(card["blocks"])][0] == texts.BUTTON_LAUNCH_DM
    rig.settle()
    assert rig.slack.calls_to("response") == [] and rig.slack.calls_to("conversations.info") == []

    rig.bot.post(block_action(cards.ACTION_LAUNCH, launch_value(card["blocks"]), channel=channel,
                              response_url=rig.slack.response_url("card")))
    rig.slack.wait_calls("chat.update")
    rig.settle()
    lineage, = rig.world.store.list_lineages()
    dm = rig.slack.calls_to("conversations.open")[0]
    assert dm.params["users"] == "U_ALICE" and lineage.channel == "DU_ALICE" and lineage.message_ts
    assert rig.world.backend.created == [f"{lineage.id}-1"]
    assert {c.params["channel"] for c in rig.slack.calls_to("chat.postMessage")} == {"DU_ALICE"}
    assert "your DM with trainbot" in rig.slack.calls_to("response")[0].params["text"]


def test_a_channel_found_unreachable_after_the_ack_gets_a_second_card_and_its_first_launches_nothing(
        rig: HttpRig) -> None:
    """Where Slack's channel_name says nothing (a shared channel the bot left, say), the card is drawn, the check
    follows off the ack path, and a second card offers the DM; the first card's Launch launches nothing."""
    rig.slack.hide("C0SHARED")
    status, body = rig.bot.post(slash_command("/train", "distilbert-spot", channel="C0SHARED", channel_name="partners",
                                              response_url=rig.slack.response_url("cmd")))
    first = json.loads(body)
    assert status == 200 and "blocks" in first
    offer, = rig.slack.wait_calls("response")
    assert "/invite @trainbot" in json.dumps(offer.params["blocks"])
    assert [b["text"]["text"] for b in buttons_in(offer.params["blocks"])][0] == texts.BUTTON_LAUNCH_DM
    rig.slack.clear()
    rig.bot.post(block_action(cards.ACTION_LAUNCH, launch_value(first["blocks"]), channel="C0SHARED",
                              response_url=rig.slack.response_url("first")))
    rig.slack.wait_for(lambda calls: sum(c.method == "response" for c in calls) >= 2)
    rig.settle()
    assert rig.world.store.list_lineages() == [] and rig.world.backend.created == []
    told = [c.params["text"] for c in rig.slack.calls_to("response")]
    assert any(text.startswith("Nothing was launched") and "/invite @trainbot" in text for text in told)


def test_once_known_the_card_itself_offers_the_dm(rig: HttpRig) -> None:
    rig.slack.hide("C0SHARED")
    command = slash_command("/train", "distilbert-spot", channel="C0SHARED", channel_name="partners",
                            response_url=rig.slack.response_url())
    rig.bot.post(command)
    rig.slack.wait_calls("response")
    rig.settle()
    rig.slack.clear()
    status, body = rig.bot.post(command)
    card = json.loads(body)
    assert [b["text"]["text"] for b in buttons_in(card["blocks"])][0] == texts.BUTTON_LAUNCH_DM
    rig.settle()
    assert rig.slack.calls_to("response") == [] and rig.slack.calls_to("conversations.info") == []


def test_a_channel_the_bot_is_in_gets_no_second_card(rig: HttpRig) -> None:
    status, body = rig.bot.post(slash_command("/train", "distilbert-spot", response_url=rig.slack.response_url()))
    assert status == 200 and launch_value(json.loads(body)["blocks"])
    rig.slack.wait_calls("conversations.info")
    rig.settle()
    assert rig.slack.calls_to("response") == []
    assert [b["text"]["text"] for b in buttons_in(json.loads(body)["blocks"])][0] == texts.BUTTON_LAUNCH


# ---------------------------------------------------------------- Enterprise Grid, org-wide installs, Slack Connect

GRID = "E0GRID"


def grid_command(text: str, *, user: str = "W0ALICE", team: str = TEAM, org_wide: bool = False,
                 channel: str = "C_ML", response_url: str = "http://127.0.0.1:9/response/none") -> dict[str, str]:
    """A slash command on Enterprise Grid: the workspace's team_id, the org's enterprise_id and name."""
    fields = slash_command("/train", text, user=user, channel=channel, response_url=response_url)
    fields.update(team_id=team, enterprise_id=GRID, enterprise_name="Acme Grid",
                  is_enterprise_install="true" if org_wide else "false")
    return fields


def grid_action(action_id: str, value: str, *, user: str = "W0ALICE", org_wide: bool = False,
                response_url: str = "http://127.0.0.1:9/response/none") -> dict:
    """block_actions on Enterprise Grid: user.team_id is the org's E... ID; an org-wide install's team is null."""
    payload = block_action(action_id, value, user=user, response_url=response_url)
    payload["user"]["team_id"] = GRID
    payload["enterprise"] = {"id": GRID, "name": "Acme Grid"}
    payload["is_enterprise_install"] = org_wide
    payload["team"] = None if org_wide else {"id": TEAM, "domain": "test", "enterprise_id": GRID,
                                             "enterprise_name": "Acme Grid"}
    return payload


def grid_home_opened(user: str, *, team: str, org_wide: bool) -> dict:
    event = home_opened(user)
    event.update(team_id=team, enterprise_id=GRID, is_ext_shared_channel=False, authorizations=[{
        "enterprise_id": GRID, "team_id": None if org_wide else team, "user_id": "UBOT", "is_bot": True,
        "is_enterprise_install": org_wide}])
    return event


def test_enterprise_grid_users_plan_launch_and_open_their_home(tmp_path: Path) -> None:
    with http_rig(tmp_path, secret=SECRET, slack=SlackApiServer(enterprise=GRID),
                  trainbot_allowed_users=("W0ALICE",)) as rig:
        card = json.loads(rig.bot.post(grid_command("distilbert-spot", response_url=rig.slack.response_url()))[1])
        rig.bot.post(grid_action(cards.ACTION_LAUNCH, launch_value(card["blocks"]),
                                 response_url=rig.slack.response_url()))
        rig.slack.wait_calls("chat.update")
        rig.settle()
        lineage, = rig.world.store.list_lineages()
        assert lineage.launched_by == "W0ALICE" and "<@W0ALICE>" in json.dumps(rig.slack.calls_to("chat.update")[-1].params)
        # Another workspace of the same org, in a channel shared across the org: one of the org's own.
        other = json.loads(rig.bot.post(grid_command("distilbert-spot", team="T0WS2"))[1])
        assert launch_value(other["blocks"])
        rig.bot.post_event(grid_home_opened("W0ALICE", team=TEAM, org_wide=False))
        view, = [c.params["view"] for c in rig.slack.wait_calls("views.publish")]
        assert lineage.id in json.dumps(view)


def test_an_org_wide_install_reads_user_groups_of_the_requests_workspace(tmp_path: Path) -> None:
    """An org's token lists user groups only with a team_id (usergroups.list): without it the group in
    TRAINBOT_ALLOWED_USERS never matched and every member was refused."""
    slack = SlackApiServer(enterprise=GRID, org_wide=True)
    slack.usergroups = {"S0ML": ["W0ALICE"]}
    with http_rig(tmp_path, secret=SECRET, slack=slack, trainbot_allowed_users=("S0ML",)) as rig:
        status, body = rig.bot.post(grid_command("distilbert-spot", team="T0WS1", org_wide=True,
                                                 response_url=rig.slack.response_url()))
        card = json.loads(body)
        assert status == 200 and "not allowed" not in card["text"], card["text"]
        assert [c.params.get("team_id") for c in rig.slack.calls_to("usergroups.list")] == ["T0WS1"]
        rig.bot.post(grid_action(cards.ACTION_LAUNCH, launch_value(card["blocks"]), org_wide=True,
                                 response_url=rig.slack.response_url()))
        rig.slack.wait_calls("chat.update")
        rig.settle()
        assert len(rig.world.backend.created) == 1
        rig.bot.post_event(grid_home_opened("W0ALICE", team="T0WS1", org_wide=True))
        rig.slack.wait_calls("views.publish")
        rig.settle()
        assert "not allowed" not in json.dumps(rig.slack.published_views("W0ALICE")[-1])
        # The home tab asks about the workspace the event came from, never the org's token alone.
        assert all(c.params.get("team_id") == "T0WS1" for c in rig.slack.calls_to("usergroups.list"))


def partner_action(action_id: str, value: str, *, response_url: str) -> dict:
    """A button pressed in a Slack Connect channel by a person of another organization."""
    payload = block_action(action_id, value, user="U0PARTNER", channel="C0SHARED", ephemeral=False,
                           response_url=response_url)
    payload["user"]["team_id"] = "T0PARTNER"
    payload["is_enterprise_install"] = False
    return payload


def test_people_of_another_organization_in_a_shared_channel_are_refused(rig: HttpRig) -> None:
    """A Slack Connect channel shows the bot's cards to another company, whose people can press them: with
    no TRAINBOT_ALLOWED_USERS ("everyone") that meant everyone of both companies."""
    rig.slack.shared.add("C0SHARED")
    lineage = rig.world.jobs.launch("distilbert-spot", actor=Actor("U_ALICE", channel_id="C0SHARED", via="slack"))
    rig.world.jobs.attach_message(lineage.id, "C0SHARED", "1700000000.000001")
    rig.slack.clear()
    for action_id in (cards.ACTION_LOGS, cards.ACTION_STOP, cards.ACTION_DEPLOY):
        rig.bot.post(partner_action(action_id, lineage.id, response_url=rig.slack.response_url()))
    told = rig.slack.wait_calls("chat.postEphemeral", 3)
    rig.settle()
    assert all("from another organization" in c.params["text"] for c in told), [c.params["text"] for c in told]
    assert rig.world.backend.stopped == [] and not rig.world.store.get_lineage(lineage.id).status.is_terminal()
    command = slash_command("/train", "distilbert-spot", user="U0PARTNER", channel="C0SHARED")
    command["team_id"] = "T0PARTNER"
    assert "from another organization" in json.loads(rig.bot.post(command)[1])["text"]
    refusals = [e.action for e in rig.world.store.audit_log()]
    assert refusals.count(f"{cards.ACTION_LOGS}.refused") == 1 and "train.refused" in refusals
    # The bot's own people in that channel are not affected.
    mine = json.loads(rig.bot.post(slash_command("/train", "distilbert-spot", channel="C0SHARED"))[1])
    assert launch_value(mine["blocks"])


def test_a_partner_named_in_the_allow_list_is_let_in(tmp_path: Path) -> None:
    with http_rig(tmp_path, secret=SECRET, trainbot_allowed_users=("U_ALICE", "U0PARTNER")) as rig:
        command = slash_command("/train", "distilbert-spot", user="U0PARTNER", channel="C0SHARED")
        command["team_id"] = "T0PARTNER"
        assert launch_value(json.loads(rig.bot.post(command)[1])["blocks"])


def test_an_edited_plan_from_a_dm_between_people_reaches_the_person_by_dm(rig: HttpRig) -> None:
    """A modal's answer is an ephemeral post in its channel, which Slack refuses there: it goes to the
    person's DM with the bot, where its Launch keeps the job."""
    rig.slack.hide("D0PEOPLE")
    spec = rig.world.jobs.plan("distilbert-spot").spec
    view = train.edit_modal(spec, "distilbert-spot", "D0PEOPLE")
    values = {b["block_id"]: b["element"].get("initial_value", "") for b in view["blocks"]}
    assert rig.bot.post(view_submission(cards.EDIT_CALLBACK, values, view["private_metadata"])) == (200, "")
    posted, = rig.slack.wait_calls("chat.postMessage")
    rig.settle()
    assert posted.params["channel"] == "DU_ALICE" and launch_value(posted.params["blocks"])

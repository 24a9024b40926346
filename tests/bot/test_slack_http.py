"""The real Bolt app over HTTP (uvicorn, signed form-encoded requests) against the fake Slack on loopback."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlencode

import pytest

from bot.slack_chat import SlackChat, make_web_client
from handlers import cards, train
from handlers.blocks import buttons_in
from tests.handlers.fakes import make_world
from tests.support.slack_api import BOT_TOKEN, SlackApiServer
from tests.support.slack_bot import (
    HttpRig,
    block_action,
    http_rig,
    signed_headers,
    slash_command,
    view_submission,
)

SECRET = "test-signing-secret"


Rig = HttpRig


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with http_rig(tmp_path, secret=SECRET, trainbot_allowed_users=("U_ALICE", "U_ADMIN"),
                  trainbot_admins=("U_ADMIN",)) as rig:
        yield rig


def plan_card(rig: Rig, text: str = "bert-squad spot=yes", user: str = "U_ALICE") -> dict:
    status, body = rig.bot.post(slash_command("/train", text, user=user, response_url=rig.slack.response_url()))
    assert status == 200
    return json.loads(body)


def value_of(card: dict, action_id: str) -> str:
    return next(b["value"] for b in buttons_in(card["blocks"]) if b["action_id"] == action_id)


def test_train_acks_with_the_ephemeral_plan_card(rig: Rig) -> None:
    card = plan_card(rig)
    assert card["response_type"] == "ephemeral" and "bert-large" in card["text"]
    assert [b["text"]["text"] for b in buttons_in(card["blocks"])] == ["Launch", "Edit", "Cancel"]
    assert rig.world.backend.calls == []


def test_launch_posts_the_card_in_channel_launches_and_updates_it(rig: Rig) -> None:
    value = value_of(plan_card(rig), cards.ACTION_LAUNCH)
    status, body = rig.bot.post(block_action(cards.ACTION_LAUNCH, value, response_url=rig.slack.response_url()))
    assert status == 200 and body == ""
    rig.slack.wait_calls("chat.update")
    rig.slack.wait_calls("response")
    rig.settle()
    post, = rig.slack.calls_to("chat.postMessage")
    assert post.params["channel"] == "C_ML" and post.token == f"Bearer {BOT_TOKEN}"
    lineage = rig.world.jobs.list()[0]
    update = rig.slack.calls_to("chat.update")[-1]
    assert update.params["ts"] == lineage.message_ts and lineage.id in update.params["text"]
    assert [b["text"]["text"] for b in buttons_in(update.params["blocks"])] == ["Stop"]
    response, = rig.slack.calls_to("response")
    assert response.params["replace_original"] is True and "Launching" in response.params["text"]
    assert rig.world.backend.created == [f"{lineage.id}-1"]


def test_double_clicks_and_retries_launch_once(rig: Rig) -> None:
    value = value_of(plan_card(rig), cards.ACTION_LAUNCH)
    click = block_action(cards.ACTION_LAUNCH, value, response_url=rig.slack.response_url())
    with ThreadPoolExecutor(4) as clicks:
        statuses = list(clicks.map(lambda _: rig.bot.post(click)[0], range(4)))
    assert rig.bot.post(click, retry_num=1)[0] == 200
    rig.slack.wait_calls("chat.update")
    rig.settle()
    assert statuses == [200] * 4
    assert len(rig.world.backend.created) == 1 and len(rig.world.store.list_lineages()) == 1
    assert len(rig.slack.calls_to("chat.postMessage")) == 1


def test_a_retried_command_does_not_act_again(rig: Rig) -> None:
    fields = slash_command("/stop", "nope", user="U_BOB")
    status, body = rig.bot.post(fields, retry_num=2)
    assert (status, body) == (200, "")
    assert rig.world.store.audit_log() == []


def test_strangers_are_refused_by_command_and_by_button(rig: Rig) -> None:
    card = plan_card(rig, user="U_BOB")
    assert "not allowed" in card["text"] and "blocks" not in card
    value = value_of(plan_card(rig), cards.ACTION_LAUNCH)
    status, _ = rig.bot.post(block_action(cards.ACTION_LAUNCH, value, user="U_BOB",
                                          response_url=rig.slack.response_url()))
    assert status == 200
    response, = rig.slack.wait_calls("response")
    assert "not allowed" in response.params["text"]
    rig.settle()
    assert rig.world.backend.calls_of("launch") == []
    actions = sorted(e.action for e in rig.world.store.audit_log())
    assert actions == [f"{cards.ACTION_LAUNCH}.refused", "train.refused"]


def test_stop_button_on_the_card_answers_the_presser_alone(rig: Rig) -> None:
    lineage = rig.world.jobs.launch("distilbert-spot", actor=rig.world.ctx().actor)
    rig.world.jobs.attach_message(lineage.id, "C_ML", "1700000000.000001")
    rig.bot.post(block_action(cards.ACTION_STOP, lineage.id, user="U_ADMIN", ephemeral=False))
    rig.slack.wait_calls("chat.update")
    ephemeral, = rig.slack.wait_calls("chat.postEphemeral")
    assert ephemeral.params["user"] == "U_ADMIN" and "Stopping" in ephemeral.params["text"]
    assert rig.world.backend.stopped == [f"{lineage.id}-1"]


@pytest.mark.parametrize("tamper", ["wrong", "stale", "missing_ts", "empty_ts", "empty_sig", "junk_ts", "no_sig"])
def test_bad_signatures_are_401_never_500(rig: Rig, tamper: str) -> None:
    body = urlencode(slash_command("/train", "bert-squad"))
    headers = signed_headers(SECRET, body)
    if tamper == "wrong":
        headers = signed_headers("another-secret", body)
    elif tamper == "stale":
        headers = signed_headers(SECRET, body, timestamp=int(time.time()) - 600)
    elif tamper == "missing_ts":
        del headers["X-Slack-Request-Timestamp"]
    elif tamper == "empty_ts":
        headers["X-Slack-Request-Timestamp"] = ""
    elif tamper == "empty_sig":
        headers["X-Slack-Signature"] = ""
    elif tamper == "junk_ts":
        headers["X-Slack-Request-Timestamp"] = "soon"
    else:
        del headers["X-Slack-Signature"]
    status, _ = rig.bot.send(body, headers)
    assert status == 401
    assert rig.world.backend.calls == [] and rig.world.store.audit_log() == []


def test_healthz_and_unknown_paths(rig: Rig) -> None:
    assert rig.bot.send("", {}, path="/healthz", method="GET") == (200, '{"ok": true}')
    assert rig.bot.send("", {}, path="/elsewhere", method="GET")[0] == 404


def test_rate_limited_posts_are_retried_after_retry_after(rig: Rig) -> None:
    rig.slack.rate_limit("chat.postMessage", times=1, retry_after=1)
    value = value_of(plan_card(rig), cards.ACTION_LAUNCH)
    rig.bot.post(block_action(cards.ACTION_LAUNCH, value, response_url=rig.slack.response_url()))
    rig.slack.wait_calls("chat.update", timeout=15)
    rig.settle()
    first, second = rig.slack.calls_to("chat.postMessage")
    assert second.at - first.at >= 0.9
    assert rig.world.jobs.list()[0].message_ts is not None


def test_edit_opens_a_modal_and_its_submission_validates_fields(rig: Rig) -> None:
    value = value_of(plan_card(rig), cards.ACTION_EDIT)
    rig.bot.post(block_action(cards.ACTION_EDIT, value, trigger_id="trig.edit"))
    opened, = rig.slack.wait_calls("views.open")
    assert opened.params["trigger_id"] == "trig.edit"
    view = opened.params["view"]
    values = {b["block_id"]: b["element"].get("initial_value", "") for b in view["blocks"]}
    bad = dict(values, instance_count="lots")
    status, body = rig.bot.post(view_submission(cards.EDIT_CALLBACK, bad, view["private_metadata"]))
    answer = json.loads(body)
    assert status == 200 and answer["response_action"] == "errors" and "lots" in answer["errors"]["instance_count"]
    good = dict(values, instance_count="4")
    status, body = rig.bot.post(view_submission(cards.EDIT_CALLBACK, good, view["private_metadata"]))
    assert status == 200 and body == ""
    ephemeral, = rig.slack.wait_calls("chat.postEphemeral")
    assert "4 x ml.p3.16xlarge" in json.dumps(ephemeral.params["blocks"])
    assert train.decode_value(rig.world.ctx(), value_of({"blocks": ephemeral.params["blocks"]},
                                                       cards.ACTION_LAUNCH))[1].count("instance_count=4") == 1


def test_the_manifest_declares_every_command_and_interactivity() -> None:
    import yaml

    from handlers.router import SLASH_COMMANDS

    manifest = yaml.safe_load((Path(__file__).parents[2] / "slack-manifest.yaml").read_text())
    declared = {c["command"] for c in manifest["features"]["slash_commands"]}
    assert declared == set(SLASH_COMMANDS)
    assert manifest["settings"]["interactivity"]["is_enabled"] and manifest["settings"]["socket_mode_enabled"]
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"commands", "chat:write", "files:write", "im:write"} <= scopes
    assert {"channels:history", "groups:history", "im:history"} <= scopes  # looking for a lost post
    assert manifest["features"]["app_home"]["home_tab_enabled"]
    assert "app_home_opened" in manifest["settings"]["event_subscriptions"]["bot_events"]


def test_serve_http_answers_then_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """`trainbot serve --http` as a process: /healthz, a signed command, then SIGTERM -> exit 0."""
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    from tests.support.moto_server import free_port

    with SlackApiServer() as slack:
        port = free_port()
        env = dict(os.environ, SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SECRET, SLACK_API_URL=slack.base_url,
                   TRAINBOT_BACKEND="local", TRAINBOT_HOME=str(tmp_path), PYTHONPATH=str(Path(__file__).parents[2]))
        process = subprocess.Popen([sys.executable, "-m", "bot", "serve", "--http", "--port", str(port)], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as answer:
                        assert answer.status == 200
                        break
                except OSError:
                    assert process.poll() is None, process.communicate()
                    assert time.monotonic() < deadline, "the server never came up"
                    time.sleep(0.1)
            body = urlencode(slash_command("/jobs", ""))
            request = urllib.request.Request(f"http://127.0.0.1:{port}/slack/events", data=body.encode(),
                                             headers=signed_headers(SECRET, body))
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert "No jobs yet" in json.loads(answer.read())["text"]
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
        assert process.returncode == 0, stderr.decode()
        assert b"Traceback" not in stderr
        assert "stopped cleanly" in (tmp_path / "trainbot.log").read_text()


def test_slack_chat_paces_posts_and_turns_failures_into_chat_unavailable(tmp_path: Path) -> None:
    from handlers.chat import ChatUnavailable
    from jobs.settings import Settings

    with SlackApiServer() as slack:
        settings = Settings(slack_bot_token=BOT_TOKEN, slack_api_url=slack.base_url.rstrip("/"))
        chat = SlackChat(make_web_client(settings))  # the governor on the real clock: a burst of 2, then 1.2 s
        for _ in range(3):
            chat.post("C1", "hi")
        chat.post("C2", "other")
        c1 = [c.at for c in slack.calls_to("chat.postMessage") if c.params["channel"] == "C1"]
        assert c1[2] - c1[0] >= 1.1
        slack.fail("chat.postMessage", error="channel_not_found")
        with pytest.raises(ChatUnavailable, match="channel_not_found") as caught:
            chat.post("C3", "hi")
        assert BOT_TOKEN not in str(caught.value)
        slack.set_down(True)
        with pytest.raises(ChatUnavailable):
            chat.update("C3", "1.0", "hi")
        slack.set_down(False)
        png = tmp_path / "curve.png"
        png.write_bytes(b"\x89PNG")
        chat.upload_file("C1", png, title="Loss", thread_ts="1.1")
        done, = slack.calls_to("files.completeUploadExternal")
        assert done.params["files"][0]["title"] == "Loss" and done.params["thread_ts"] == "1.1"
        chat.dm("U_ALICE", "hello")
        chat.dm("U_ALICE", "again")
        assert len(slack.calls_to("conversations.open")) == 1


def test_user_groups_in_the_allow_list_are_resolved_through_slack(tmp_path: Path) -> None:
    from bot.slack_people import GroupDirectory
    from handlers import router
    from jobs.records import Actor

    with SlackApiServer() as slack:
        slack.usergroups = {"S_TEAM": ["U_CAROL"], "S_OTHER": ["U_BOB"]}
        world = make_world(tmp_path, slack_bot_token=BOT_TOKEN, slack_api_url=slack.base_url,
                           trainbot_allowed_users=("S_TEAM",))
        groups = GroupDirectory(make_web_client(world.settings), world.settings)
        assert groups.groups_of("U_CAROL") == ("S_TEAM",) and groups.groups_of("U_BOB") == ("S_OTHER",)
        assert len(slack.calls_to("usergroups.list")) == 1  # cached
        carol = router.run_command(world.ctx(Actor("U_CAROL", "C_ML", groups.groups_of("U_CAROL"), "slack")),
                                   "train", "bert-squad")
        bob = router.run_command(world.ctx(Actor("U_BOB", "C_ML", groups.groups_of("U_BOB"), "slack")),
                                 "train", "bert-squad")
        assert carol.blocks and "not allowed" in bob.text
    nobody = GroupDirectory(make_web_client(world.settings), world.settings.model_copy(
        update={"trainbot_allowed_users": ("U_ALICE",)}))
    assert nobody.groups_of("U_CAROL") == ()  # no group configured: Slack is not asked

"""The real Bolt app over Socket Mode: the builtin client opens apps.connections.open on the fake Slack,
connects to its websocket, and acks envelopes with the handler's reply."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.serve import socket_mode_handler
from bot.slack_app import create_app
from bot.slack_chat import SlackChat
from handlers import cards
from handlers.blocks import buttons_in
from tests.handlers.fakes import World, make_world
from tests.support.slack_api import APP_TOKEN, BOT_TOKEN, SlackApiServer
from tests.support.slack_bot import (
    BackgroundWork,
    block_action,
    home_opened,
    slash_command,
    unpaced_web_client,
)
from tests.support.slack_socket import SocketModeServer


@dataclass
class Rig:
    slack: SlackApiServer
    socket: SocketModeServer
    world: World
    work: BackgroundWork


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    slack = SlackApiServer().start()
    socket = SocketModeServer().start()
    slack.socket_url = socket.url
    work = BackgroundWork()
    world = make_world(tmp_path, run_later=work, slack_bot_token=BOT_TOKEN, slack_app_token=APP_TOKEN,
                       slack_api_url=slack.base_url, trainbot_allowed_users=("U_ALICE",))
    client = unpaced_web_client(world.settings)
    app = create_app(world.settings, world.services, client=client,
                     chat=SlackChat(client), http=False)
    handler = socket_mode_handler(app, APP_TOKEN, client)
    handler.connect()
    socket.wait_connected()
    try:
        yield Rig(slack, socket, world, work)
    finally:
        # The server hangs up first: the client's blocking receive (3 s timeout) returns at once.
        handler.client.auto_reconnect_enabled = False
        socket.stop()
        handler.close()
        work.shutdown()
        slack.stop()


def test_connects_with_the_app_token(rig: Rig) -> None:
    opened, = rig.slack.calls_to("apps.connections.open")
    assert opened.token == f"Bearer {APP_TOKEN}"


def test_slash_command_envelope_is_acked_with_the_plan_card(rig: Rig) -> None:
    envelope = rig.socket.send("slash_commands", slash_command("/train", "bert-squad spot=yes"))
    ack = rig.socket.wait_ack(envelope)
    assert ack.payload is not None and ack.payload["response_type"] == "ephemeral"
    assert [b["text"]["text"] for b in buttons_in(ack.payload["blocks"])] == ["Launch", "Edit", "Cancel"]
    assert ack.acked_at - ack.sent_at < 3


def test_launch_over_socket_mode_launches_once_despite_a_redelivery(rig: Rig) -> None:
    ack = rig.socket.wait_ack(rig.socket.send("slash_commands", slash_command("/train", "distilbert-spot")))
    assert ack.payload is not None
    value = next(b["value"] for b in buttons_in(ack.payload["blocks"]) if b["action_id"] == cards.ACTION_LAUNCH)
    click = block_action(cards.ACTION_LAUNCH, value, response_url=rig.slack.response_url())
    first = rig.socket.send("interactive", click)
    rig.socket.wait_ack(first)
    rig.slack.wait_calls("chat.update")
    rig.work.settle()
    retried = rig.socket.send("interactive", click, retry_attempt=1)
    rig.socket.wait_ack(retried)
    rig.work.settle()
    assert len(rig.world.backend.created) == 1
    lineage = rig.world.jobs.list()[0]
    card, = rig.slack.calls_to("chat.postMessage")
    assert rig.slack.calls_to("chat.update")[-1].params["ts"] == lineage.message_ts
    assert lineage.channel == "C_ML" and lineage.message_ts is not None
    response, = rig.slack.calls_to("response")
    assert "Launching" in response.params["text"]


def test_a_stranger_is_refused_over_socket_mode(rig: Rig) -> None:
    ack = rig.socket.wait_ack(rig.socket.send("slash_commands", slash_command("/train", "bert-squad", user="U_BOB")))
    assert ack.payload is not None and "not allowed" in ack.payload["text"]
    assert [e.action for e in rig.world.store.audit_log()] == ["train.refused"]
    assert "blocks" not in json.dumps(ack.payload) or not ack.payload.get("blocks")


def test_an_event_redelivered_over_socket_mode_is_handled_once_whichever_delivery_arrives(rig: Rig) -> None:
    """Issue 26: Socket Mode's retry_attempt > 0 was dropped outright, so an app_home_opened whose first
    envelope never reached the bot was lost; a redelivery of one that did is still dropped."""
    lost = home_opened("U_ALICE")
    lost["event_id"] = "EvLOST"
    rig.socket.wait_ack(rig.socket.send("events_api", lost, retry_attempt=1, retry_reason="timeout"))
    rig.slack.wait_calls("views.publish")
    rig.work.settle()
    rig.socket.wait_ack(rig.socket.send("events_api", lost, retry_attempt=2, retry_reason="timeout"))
    rig.work.settle()
    assert len(rig.slack.calls_to("views.publish")) == 1


def test_train_from_a_dm_between_people_over_socket_mode_offers_the_dm(rig: Rig) -> None:
    rig.slack.hide("D0PEOPLE")
    command = slash_command("/train", "distilbert-spot", channel="D0PEOPLE", channel_name="directmessage",
                            response_url=rig.slack.response_url("cmd"))
    ack = rig.socket.wait_ack(rig.socket.send("slash_commands", command))
    # Slack's channel_name says it is a DM: the card in the ack itself says where the job will post.
    assert ack.payload is not None and "your DM with trainbot" in json.dumps(ack.payload["blocks"])
    value = next(b["value"] for b in buttons_in(ack.payload["blocks"]) if b["action_id"] == cards.ACTION_LAUNCH)
    rig.socket.wait_ack(rig.socket.send("interactive", block_action(
        cards.ACTION_LAUNCH, value, channel="D0PEOPLE", response_url=rig.slack.response_url("click"))))
    rig.slack.wait_calls("chat.update")
    rig.work.settle()
    lineage, = rig.world.jobs.list()
    assert lineage.channel == "DU_ALICE" and len(rig.world.backend.created) == 1


def test_serve_over_socket_mode_then_stop_cleanly_on_sigterm(tmp_path: Path) -> None:
    """`trainbot serve` as a process (Socket Mode, the default): /healthz answers, a command envelope is
    acked, SIGTERM -> exit 0."""
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    from tests.support.moto_server import free_port

    port = free_port()

    with SlackApiServer() as slack:
        socket = SocketModeServer().start()
        slack.socket_url = socket.url
        env = dict(os.environ, SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_APP_TOKEN=APP_TOKEN, SLACK_API_URL=slack.base_url,
                   TRAINBOT_BACKEND="local", TRAINBOT_HOME=str(tmp_path), PYTHONPATH=str(Path(__file__).parents[2]))
        process = subprocess.Popen([sys.executable, "-m", "bot", "serve", "--port", str(port)], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            socket.wait_connected(timeout=30)
            ack = socket.wait_ack(socket.send("slash_commands", slash_command("/jobs", "")))
            assert ack.payload is not None and "No jobs yet" in ack.payload["text"]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as health:
                assert health.status == 200 and json.loads(health.read()) == {"ok": True}
            process.send_signal(signal.SIGTERM)
            _, stderr = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
            socket.stop()
        assert process.returncode == 0, stderr.decode()
        assert b"Traceback" not in stderr
        assert "stopped cleanly" in (tmp_path / "trainbot.log").read_text()

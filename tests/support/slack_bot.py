"""What Slack sends (signed requests, slash commands, block actions, view submissions) and the bot under test
over real HTTP (uvicorn + bot.serve.SlackHttpApp), plus a waitable background executor."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support.slack_api import BOT_TOKEN, TEAM, SlackApiServer
from tests.support.waiting import GENEROUS_SECONDS

if TYPE_CHECKING:
    from tests.handlers.fakes import World


def signed_headers(
    secret: str, body: str, *, timestamp: int | None = None, retry_num: int | None = None,
    retry_reason: str = "http_timeout",
) -> dict[str, str]:
    """The headers Slack signs a request with (v0 HMAC-SHA256 over `v0:{timestamp}:{body}`)."""
    from slack_sdk.signature import SignatureVerifier

    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body) or ""
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": signature,
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
        headers["X-Slack-Retry-Reason"] = retry_reason
    return headers


def slash_command(
    command: str,
    text: str,
    *,
    user: str = "U_ALICE",
    channel: str = "C_ML",
    response_url: str = "http://127.0.0.1:9/response/none",
    trigger_id: str = "trig.1",
    channel_name: str = "ml",
) -> dict[str, str]:
    """A slash command's form as Slack posts it (`channel_name` is "directmessage" in a DM between people,
    "privategroup" in a private channel the app is not in)."""
    return {
        "token": "legacy",
        "team_id": TEAM,
        "team_domain": "test",
        "channel_id": channel,
        "channel_name": channel_name,
        "user_id": user,
        "user_name": user.lower(),
        "command": command,
        "text": text,
        "api_app_id": "A0TEST",
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": trigger_id,
    }


def block_action(
    action_id: str,
    value: str,
    *,
    user: str = "U_ALICE",
    channel: str = "C_ML",
    response_url: str = "http://127.0.0.1:9/response/none",
    ephemeral: bool = True,
    message_ts: str = "1700000000.000001",
    trigger_id: str = "trig.2",
) -> dict[str, Any]:
    container = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel,
        "is_ephemeral": ephemeral,
    }
    return {
        "type": "block_actions",
        "team": {"id": TEAM, "domain": "test"},
        "user": {"id": user, "username": user.lower(), "team_id": TEAM},
        "api_app_id": "A0TEST",
        "token": "legacy",
        "container": container,
        "trigger_id": trigger_id,
        "channel": {"id": channel, "name": "ml"},
        "response_url": response_url,
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": "plan",
                "value": value,
                "text": {"type": "plain_text", "text": action_id},
                "action_ts": str(time.time()),
            }
        ],
    }


def view_submission(
    callback_id: str, values: dict[str, str], private_metadata: str, *, user: str = "U_ALICE"
) -> dict[str, Any]:
    state = {
        block: {"value": {"type": "plain_text_input", "value": value}} for block, value in values.items()
    }
    return {
        "type": "view_submission",
        "team": {"id": TEAM, "domain": "test"},
        "user": {"id": user, "username": user.lower(), "team_id": TEAM},
        "api_app_id": "A0TEST",
        "token": "legacy",
        "trigger_id": "trig.3",
        "view": {
            "id": "V1",
            "type": "modal",
            "callback_id": callback_id,
            "private_metadata": private_metadata,
            "state": {"values": state},
            "hash": "h",
        },
    }


def event_callback(event: dict[str, Any], *, event_id: str = "Ev1") -> dict[str, Any]:
    """An Events API delivery (JSON, signed like the rest), e.g. app_home_opened."""
    return {
        "token": "legacy",
        "team_id": TEAM,
        "api_app_id": "A0TEST",
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(time.time()),
        "event": event,
    }


def home_opened(user: str = "U_ALICE", *, tab: str = "home") -> dict[str, Any]:
    return event_callback({"type": "app_home_opened", "user": user, "channel": f"D{user}", "tab": tab,
                           "event_ts": f"{time.time():.6f}"})


def home_action(action_id: str, value: str, *, user: str = "U_ALICE") -> dict[str, Any]:
    """A button pressed on the App Home tab (a view, not a message: there is no channel)."""
    payload = block_action(action_id, value, user=user)
    payload.pop("channel")
    payload["container"] = {"type": "view", "view_id": "VHOME"}
    payload["view"] = {"id": "VHOME", "type": "home", "blocks": [], "hash": "h"}
    return payload


def form_body(fields: dict[str, Any]) -> str:
    """A slash command's form as is; an interaction as Slack sends it: `payload=<json>`."""
    from urllib.parse import urlencode

    if "type" in fields and not isinstance(fields.get("command"), str):
        return urlencode({"payload": json.dumps(fields)})
    return urlencode(fields)


# ---------------------------------------------------------------- the bot under test, over real HTTP


class HttpBot:
    """The real Bolt app behind uvicorn on a free loopback port (bot.serve.SlackHttpApp), as `serve --http`
    runs it, wired to the fake Slack. `post(fields)` sends a signed request and returns (status, body)."""

    def __init__(self, app: Any, *, secret: str, limits: Any = None) -> None:
        """``limits``: bot.request_guard.RequestLimits (default: what `serve --http` uses)."""
        import socket

        from bot.serve import SlackHttpApp, http_server

        self.secret = secret
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.asgi = SlackHttpApp(app, signing_secret=secret, limits=limits)
        self.server = http_server(self.asgi, host="127.0.0.1", port=self.port)
        self._thread = threading.Thread(target=self.server.run, name="bot-http", daemon=True)

    def start(self) -> HttpBot:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline:
                raise AssertionError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self.asgi.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    def send(
        self, body: str | bytes, headers: dict[str, str], *, path: str = "/slack/events", method: str = "POST"
    ) -> tuple[int, str]:
        import http.client

        data = body.encode() if isinstance(body, str) else body
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, body=data if method == "POST" else None, headers=headers)
            response = connection.getresponse()
            return response.status, response.read().decode(errors="replace")
        finally:
            connection.close()

    def post(self, fields: dict[str, Any], *, retry_num: int | None = None) -> tuple[int, str]:
        body = form_body(fields)
        return self.send(body, signed_headers(self.secret, body, retry_num=retry_num))

    def post_event(self, envelope: dict[str, Any], *, retry_num: int | None = None,
                   retry_reason: str = "http_timeout") -> tuple[int, str]:
        """An Events API request: a JSON body, signed (a redelivery with Slack's retry headers)."""
        body = json.dumps(envelope)
        headers = signed_headers(self.secret, body, retry_num=retry_num, retry_reason=retry_reason)
        headers["Content-Type"] = "application/json"
        return self.send(body, headers)


class BackgroundWork:
    """A run_later like the runtime's (a bounded pool) that tests can wait on: `settle()`."""

    def __init__(self, workers: int = 4) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="test-work")
        self._pending = 0
        self._idle = threading.Condition()
        self.errors: list[BaseException] = []

    def __call__(self, work: Callable[[], None]) -> None:
        with self._idle:
            self._pending += 1
        self._pool.submit(self._run, work)

    def _run(self, work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as exc:  # kept for the test to see
            self.errors.append(exc)
        finally:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def settle(self, timeout: float = GENEROUS_SECONDS) -> None:
        with self._idle:
            if not self._idle.wait_for(lambda: self._pending == 0, timeout):
                raise AssertionError("background work did not finish")
        assert not self.errors, self.errors

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)


# ---------------------------------------------------------------- a whole rig


@dataclass
class HttpRig:
    """The real Bolt app over HTTP on a handlers World (real store, scripted backend), against the fake Slack."""

    slack: SlackApiServer
    world: World
    bot: HttpBot
    work: BackgroundWork

    def settle(self) -> None:
        self.work.settle()


def unpaced_web_client(settings: Any, *, timeout: int = 10) -> Any:
    """The bot's governed WebClient without tier or channel pacing (posts on loopback go at once), Retry-After
    still honoured: for tests of behaviour, not of pacing (tests/bot/test_slack_governor.py is about that)."""
    from bot.slack_chat import make_web_client
    from bot.slack_governor import SlackGovernor
    from jobs.clock import SystemClock

    return make_web_client(settings, timeout=timeout, governor=SlackGovernor.unpaced(SystemClock()))


@contextmanager
def http_rig(tmp_path: Path, *, secret: str, slack: SlackApiServer | None = None, **settings: Any) -> Iterator[HttpRig]:
    """``slack``: a loopback Slack set up beforehand (an Enterprise Grid or org-wide install), not started."""
    from bot.slack_app import create_app
    from bot.slack_chat import SlackChat
    from tests.handlers.fakes import make_world

    slack = (slack or SlackApiServer()).start()
    work = BackgroundWork()
    world = make_world(tmp_path, run_later=work, slack_bot_token=BOT_TOKEN, slack_signing_secret=secret,
                       slack_api_url=slack.base_url, **settings)
    client = unpaced_web_client(world.settings)
    app = create_app(world.settings, world.services, client=client, chat=SlackChat(client), http=True)
    bot = HttpBot(app, secret=secret).start()
    try:
        yield HttpRig(slack, world, bot, work)
    finally:
        bot.stop()
        work.shutdown()
        slack.stop()


@contextmanager
def served_runtime(runtime: Any, *, secret: str, limits: Any = None) -> Iterator[tuple[Any, HttpBot, BackgroundWork]]:
    """(SlackParts, HttpBot, BackgroundWork): a whole runtime's Slack app as ``trainbot serve --http`` builds
    it, over signed HTTP, its background work waitable and its Web API client unpaced; stopped afterwards
    with the runtime."""
    from bot.serve import build_slack
    from bot.slack_chat import SlackChat

    work = BackgroundWork()
    runtime.run_later = work  # the same bounded pool, but waitable
    client = unpaced_web_client(runtime.settings)
    parts = build_slack(runtime, http=True, client=client, chat=SlackChat(client))
    bot = HttpBot(parts.app, secret=secret, limits=limits).start()
    try:
        yield parts, bot, work
    finally:
        bot.stop()
        work.shutdown()
        runtime.shutdown()

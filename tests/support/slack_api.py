"""A local stand-in for Slack on loopback: the Web API under /api/*, a response_url recorder, the upload
URL behind files_upload_v2, and a Socket Mode websocket server. Every call is recorded.

Slack has no offline emulator; this answers the methods trainbot uses the way Slack does (shapes taken
from the API reference), and can answer 429 with Retry-After, or fail, on demand.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve

BOT_TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-test-token"
BOT_USER = "UBOT"
TEAM = "T0TEST"
JSON_FIELDS = ("blocks", "attachments", "view", "files", "metadata")


@dataclass(frozen=True)
class ApiCall:
    method: str  # "chat.postMessage", "upload", "response"
    params: dict[str, Any]
    token: str | None
    at: float = field(default_factory=time.monotonic)


class SlackApiServer:
    """Answers like Slack; `calls` holds every request in order."""

    def __init__(self, *, token: str = BOT_TOKEN) -> None:
        self.token = token
        self.calls: list[ApiCall] = []
        self.socket_url: str | None = None
        self.usergroups: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._ts = itertools.count(1)
        self._rate_limits: dict[str, list[float]] = {}
        self._failures: dict[str, list[str]] = {}
        self._down = False
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-slack",
                                        daemon=True)

    # -- life -------------------------------------------------------------------------------------

    def start(self) -> SlackApiServer:
        self._thread.start()
        return self

    def __enter__(self) -> SlackApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """For WebClient(base_url=...) and SLACK_API_URL: with its trailing slash."""
        return f"http://127.0.0.1:{self.port}/api/"

    def response_url(self, name: str = "r1") -> str:
        return f"http://127.0.0.1:{self.port}/response/{name}"

    # -- behaviour on demand ----------------------------------------------------------------------

    def rate_limit(self, method: str, *, times: int = 1, retry_after: float = 1) -> None:
        """The next `times` calls to `method` answer 429 with Retry-After."""
        with self._lock:
            self._rate_limits.setdefault(method, []).extend([retry_after] * times)

    def fail(self, method: str, *, times: int = 1, error: str = "internal_error") -> None:
        with self._lock:
            self._failures.setdefault(method, []).extend([error] * times)

    def set_down(self, down: bool) -> None:
        """An outage: every API call answers 503."""
        with self._lock:
            self._down = down

    # -- reading what happened --------------------------------------------------------------------

    def calls_to(self, method: str) -> list[ApiCall]:
        with self._lock:
            return [call for call in self.calls if call.method == method]

    def wait_for(self, predicate: Callable[[list[ApiCall]], bool], *, timeout: float = 10.0) -> list[ApiCall]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(list(self.calls)):
                left = deadline - time.monotonic()
                if left <= 0:
                    methods = [c.method for c in self.calls]
                    raise AssertionError(f"timed out waiting on the fake Slack; calls so far: {methods}")
                self._changed.wait(left)
            return list(self.calls)

    def wait_calls(self, method: str, count: int = 1, *, timeout: float = 10.0) -> list[ApiCall]:
        self.wait_for(lambda calls: sum(c.method == method for c in calls) >= count, timeout=timeout)
        return self.calls_to(method)

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()

    # -- answering --------------------------------------------------------------------------------

    def _record(self, call: ApiCall) -> None:
        with self._changed:
            self.calls.append(call)
            self._changed.notify_all()

    def _next_ts(self) -> str:
        return f"1700000000.{next(self._ts):06d}"

    def _forced(self, method: str) -> tuple[int, dict[str, str], dict[str, Any]] | None:
        with self._lock:
            if self._down:
                return 503, {}, {"ok": False, "error": "service_unavailable"}
            waits = self._rate_limits.get(method)
            if waits:
                retry_after = waits.pop(0)
                return 429, {"Retry-After": f"{retry_after:g}"}, {"ok": False, "error": "ratelimited"}
            errors = self._failures.get(method)
            if errors:
                return 200, {}, {"ok": False, "error": errors.pop(0)}
        return None

    def answer(
        self, method: str, params: dict[str, Any], token: str | None
    ) -> tuple[int, dict[str, str], dict]:
        forced = self._forced(method)
        self._record(ApiCall(method, params, token))
        if forced is not None:
            return forced
        if token != f"Bearer {self.token}" and method != "apps.connections.open":
            return 200, {}, {"ok": False, "error": "invalid_auth"}
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return 200, {}, {"ok": False, "error": "unknown_method"}
        return 200, {}, {"ok": True, **handler(params)}

    def _m_auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "url": "https://test.slack.com/",
            "team": "Test",
            "user": "trainbot",
            "team_id": TEAM,
            "user_id": BOT_USER,
            "bot_id": "BBOT",
            "is_enterprise_install": False,
        }

    def _m_chat_postMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        ts = self._next_ts()
        message = {
            "type": "message",
            "user": BOT_USER,
            "text": params.get("text", ""),
            "ts": ts,
            "blocks": params.get("blocks") or [],
            "thread_ts": params.get("thread_ts"),
        }
        return {"channel": params.get("channel"), "ts": ts, "message": message}

    def _m_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"channel": params.get("channel"), "ts": params.get("ts"), "text": params.get("text", "")}

    def _m_chat_postEphemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"message_ts": self._next_ts()}

    def _m_conversations_open(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"channel": {"id": "D" + str(params.get("users", "X")).split(",")[0]}}

    def _m_views_open(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"view": {"id": "V" + uuid.uuid4().hex[:8].upper(), **(params.get("view") or {})}}

    def _m_usergroups_list(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"usergroups": [{"id": gid, "users": users} for gid, users in self.usergroups.items()]}

    def _m_files_getUploadURLExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        file_id = "F" + uuid.uuid4().hex[:10].upper()
        return {"upload_url": f"http://127.0.0.1:{self.port}/upload/{file_id}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, params: dict[str, Any]) -> dict[str, Any]:
        files = params.get("files") or []
        return {
            "files": [{"id": f.get("id"), "title": f.get("title"), "name": f.get("title")} for f in files]
        }

    def _m_apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.socket_url is None:
            return {"ok": False, "error": "no_socket_server"}
        return {"url": self.socket_url}

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

            def do_GET(self) -> None:  # noqa: N802
                self._dispatch(b"")

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                self._dispatch(self.rfile.read(length) if length else b"")

            def _dispatch(self, body: bytes) -> None:
                url = urlparse(self.path)
                if url.path.startswith("/api/"):
                    params = _params(url.query, body, self.headers.get("Content-Type", ""))
                    status, headers, data = server.answer(
                        url.path[5:], params, self.headers.get("Authorization")
                    )
                    self._reply(status, json.dumps(data).encode(), "application/json; charset=utf-8", headers)
                elif url.path.startswith("/upload/"):
                    server._record(
                        ApiCall("upload", {"file_id": url.path[8:], "size": len(body), "data": body}, None)
                    )
                    self._reply(200, f"OK - {len(body)}".encode(), "text/plain")
                elif url.path.startswith("/response/"):
                    data = json.loads(body or b"{}")
                    server._record(ApiCall("response", {"name": url.path[10:], **data}, None))
                    self._reply(200, b"ok", "text/plain")
                else:
                    self._reply(404, b"not found", "text/plain")

            def _reply(
                self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

        return Handler


def _params(query: str, body: bytes, content_type: str) -> dict[str, Any]:
    params: dict[str, Any] = {k: v[0] for k, v in parse_qs(query).items()}
    if "application/json" in content_type and body:
        params.update(json.loads(body))
    elif body:
        params.update({k: v[0] for k, v in parse_qs(body.decode()).items()})
    for name in JSON_FIELDS:
        if isinstance(params.get(name), str):
            with suppress(ValueError):
                params[name] = json.loads(params[name])
    return params


@contextmanager
def slack_api() -> Iterator[SlackApiServer]:
    server = SlackApiServer().start()
    try:
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------- Socket Mode


@dataclass
class Ack:
    envelope_id: str
    payload: dict[str, Any] | None
    sent_at: float
    acked_at: float


class SocketModeServer:
    """A websocket server that plays Slack's Socket Mode side: hello, envelopes out, acks back."""

    def __init__(self) -> None:
        self.acks: dict[str, Ack] = {}
        self._sent: dict[str, float] = {}
        self._lock = threading.Condition()
        self._connection: ServerConnection | None = None
        self._server = serve(self._session, "127.0.0.1", 0)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-socket-mode", daemon=True
        )

    @property
    def url(self) -> str:
        port = self._server.socket.getsockname()[1]
        return f"ws://127.0.0.1:{port}/link"

    def start(self) -> SocketModeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()

    def wait_connected(self, timeout: float = 10.0) -> None:
        with self._lock:
            if not self._lock.wait_for(lambda: self._connection is not None, timeout):
                raise AssertionError("the Socket Mode client never connected")

    def _session(self, connection: ServerConnection) -> None:
        connection.send(
            json.dumps({"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0TEST"}})
        )
        with self._lock:
            self._connection = connection
            self._lock.notify_all()
        try:
            self._receive(connection)
        except ConnectionClosed:
            return

    def _receive(self, connection: ServerConnection) -> None:
        for raw in connection:
            now = time.monotonic()
            data = json.loads(raw)
            envelope_id = data.get("envelope_id")
            if not envelope_id:
                continue
            with self._lock:
                sent = self._sent.get(envelope_id, now)
                self.acks[envelope_id] = Ack(envelope_id, data.get("payload"), sent, now)
                self._lock.notify_all()

    def send(self, kind: str, payload: dict[str, Any], *, retry_attempt: int = 0) -> str:
        """Deliver one envelope (`slash_commands`, `interactive`, `events_api`); returns its id."""
        envelope_id = uuid.uuid4().hex
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": kind != "events_api",
            "retry_attempt": retry_attempt,
            "retry_reason": "timeout" if retry_attempt else "",
        }
        with self._lock:
            connection = self._connection
            self._sent[envelope_id] = time.monotonic()
        assert connection is not None, "no Socket Mode client is connected"
        connection.send(json.dumps(envelope))
        return envelope_id

    def wait_ack(self, envelope_id: str, timeout: float = 10.0) -> Ack:
        with self._lock:
            if not self._lock.wait_for(lambda: envelope_id in self.acks, timeout):
                raise AssertionError(f"envelope {envelope_id} was never acknowledged")
            return self.acks[envelope_id]


# ---------------------------------------------------------------- what Slack sends


def signed_headers(
    secret: str, body: str, *, timestamp: int | None = None, retry_num: int | None = None
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
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    return headers


def slash_command(
    command: str,
    text: str,
    *,
    user: str = "U_ALICE",
    channel: str = "C_ML",
    response_url: str = "http://127.0.0.1:9/response/none",
    trigger_id: str = "trig.1",
) -> dict[str, str]:
    return {
        "token": "legacy",
        "team_id": TEAM,
        "team_domain": "test",
        "channel_id": channel,
        "channel_name": "ml",
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

    def __init__(self, app: Any, *, secret: str) -> None:
        import socket

        from bot.serve import SlackHttpApp, http_server

        self.secret = secret
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.asgi = SlackHttpApp(app)
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
        self, body: str, headers: dict[str, str], *, path: str = "/slack/events", method: str = "POST"
    ) -> tuple[int, str]:
        import http.client

        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(
                method, path, body=body.encode() if method == "POST" else None, headers=headers
            )
            response = connection.getresponse()
            return response.status, response.read().decode()
        finally:
            connection.close()

    def post(self, fields: dict[str, Any], *, retry_num: int | None = None) -> tuple[int, str]:
        body = form_body(fields)
        return self.send(body, signed_headers(self.secret, body, retry_num=retry_num))


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

    def settle(self, timeout: float = 15.0) -> None:
        with self._idle:
            if not self._idle.wait_for(lambda: self._pending == 0, timeout):
                raise AssertionError("background work did not finish")
        assert not self.errors, self.errors

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)

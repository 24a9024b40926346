"""A local stand-in for Slack on loopback: the Web API under /api/*, a response_url recorder and the upload
URL behind files_upload_v2. Every call is recorded. (Socket Mode: tests/support/slack_socket.py; what Slack
sends and the bot under test: tests/support/slack_bot.py.)

Slack has no offline emulator; this answers the methods trainbot uses the way Slack does (shapes taken
from the API reference), and can answer 429 with Retry-After, or fail, on demand. Posted messages are kept
per channel with their metadata, and conversations.history / conversations.replies read them back; a post
can be made slow (stored, then answered after the client gave up) or its connection dropped once stored.
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
        self._http_failures: dict[str, list[int]] = {}
        self._late: dict[str, list[float]] = {}
        self._drops: dict[str, int] = {}
        self._down = False
        #: channel -> the messages posted there (thread replies included), oldest first.
        self.messages: dict[str, list[dict[str, Any]]] = {}
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

    def fail_http(self, method: str, *, times: int = 1, status: int = 500) -> None:
        """The next `times` calls answer HTTP `status` before doing anything (nothing is stored)."""
        with self._lock:
            self._http_failures.setdefault(method, []).extend([status] * times)

    def answer_late(self, method: str, *, seconds: float, times: int = 1) -> None:
        """The next `times` calls do their work (a post is stored) and answer `seconds` later."""
        with self._lock:
            self._late.setdefault(method, []).extend([seconds] * times)

    def drop_after(self, method: str, *, times: int = 1) -> None:
        """The next `times` calls do their work (a post is stored), then close the connection unanswered."""
        with self._lock:
            self._drops[method] = self._drops.get(method, 0) + times

    def thread_of(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        """The replies in a thread (its parent excluded), oldest first."""
        with self._lock:
            return [m for m in self.messages.get(channel, []) if m.get("thread_ts") == thread_ts
                    and m["ts"] != thread_ts]

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
            statuses = self._http_failures.get(method)
            if statuses:
                return statuses.pop(0), {}, {"ok": False, "error": "internal_error"}
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

    def delivery(self, method: str) -> tuple[float, bool]:
        """How this call's answer goes back: (seconds to wait first, dropped instead)."""
        with self._lock:
            late = self._late.get(method)
            delay = late.pop(0) if late else 0.0
            dropped = self._drops.get(method, 0) > 0
            if dropped:
                self._drops[method] -= 1
        return delay, dropped

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
        if params.get("metadata"):
            message["metadata"] = params["metadata"]
        with self._lock:
            self.messages.setdefault(str(params.get("channel")), []).append(message)
        return {"channel": params.get("channel"), "ts": ts, "message": message}

    def _m_conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        """The channel's messages (thread parents and unthreaded), newest first."""
        with self._lock:
            stored = list(self.messages.get(str(params.get("channel")), []))
        top = [m for m in reversed(stored) if m.get("thread_ts") in (None, m["ts"])]
        return _page(top, params)

    def _m_conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        """A thread's parent and replies, oldest first."""
        parent = str(params.get("ts"))
        with self._lock:
            stored = list(self.messages.get(str(params.get("channel")), []))
        thread = [m for m in stored if m["ts"] == parent or m.get("thread_ts") == parent]
        if not any(m["ts"] == parent for m in thread):
            return {"ok": False, "error": "thread_not_found"}
        return _page(thread, params)

    def _m_chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"channel": params.get("channel"), "ts": params.get("ts"), "text": params.get("text", "")}

    def _m_chat_postEphemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"message_ts": self._next_ts()}

    def _m_conversations_open(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"channel": {"id": "D" + str(params.get("users", "X")).split(",")[0]}}

    def _m_views_open(self, params: dict[str, Any]) -> dict[str, Any]:
        return {"view": {"id": "V" + uuid.uuid4().hex[:8].upper(), **(params.get("view") or {})}}

    def _m_views_publish(self, params: dict[str, Any]) -> dict[str, Any]:
        view = params.get("view") or {}
        return {"view": {"id": "V" + uuid.uuid4().hex[:8].upper(), "team_id": TEAM, **view}}

    def _m_chat_getPermalink(self, params: dict[str, Any]) -> dict[str, Any]:
        channel, ts = str(params.get("channel", "")), str(params.get("message_ts", ""))
        return {"channel": channel, "permalink": f"https://test.slack.com/archives/{channel}/p{ts.replace('.', '')}"}

    def published_views(self, user: str | None = None) -> list[dict[str, Any]]:
        """The views.publish calls' views (of one user), oldest first."""
        return [c.params["view"] for c in self.calls_to("views.publish") if user is None or c.params["user_id"] == user]

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
                    method = url.path[5:]
                    status, headers, data = server.answer(method, params, self.headers.get("Authorization"))
                    delay, dropped = server.delivery(method)
                    time.sleep(delay)
                    if dropped:
                        self.close_connection = True
                        return
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


def _page(messages: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    """One page as Slack pages (limit, cursor); metadata only with include_all_metadata, as Slack does."""
    start = int(params.get("cursor") or 0)
    limit = int(params.get("limit") or 100)
    with_metadata = str(params.get("include_all_metadata", "")).lower() in ("1", "true")
    shown = [m if with_metadata else {k: v for k, v in m.items() if k != "metadata"}
             for m in messages[start:start + limit]]
    more = start + limit < len(messages)
    return {"messages": shown, "has_more": more,
            "response_metadata": {"next_cursor": str(start + limit) if more else ""}}


@contextmanager
def slack_api() -> Iterator[SlackApiServer]:
    server = SlackApiServer().start()
    try:
        yield server
    finally:
        server.stop()

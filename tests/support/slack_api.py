"""A local stand-in for Slack on loopback: the Web API under /api/*, a response_url recorder and the upload
URL behind files_upload_v2. Every call is recorded. (Socket Mode: tests/support/slack_socket.py; what Slack
sends and the bot under test: tests/support/slack_bot.py.)

Slack has no offline emulator; this answers the methods trainbot uses the way Slack does (shapes taken
from the API reference), and can answer 429 with Retry-After, or fail, on demand. Posted messages are kept
per channel with their metadata, and conversations.history / conversations.replies read them back; a post
can be made slow (stored, then answered after the client gave up) or its connection dropped once stored.

With ``limits`` (``SLACK_LIMITS``: the tiers of Slack's method reference) it enforces Slack's rate limits
on its ``clock`` (a test's simulated one, or real time): a call past a limit answers 429 with the
Retry-After that limit needs and does nothing. ``per_minute`` and ``rate_limited`` say what happened.

Messages and views are held to Block Kit's limits (tests/support/block_kit.py): what Slack would refuse is
answered `invalid_blocks` (a response_url post: HTTP 400) and kept in `refused`.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from tests.support.block_kit import message_problems, view_problems
from tests.support.waiting import GENEROUS_SECONDS

BOT_TOKEN = "xoxb-test-token"
APP_TOKEN = "xapp-test-token"
BOT_USER = "UBOT"
TEAM = "T0TEST"
JSON_FIELDS = ("blocks", "attachments", "view", "files", "metadata")
MESSAGE_METHODS = frozenset({"chat.postMessage", "chat.update", "chat.postEphemeral", "chat.scheduleMessage"})
VIEW_METHODS = frozenset({"views.publish", "views.open", "views.update", "views.push"})
POSTING_METHODS = MESSAGE_METHODS | {"files.completeUploadExternal"}


@dataclass(frozen=True)
class ApiCall:
    method: str  # "chat.postMessage", "upload", "response"
    params: dict[str, Any]
    token: str | None
    at: float = field(default_factory=time.monotonic)  # on the server's clock
    status: int = 200  # 429: refused by a rate limit (its own or one asked for)


@dataclass(frozen=True)
class Limit:
    """At most ``calls`` calls to ``method`` in any ``window`` seconds (in each channel, when ``per_channel``)."""

    method: str
    calls: int
    window: float
    per_channel: bool = False


def _tier(calls: int, *methods: str) -> tuple[Limit, ...]:
    return tuple(Limit(method, calls, 60.0) for method in methods)


#: Slack's documented limits for the methods trainbot calls (the method reference's tiers: Tier 2 20+ a minute,
#: Tier 3 50+, Tier 4 100+; chat.postMessage about one a second a channel, short bursts allowed), at their floors.
SLACK_LIMITS: tuple[Limit, ...] = (
    *_tier(20, "usergroups.list"),
    *_tier(50, "chat.update", "conversations.open", "conversations.history", "conversations.replies"),
    *_tier(100, "chat.postEphemeral", "chat.getPermalink", "views.open", "views.publish",
           "files.getUploadURLExternal", "files.completeUploadExternal"),
    Limit("chat.postMessage", 60, 60.0, per_channel=True),
    Limit("chat.postMessage", 10, 10.0, per_channel=True),
)


class SlackApiServer:
    """Answers like Slack; `calls` holds every request in order."""

    def __init__(self, *, token: str = BOT_TOKEN, limits: Sequence[Limit] = (),
                 clock: Callable[[], float] = time.monotonic, enterprise: str | None = None,
                 org_wide: bool = False) -> None:
        self.token = token
        self.limits = tuple(limits)
        self.clock = clock
        self._accepted: dict[tuple[Limit, str], deque[float]] = {}
        #: Enterprise Grid: the org the workspace is in; `org_wide`: the app is installed on the whole org,
        #: so its token is the org's (auth.test says so) and workspace-listing methods need a team_id.
        self.enterprise = enterprise
        self.org_wide = org_wide
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
        #: (method, problems) of each message or view refused for Block Kit's limits.
        self.refused: list[tuple[str, list[str]]] = []
        #: Conversations the bot cannot see (a DM between people, a private channel it is not in): Slack
        #: answers channel_not_found to conversations.info and to every post there. `invite` undoes it.
        self.hidden: set[str] = set()
        #: Public channels the bot is not a member of (chat:write.public still posts there).
        self.outside: set[str] = set()
        #: Channels shared with another organization (Slack Connect).
        self.shared: set[str] = set()
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

    def hide(self, *channels: str) -> None:
        with self._lock:
            self.hidden.update(channels)

    def invite(self, channel: str) -> None:
        """`/invite @trainbot`: the bot is a member of ``channel`` from now on."""
        with self._lock:
            self.hidden.discard(channel)
            self.outside.discard(channel)

    def set_down(self, down: bool) -> None:
        """An outage: every API call answers 503."""
        with self._lock:
            self._down = down

    # -- reading what happened --------------------------------------------------------------------

    def calls_to(self, method: str) -> list[ApiCall]:
        with self._lock:
            return [call for call in self.calls if call.method == method]

    def wait_for(self, predicate: Callable[[list[ApiCall]], bool], *, timeout: float = GENEROUS_SECONDS) -> list[ApiCall]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(list(self.calls)):
                left = deadline - time.monotonic()
                if left <= 0:
                    methods = [c.method for c in self.calls]
                    raise AssertionError(f"timed out waiting on the fake Slack; calls so far: {methods}")
                self._changed.wait(left)
            return list(self.calls)

    def wait_calls(self, method: str, count: int = 1, *, timeout: float = GENEROUS_SECONDS) -> list[ApiCall]:
        self.wait_for(lambda calls: sum(c.method == method for c in calls) >= count, timeout=timeout)
        return self.calls_to(method)

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()

    def per_minute(self, method: str, *, since: float = 0.0) -> Counter[int]:
        """Calls to ``method`` Slack took (not 429s) in each whole minute after ``since`` on the server's clock."""
        with self._lock:
            return Counter(int((c.at - since) // 60) for c in self.calls if c.method == method and c.status != 429)

    def most_in_window(self, method: str, window: float, *, channel: str | None = None) -> int:
        """The most calls to ``method`` Slack took in any ``window`` seconds (in ``channel`` alone, if named)."""
        with self._lock:
            times = sorted(c.at for c in self.calls if c.method == method and c.status != 429
                           and (channel is None or c.params.get("channel") == channel))
        return most_in_window(times, window)

    def rate_limited(self) -> list[ApiCall]:
        """The calls answered 429, oldest first."""
        with self._lock:
            return [c for c in self.calls if c.status == 429]

    # -- answering --------------------------------------------------------------------------------

    def _record(self, call: ApiCall) -> None:
        with self._changed:
            self.calls.append(call)
            self._changed.notify_all()

    def _next_ts(self) -> str:
        return f"1700000000.{next(self._ts):06d}"

    def _over_limit(self, method: str, params: dict[str, Any], now: float) -> float | None:
        """Retry-After when a call now would break a limit; else None, and the call is counted."""
        counted = []
        waits = []
        for limit in self.limits:
            if limit.method != method:
                continue
            key = (limit, str(params.get("channel", "")) if limit.per_channel else "")
            accepted = self._accepted.setdefault(key, deque())
            while accepted and accepted[0] <= now - limit.window:
                accepted.popleft()
            if len(accepted) >= limit.calls:
                waits.append(accepted[0] + limit.window - now)
            counted.append(accepted)
        if waits:
            return max(1.0, math.ceil(max(waits)))
        for accepted in counted:
            accepted.append(now)
        return None

    def _forced(self, method: str, params: dict[str, Any] | None = None,
                now: float = 0.0) -> tuple[int, dict[str, str], dict[str, Any]] | None:
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
            retry_after = self._over_limit(method, params or {}, now)
            if retry_after is not None:
                return 429, {"Retry-After": f"{retry_after:g}"}, {"ok": False, "error": "ratelimited"}
        return None

    def answer(
        self, method: str, params: dict[str, Any], token: str | None
    ) -> tuple[int, dict[str, str], dict]:
        now = self.clock()
        forced = self._forced(method, params, now)
        self._record(ApiCall(method, params, token, at=now, status=forced[0] if forced else 200))
        if forced is not None:
            return forced
        if token != f"Bearer {self.token}" and method != "apps.connections.open":
            return 200, {}, {"ok": False, "error": "invalid_auth"}
        handler = getattr(self, "_m_" + method.replace(".", "_"), None)
        if handler is None:
            return 200, {}, {"ok": False, "error": "unknown_method"}
        problems = self.block_kit_problems(method, params)
        if problems:
            return 200, {}, {"ok": False, "error": "invalid_blocks", "errors": problems}
        if method in POSTING_METHODS and str(params.get("channel") or params.get("channel_id")) in self.hidden:
            return 200, {}, {"ok": False, "error": "channel_not_found"}
        return 200, {}, {"ok": True, **handler(params)}

    def _m_conversations_info(self, params: dict[str, Any]) -> dict[str, Any]:
        """The conversation as the bot sees it (its ID's kind: D a DM with the bot, G private, C public)."""
        channel = str(params.get("channel", ""))
        with self._lock:
            if channel in self.hidden:
                return {"ok": False, "error": "channel_not_found"}
            member, shared = channel not in self.outside, channel in self.shared
        if channel.startswith("D"):
            return {"channel": {"id": channel, "is_im": True, "user": channel[1:], "is_open": True}}
        private = channel.startswith("G")
        return {"channel": {"id": channel, "is_channel": not private, "is_group": private, "is_private": private,
                            "is_member": member, "is_archived": False, "is_ext_shared": shared,
                            "is_shared": shared}}

    def block_kit_problems(self, method: str, params: dict[str, Any]) -> list[str]:
        """What Slack would refuse in this call's blocks or view (kept in `refused`)."""
        if method in MESSAGE_METHODS or method == "response":
            blocks = params.get("blocks")
            problems = message_problems(blocks if isinstance(blocks, list) else None, params.get("text"))
        elif method in VIEW_METHODS and isinstance(params.get("view"), dict):
            problems = view_problems(params["view"])
        else:
            return []
        if problems:
            with self._lock:
                self.refused.append((method, problems))
        return problems

    def _m_auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        answer = {
            "url": "https://test.slack.com/",
            "team": "Test",
            "user": "trainbot",
            "team_id": self.enterprise if self.org_wide else TEAM,
            "user_id": BOT_USER,
            "bot_id": "BBOT",
            "is_enterprise_install": self.org_wide,
        }
        return answer | ({"enterprise_id": self.enterprise} if self.enterprise else {})

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
        if self.org_wide and not params.get("team_id"):  # an org's token: which workspace's groups?
            return {"ok": False, "error": "missing_argument"}
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
                        ApiCall("upload", {"file_id": url.path[8:], "size": len(body), "data": body}, None,
                                at=server.clock())
                    )
                    self._reply(200, f"OK - {len(body)}".encode(), "text/plain")
                elif url.path.startswith("/response/"):
                    data = json.loads(body or b"{}")
                    server._record(ApiCall("response", {"name": url.path[10:], **data}, None, at=server.clock()))
                    if server.block_kit_problems("response", data):
                        self._reply(400, b"invalid_blocks", "text/plain")
                    else:
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


def most_in_window(times: list[float], window: float) -> int:
    """The most of the sorted ``times`` that fall in any ``window`` seconds."""
    most, start = 0, 0
    for end, at in enumerate(times):
        while times[start] <= at - window:
            start += 1
        most = max(most, end - start + 1)
    return most

"""`trainbot serve`: the Slack bot in this process, with the watcher, the outbox and the scheduler.

Socket Mode (SLACK_APP_TOKEN) by default: no public URL. `--http`: an ASGI app served by uvicorn, requests
at /slack/events and GET /healthz. Every request is verified before its body is parsed (bot/slack_requests.py):
a missing, wrong or stale signature is 401 whatever the body (Slack's unsigned ssl_check probe alone gets an
empty 200, and nothing is acted on); a verified request that is not one Slack sends is 400; never a
traceback. What a request may cost before it is verified (its headers checked before its body, the body's
deadline and slot, the connections' deadline and cap, a log line per kind of refusal per minute) is
bot/request_guard.py's. SIGTERM stops the server, then the background
work (runtime.shutdown()).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import uvicorn
from slack_bolt import App, BoltRequest, BoltResponse
from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_sdk import WebClient

from bot import slack_requests
from bot.request_guard import Refusal, RequestGuard, RequestLimits, server_options
from bot.slack_app import create_app
from bot.slack_chat import SlackChat, make_web_client
from bot.slack_governor import GovernedWebClient, SlackGovernor
from handlers.context import Services
from handlers.home import HomeRefresher
from jobs.errors import ConfigError
from jobs.settings import Settings

if TYPE_CHECKING:
    from bot.wiring import Runtime

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
DISPATCH_WORKERS = 16
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


# ---------------------------------------------------------------- HTTP


class HealthApp:
    """ASGI: GET /healthz, the one health check of both modes (HTTP serves it beside /slack/events;
    Socket Mode, which has no HTTP server of its own, serves it alone)."""

    def __init__(self, healthy: Callable[[], bool] | None = None) -> None:
        self._healthy = healthy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
        elif scope["type"] == "http":
            await self.answer(scope, send)

    async def answer(self, scope: Scope, send: Send) -> None:
        if scope["path"] != HEALTH_PATH or scope["method"] not in ("GET", "HEAD"):
            await _respond(send, 404, "not found")
            return
        ok = True if self._healthy is None else bool(self._healthy())
        await _respond(send, 200 if ok else 503, json.dumps({"ok": ok}), "application/json")


class SlackHttpApp:
    """ASGI: POST /slack/events -> verified, checked, then Bolt (in a thread pool, so the event loop never
    blocks); GET /healthz."""

    def __init__(self, app: App, *, signing_secret: str, path: str = EVENTS_PATH, workers: int = DISPATCH_WORKERS,
                 now: Callable[[], float] = time.time, health: Callable[[], bool] | None = None,
                 limits: RequestLimits | None = None) -> None:
        self._app = app
        self._verifier = slack_requests.make_verifier(signing_secret, now)
        self.limits = limits or RequestLimits()
        self._guard = RequestGuard(self.limits, now=now)
        self._path = path
        self._health = HealthApp(health)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="slack-http")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if path == self._path and method == "POST":
            await self._events(scope, receive, send)
        else:
            await self._health.answer(scope, send)

    async def _events(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        body, refusal = await self._verified_body(headers, receive)
        if refusal is not None:
            if refusal.status == 401 and slack_requests.is_ssl_check(headers, body):
                log.info("answered Slack's ssl_check")
                await _respond(send, 200, "")
                return
            self._guard.log.info(refusal.reason, "refused an unverified Slack request (%d): %s", refusal.status,
                                 refusal.reason)
            if refusal.status:
                await _respond(send, refusal.status, "invalid request", close=True)
            return
        assert body is not None
        try:
            parsed = slack_requests.parse(body, slack_requests.header(headers, "content-type"))
            request = _bolt_request(parsed, scope, headers)
        except Exception as exc:  # anything a verified body makes Bolt trip over is the body's fault
            reason = str(exc) if isinstance(exc, slack_requests.Malformed) else f"unreadable ({type(exc).__name__})"
            self._guard.log.info(f"400:{reason}", "answered 400 to a signed Slack request: %s", reason)
            await _respond(send, 400, "malformed request")
            return
        try:
            response = await asyncio.get_running_loop().run_in_executor(self._pool, self._app.dispatch, request)
        except Exception:
            log.exception("Bolt failed on a request")
            await _respond(send, 500, "error")
            return
        await _send_bolt(send, response)

    async def _verified_body(self, headers: dict[str, list[str]],
                             receive: Receive) -> tuple[bytes | None, Refusal | None]:
        """(the body, None) when Slack signed it; else (what was read of it, if anything, and the refusal).
        The headers are checked before a byte of the body is read, and nothing is parsed before this; of an
        unsigned request no more than an ssl_check's worth is read."""
        declared, refusal = self._guard.before_body(headers)
        if refusal is not None:
            return None, refusal
        body = await self._guard.read(receive, declared)
        if isinstance(body, Refusal):
            return None, body
        reason = slack_requests.unverified_reason(self._verifier, headers, body)
        return body, Refusal(401, reason) if reason is not None else None


def _bolt_request(body: slack_requests.Body, scope: Scope, headers: dict[str, list[str]]) -> BoltRequest:
    """A Bolt request over the body parsed and checked here. Bolt takes an already parsed body in its
    socket_mode form only, which also skips its own signature check: that check was made above, on the
    raw bytes. (Bolt's own parser would also take a command whose text says "payload" for an empty body.)"""
    bolt_headers: dict[str, str | Sequence[str]] = dict(headers)
    return BoltRequest(body=body, query=scope.get("query_string", b"").decode("latin-1"), headers=bolt_headers,
                       mode="socket_mode")


def _headers(scope: Scope) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {}
    for raw_name, raw_value in scope.get("headers", []):
        headers.setdefault(raw_name.decode("latin-1").lower(), []).append(raw_value.decode("latin-1"))
    return headers


async def _respond(send: Send, status: int, body: str, content_type: str = "text/plain; charset=utf-8", *,
                   close: bool = False) -> None:
    """``close``: the connection ends with the answer (a body not read yet is never waited for)."""
    data = body.encode()
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(data)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _send_bolt(send: Send, response: BoltResponse) -> None:
    data = (response.body or "").encode()
    headers = [(b"content-length", str(len(data)).encode())]
    for name, values in response.headers.items():
        if name.lower() == "content-length":
            continue
        for value in values if isinstance(values, Sequence) and not isinstance(values, str) else [values]:
            headers.append((name.encode("latin-1"), str(value).encode("latin-1")))
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def http_server(asgi: SlackHttpApp | HealthApp, *, host: str, port: int) -> uvicorn.Server:
    # log_config=None: uvicorn's records go where the process's own go (trainbot.log), not to a second stderr.
    limits = asgi.limits if isinstance(asgi, SlackHttpApp) else RequestLimits()
    config = uvicorn.Config(asgi, host=host, port=port, lifespan="on", log_level="warning", access_log=False,
                            timeout_graceful_shutdown=10, backlog=512, log_config=None, **server_options(limits))
    return uvicorn.Server(config)


# ---------------------------------------------------------------- Socket Mode


def socket_mode_handler(app: App, app_token: str, client: WebClient) -> SocketModeHandler:
    """The builtin Socket Mode client (no extra dependency): apps.connections.open on `client`, then a
    websocket; envelopes are acked with the listener's response."""
    return SocketModeHandler(app, app_token=app_token, web_client=client, concurrency=10)


# ---------------------------------------------------------------- the process


@dataclasses.dataclass
class SlackParts:
    client: GovernedWebClient
    chat: SlackChat
    services: Services
    app: App
    home: HomeRefresher


def build_slack(runtime: Runtime, *, http: bool, client: GovernedWebClient | None = None,
                chat: SlackChat | None = None, verify_token: bool = True) -> SlackParts:
    settings = runtime.settings
    _check_settings(runtime, http=http)
    client = client or make_web_client(settings, governor=shared_governor(runtime))
    chat = chat or SlackChat(client)
    services = runtime.services()
    if services.backend is None:
        services = dataclasses.replace(services, backend=runtime.backend)
    home = HomeRefresher(services, chat)
    app = create_app(settings, services, client=client, chat=chat, http=http, verify_token=verify_token, home=home)
    return SlackParts(client=client, chat=chat, services=services, app=app, home=home)


def shared_governor(runtime: Runtime) -> SlackGovernor:
    """The governor whose buckets and back-offs live in the store: every bot on one database shares
    the workspace's budget and honours each other's Retry-After."""
    from jobs.store.rate_ledger import StoreRateLedger

    return SlackGovernor(StoreRateLedger(runtime.store.engine), runtime.clock)


def _check_settings(runtime: Runtime, *, http: bool) -> None:
    settings = runtime.settings
    if settings.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN is not set: create the app from slack-manifest.yaml and install it.")
    if http and settings.slack_signing_secret is None:
        raise ConfigError("--http needs SLACK_SIGNING_SECRET (the app's Basic Information page).")
    if not http and settings.slack_app_token is None:
        raise ConfigError("Socket Mode needs SLACK_APP_TOKEN (an xapp- token with connections:write), or use --http.")


OPEN_WORKSPACE_WARNING = (
    "trainbot serves this whole workspace with no allow-list and no money cap: anyone may launch in any channel "
    "(TRAINBOT_ALLOWED_USERS, TRAINBOT_ALLOWED_CHANNELS) and one click may start a job whose worst case is "
    "thousands of dollars (TRAINBOT_MAX_JOB_USD, TRAINBOT_DAILY_BUDGET_USD); set them before inviting people "
    "(README, \"Zero to bot\")."
)


def open_workspace_warning(settings: Settings) -> str | None:
    """The start-up warning for a bot anyone may use without a cap on what they spend; None when either is set."""
    allow_list = settings.trainbot_allowed_users or settings.trainbot_allowed_channels
    money_cap = settings.trainbot_max_job_usd is not None or settings.trainbot_daily_budget_usd is not None
    return None if allow_list or money_cap else OPEN_WORKSPACE_WARNING


def serve(runtime: Runtime, *, http: bool, port: int, host: str = "0.0.0.0") -> int:
    """Run until SIGTERM or SIGINT; returns the exit status."""
    parts = build_slack(runtime, http=http)
    warning = open_workspace_warning(runtime.settings)
    if warning:
        # Once, at start, where the operator looks: stderr (a container's log) and trainbot.log.
        log.warning(warning)
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    runtime.start_background(parts.chat)
    # Republishes the home tabs people opened when their jobs change (debounced; see handlers/home.py).
    threading.Thread(target=parts.home.run, args=(runtime.stop_event,), name="trainbot-home", daemon=True).start()
    try:
        if http:
            _serve_http(runtime, parts, host=host, port=port)
        else:
            _serve_socket_mode(runtime, parts, host=host, port=port)
    finally:
        runtime.shutdown()
    log.info("stopped cleanly")
    return 0


def _serve_http(runtime: Runtime, parts: SlackParts, *, host: str, port: int) -> None:
    secret = runtime.settings.slack_signing_secret
    assert secret is not None  # _check_settings
    asgi = SlackHttpApp(parts.app, signing_secret=secret.get_secret_value(),
                        health=lambda: _store_answers(runtime))
    # uvicorn handles SIGTERM/SIGINT while it serves (a graceful exit), then raises the signal again once
    # it has stopped: these handlers take that second delivery, so the background work is shut down too.
    _install_stop_handlers(threading.Event())
    log.info("serving Slack over HTTP at http://%s:%d%s", host, port, EVENTS_PATH)
    try:
        http_server(asgi, host=host, port=port).run()
    finally:
        asgi.close()


def _store_answers(runtime: Runtime) -> bool:
    """/healthz: the process serves and its store answers."""
    try:
        runtime.store.get_meta("healthz")
    except Exception:
        log.exception("health check: the store does not answer")
        return False
    return True


def _install_stop_handlers(stop: threading.Event) -> None:
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())


def _serve_socket_mode(runtime: Runtime, parts: SlackParts, *, host: str, port: int) -> None:
    token = runtime.settings.slack_app_token
    assert token is not None
    stop = threading.Event()
    _install_stop_handlers(stop)
    health = http_server(HealthApp(lambda: _store_answers(runtime)), host=host, port=port)
    threading.Thread(target=health.run, name="trainbot-healthz", daemon=True).start()
    handler = socket_mode_handler(parts.app, token.get_secret_value(), parts.client)
    handler.connect()
    log.info("connected to Slack over Socket Mode; health at http://%s:%d%s", host, port, HEALTH_PATH)
    try:
        while not stop.wait(1.0) and not runtime.stop_event.is_set():
            pass
    finally:
        handler.close()
        health.should_exit = True

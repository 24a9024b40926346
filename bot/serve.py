"""`trainbot serve`: the Slack bot in this process, with the watcher, the outbox and the scheduler.

Socket Mode (SLACK_APP_TOKEN) by default: no public URL. `--http`: an ASGI app served by uvicorn, requests
at /slack/events and GET /healthz. A request whose signature or timestamp is missing, empty, malformed or
stale is answered 401 before Bolt sees it (Bolt answers 500 to an empty timestamp). SIGTERM stops the
server, then the background work (runtime.shutdown()).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import uvicorn
from slack_bolt import App, BoltRequest, BoltResponse
from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_sdk import WebClient

from bot.slack_app import create_app
from bot.slack_chat import SlackChat, make_web_client
from handlers.context import Services
from handlers.home import HomeRefresher
from jobs.errors import ConfigError

if TYPE_CHECKING:
    from bot.wiring import Runtime

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"
HEALTH_PATH = "/healthz"
MAX_CLOCK_SKEW_SECONDS = 300  # Slack's own rule: older requests may be replays
MAX_BODY_BYTES = 1 << 20
DISPATCH_WORKERS = 16
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


# ---------------------------------------------------------------- HTTP


class SlackHttpApp:
    """ASGI: POST /slack/events -> Bolt (in a thread pool, so the event loop never blocks), GET /healthz."""

    def __init__(self, app: App, *, path: str = EVENTS_PATH, workers: int = DISPATCH_WORKERS,
                 now: Callable[[], float] = time.time, health: Callable[[], bool] | None = None) -> None:
        self._app = app
        self._path = path
        self._now = now
        self._health = health
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
        if path == HEALTH_PATH and method in ("GET", "HEAD"):
            await self._healthz(send)
        elif path == self._path and method == "POST":
            await self._events(scope, receive, send)
        else:
            await _respond(send, 404, "not found")

    async def _healthz(self, send: Send) -> None:
        ok = True if self._health is None else bool(self._health())
        await _respond(send, 200 if ok else 503, json.dumps({"ok": ok}), "application/json")

    async def _events(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _headers(scope)
        refusal = self._refusal(headers)
        if refusal is not None:
            log.info("refused a Slack request: %s", refusal)
            await _respond(send, 401, "invalid request")
            return
        body = await _read_body(receive)
        if body is None:
            await _respond(send, 413, "too large")
            return
        bolt_headers: dict[str, str | Sequence[str]] = dict(headers)
        request = BoltRequest(body=body.decode("utf-8", errors="replace"),
                              query=scope.get("query_string", b"").decode("latin-1"), headers=bolt_headers)
        try:
            response = await asyncio.get_running_loop().run_in_executor(self._pool, self._app.dispatch, request)
        except Exception:
            log.exception("Bolt failed on a request")
            await _respond(send, 500, "error")
            return
        await _send_bolt(send, response)

    def _refusal(self, headers: dict[str, list[str]]) -> str | None:
        """Why a request cannot be genuine, before its signature is checked (Bolt checks that)."""
        timestamp = (headers.get("x-slack-request-timestamp") or [""])[0].strip()
        signature = (headers.get("x-slack-signature") or [""])[0].strip()
        if not timestamp or not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
            return "missing or malformed timestamp"
        if abs(self._now() - int(timestamp)) > MAX_CLOCK_SKEW_SECONDS:
            return "stale timestamp"
        if not signature.startswith("v0="):
            return "missing or malformed signature"
        return None


def _headers(scope: Scope) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {}
    for raw_name, raw_value in scope.get("headers", []):
        headers.setdefault(raw_name.decode("latin-1").lower(), []).append(raw_value.decode("latin-1"))
    return headers


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def _respond(send: Send, status: int, body: str, content_type: str = "text/plain; charset=utf-8") -> None:
    data = body.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), (b"content-length", str(len(data)).encode())]})
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


def http_server(asgi: SlackHttpApp, *, host: str, port: int) -> uvicorn.Server:
    config = uvicorn.Config(asgi, host=host, port=port, lifespan="on", log_level="warning", access_log=False,
                            timeout_graceful_shutdown=10, backlog=512)
    return uvicorn.Server(config)


# ---------------------------------------------------------------- Socket Mode


def socket_mode_handler(app: App, app_token: str, client: WebClient) -> SocketModeHandler:
    """The builtin Socket Mode client (no extra dependency): apps.connections.open on `client`, then a
    websocket; envelopes are acked with the listener's response."""
    return SocketModeHandler(app, app_token=app_token, web_client=client, concurrency=10)


# ---------------------------------------------------------------- the process


@dataclasses.dataclass
class SlackParts:
    client: WebClient
    chat: SlackChat
    services: Services
    app: App
    home: HomeRefresher


def build_slack(runtime: Runtime, *, http: bool, client: WebClient | None = None,
                chat: SlackChat | None = None, verify_token: bool = True) -> SlackParts:
    settings = runtime.settings
    _check_settings(runtime, http=http)
    client = client or make_web_client(settings)
    chat = chat or SlackChat(client)
    services = runtime.services()
    if services.backend is None:
        services = dataclasses.replace(services, backend=runtime.backend)
    home = HomeRefresher(services, chat)
    app = create_app(settings, services, client=client, chat=chat, http=http, verify_token=verify_token, home=home)
    return SlackParts(client=client, chat=chat, services=services, app=app, home=home)


def _check_settings(runtime: Runtime, *, http: bool) -> None:
    settings = runtime.settings
    if settings.slack_bot_token is None:
        raise ConfigError("SLACK_BOT_TOKEN is not set: create the app from slack-manifest.yaml and install it.")
    if http and settings.slack_signing_secret is None:
        raise ConfigError("--http needs SLACK_SIGNING_SECRET (the app's Basic Information page).")
    if not http and settings.slack_app_token is None:
        raise ConfigError("Socket Mode needs SLACK_APP_TOKEN (an xapp- token with connections:write), or use --http.")


def serve(runtime: Runtime, *, http: bool, port: int, host: str = "0.0.0.0") -> int:
    """Run until SIGTERM or SIGINT; returns the exit status."""
    parts = build_slack(runtime, http=http)
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
    asgi = SlackHttpApp(parts.app, health=lambda: _store_answers(runtime))
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
    health = health_server(lambda: _store_answers(runtime), host=host, port=port)
    threading.Thread(target=health.serve_forever, name="trainbot-healthz", daemon=True).start()
    handler = socket_mode_handler(parts.app, token.get_secret_value(), parts.client)
    handler.connect()
    log.info("connected to Slack over Socket Mode; health at http://%s:%d%s", host, port, HEALTH_PATH)
    try:
        while not stop.wait(1.0) and not runtime.stop_event.is_set():
            pass
    finally:
        handler.close()
        health.shutdown()
        health.server_close()


def health_server(healthy: Callable[[], bool], *, host: str, port: int) -> ThreadingHTTPServer:
    """GET /healthz for Socket Mode, which has no HTTP server of its own: container health checks
    and load balancers probe the same path in both modes."""

    class HealthHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            if self.path != HEALTH_PATH:
                self.send_error(404)
                return
            ok = healthy()
            body = json.dumps({"ok": ok}).encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: not news
            return

    return ThreadingHTTPServer((host, port), HealthHandler)

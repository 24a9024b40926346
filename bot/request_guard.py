"""What `trainbot serve --http` spends on a request before its signature can be checked, and the bounds on it.

A Slack signature covers the body, so nothing can be verified until the body has arrived; a stranger's
half-sent bodies used to be read for ever, up to 1 MiB each (600 held 585 MiB; 1,100 left /healthz and real
requests unanswered, and the log grew by a line per request). Here:

- The headers are checked first (`RequestGuard.before_body`): a timestamp of the right shape and within
  Slack's five minutes, a signature of the right shape, a declared size (Content-Length) within
  MAX_BODY_BYTES. A chunked body (no declared size: Slack always sends one) is refused with 411. None of
  these reads a byte of the body.
- A body is read within BODY_SECONDS (Slack gives up on an acknowledgement after 3 s, so a body still coming
  after that is no request of Slack's) and in a slot: at most MAX_READING bodies, MAX_READING_BYTES declared
  bytes, at once. A request that needs a slot when they are full takes the oldest one (whose reader is
  answered 503): Slack's requests arrive whole in milliseconds, so a flood of slow bodies only ever evicts
  itself, and a real request always finds room.
- Each connection must finish its request's headers within HEADER_SECONDS (uvicorn waits for ever); past
  MAX_CONNECTIONS open ones, a new connection closes the oldest that has no request under way. uvicorn's
  own `limit_concurrency` (CONCURRENCY_BACKSTOP) stays as a backstop above it. See `connection_guard`.
- Every kind of refusal is logged once per LOG_INTERVAL_SECONDS with the count since, never once per request
  (`ThrottledLog`); uvicorn's own per-request warnings go through the same throttle (`UvicornThrottle`).

A refusal answers with `Connection: close`, so the rest of a body never sent is never waited for.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from bot import slack_requests

log = logging.getLogger(__name__)

MAX_BODY_BYTES = slack_requests.MAX_BODY_BYTES
MAX_UNSIGNED_BYTES = slack_requests.MAX_UNSIGNED_BYTES
#: How long a body may take to arrive, once its headers have (Slack's requests arrive whole at once).
BODY_SECONDS = 5.0
#: How long a connection may take to send a request's headers (its first, or the next on a kept-alive one).
HEADER_SECONDS = 10.0
#: Bodies read at once, and their declared bytes: what a flood of half-sent bodies can hold.
MAX_READING = 64
MAX_READING_BYTES = 16 << 20
#: Open connections before the oldest one without a request under way is closed for a new one.
MAX_CONNECTIONS = 400
#: uvicorn's own limit (answers 503 past it): above ours, for the connections we cannot close.
CONCURRENCY_BACKSTOP = 600
LOG_INTERVAL_SECONDS = 60.0

Receive = Callable[[], Awaitable[dict[str, Any]]]
Headers = Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class RequestLimits:
    """The bounds above, in one place (tests shorten the deadlines)."""

    body_seconds: float = BODY_SECONDS
    header_seconds: float = HEADER_SECONDS
    max_reading: int = MAX_READING
    max_reading_bytes: int = MAX_READING_BYTES
    max_connections: int = MAX_CONNECTIONS
    concurrency_backstop: int = CONCURRENCY_BACKSTOP
    log_interval: float = LOG_INTERVAL_SECONDS


@dataclass(frozen=True)
class Refusal:
    """The answer to a request refused before or while its body is read; ``reason`` is its log line's
    kind. ``status`` 0: the client went away, nothing to answer."""

    status: int
    reason: str


# ---------------------------------------------------------------- logging once per interval


class ThrottledLog:
    """One line per kind of event per interval, with how many of that kind there were since the last line."""

    def __init__(self, logger: logging.Logger, *, interval: float = LOG_INTERVAL_SECONDS,
                 now: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._interval = interval
        self._now = now
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._since: dict[str, int] = {}

    @property
    def interval(self) -> float:
        return self._interval

    def due(self, kind: str) -> int | None:
        """None when a line of ``kind`` was logged within the interval (this one is only counted); else how
        many were only counted since that line (0 for the first)."""
        with self._lock:
            now = self._now()
            last = self._last.get(kind)
            if last is not None and now - last < self._interval:
                self._since[kind] = self._since.get(kind, 0) + 1
                return None
            self._last[kind] = now
            return self._since.pop(kind, 0)

    def info(self, kind: str, message: str, *args: object) -> None:
        skipped = self.due(kind)
        if skipped is None:
            return
        if skipped:
            self._logger.info(message + " (and %d more like it in the last %.0f s)", *args, skipped, self._interval)
        else:
            self._logger.info(message, *args)


class UvicornThrottle(logging.Filter):
    """uvicorn logs a warning per bad request ("Invalid HTTP request received.", "Exceeded concurrency
    limit."): each such message goes through once per interval."""

    def __init__(self, throttle: ThrottledLog) -> None:
        super().__init__("uvicorn.error")
        self._throttle = throttle

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True  # a real fault: never hidden
        skipped = self._throttle.due(f"uvicorn:{record.msg}")
        if skipped:
            record.msg = f"{record.msg} (and %d more like it in the last %.0f s)"
            record.args = (*(record.args if isinstance(record.args, tuple) else ()), skipped,
                           self._throttle.interval)
        return skipped is not None


# ---------------------------------------------------------------- bodies


@dataclass
class _Slot:
    declared: int
    evicted: asyncio.Event = field(default_factory=asyncio.Event)


class RequestGuard:
    """Checks a request's headers before its body and reads the body within its deadline and a slot."""

    def __init__(self, limits: RequestLimits, *, now: Callable[[], float] = time.time) -> None:
        self.limits = limits
        self._now = now
        self._slots: OrderedDict[int, _Slot] = OrderedDict()
        self._reading_bytes = 0
        self.log = ThrottledLog(log, interval=limits.log_interval)

    @property
    def reading(self) -> int:
        """Bodies being read now."""
        return len(self._slots)

    def before_body(self, headers: Headers) -> tuple[int, Refusal | None]:
        """(the declared size, None) when the body may be read; else (0, the refusal). An unsigned request
        is read only as far as an ssl_check needs."""
        if any(value.strip() for value in headers.get("transfer-encoding", [])):
            return 0, Refusal(411, "a body without a declared size (Content-Length)")
        declared = slack_requests.header(headers, "content-length") or "0"
        if not declared.isascii() or not declared.isdigit() or len(headers.get("content-length", [])) > 1:
            return 0, Refusal(400, "a malformed Content-Length")
        size = int(declared)
        unsigned = slack_requests.unsigned_reason(headers)
        if unsigned is not None:
            return (size, None) if size <= MAX_UNSIGNED_BYTES else (0, Refusal(401, unsigned))
        stamp = int(slack_requests.header(headers, "x-slack-request-timestamp"))
        if abs(self._now() - stamp) > slack_requests.MAX_CLOCK_SKEW_SECONDS:
            return 0, Refusal(401, "stale timestamp")
        if size > MAX_BODY_BYTES:
            return 0, Refusal(413, f"a declared body over {MAX_BODY_BYTES} bytes")
        return size, None

    async def read(self, receive: Receive, declared: int) -> bytes | Refusal:
        """The body, read in a slot within the body deadline; a Refusal when it took too long, was evicted by
        newer requests, or the client went away."""
        key, slot = self._admit(declared)
        try:
            return await asyncio.wait_for(self._read(receive, slot), self.limits.body_seconds)
        except asyncio.TimeoutError:
            return Refusal(408, f"a body not sent within {self.limits.body_seconds:g} s")
        finally:
            self._release(key)

    async def _read(self, receive: Receive, slot: _Slot) -> bytes | Refusal:
        chunks: list[bytes] = []
        size = 0
        evicted = asyncio.ensure_future(slot.evicted.wait())
        message: asyncio.Future[dict[str, Any]] | None = None
        try:
            while True:
                message = asyncio.ensure_future(receive())
                done, _ = await asyncio.wait({message, evicted}, return_when=asyncio.FIRST_COMPLETED)
                if message not in done:
                    return Refusal(503, "a slow body, dropped for newer requests")
                received = message.result()
                if received.get("type") == "http.disconnect":
                    return Refusal(0, "a client that went away mid-body")
                chunk = received.get("body", b"")
                size += len(chunk)
                if size > slot.declared:
                    return Refusal(400, "a body longer than its Content-Length")
                chunks.append(chunk)
                if not received.get("more_body"):
                    return b"".join(chunks)
        finally:  # also when the deadline cancels this: nothing is left waiting on the connection
            evicted.cancel()
            if message is not None and not message.done():
                message.cancel()

    def _admit(self, declared: int) -> tuple[int, _Slot]:
        # The event loop is single-threaded: the slots need no lock.
        limits = self.limits
        while self._slots and (len(self._slots) >= limits.max_reading
                               or self._reading_bytes + declared > limits.max_reading_bytes):
            _, oldest = self._slots.popitem(last=False)
            self._reading_bytes -= oldest.declared
            oldest.evicted.set()
        slot = _Slot(declared)
        key = id(slot)
        self._slots[key] = slot
        self._reading_bytes += declared
        return key, slot

    def _release(self, key: int) -> None:
        slot = self._slots.pop(key, None)
        if slot is not None:
            self._reading_bytes -= slot.declared


# ---------------------------------------------------------------- connections


class _Connections:
    """How many connections one server has open, and those with no request under way, oldest first."""

    def __init__(self) -> None:
        self.idle: OrderedDict[int, H11Protocol] = OrderedDict()
        self.count = 0


def connection_guard(limits: RequestLimits, throttle: ThrottledLog) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline on each request's headers and a cap on open connections (see
    the module's docstring); one class per server, sharing its connections' registry."""
    connections = _Connections()

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            connections.count += 1
            self._waiting()
            if connections.count > limits.max_connections:
                self._close_oldest_idle()

        def connection_lost(self, exc: Exception | None) -> None:
            connections.count -= 1
            connections.idle.pop(id(self), None)
            self._cancel_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._under_way():
                connections.idle.pop(id(self), None)  # the body's own deadline rules from here
                self._cancel_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()  # may start a pipelined request at once
            if not self.transport.is_closing() and not self._under_way():
                self._waiting()

        def _under_way(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _waiting(self) -> None:
            """No request under way: its headers are due within the deadline."""
            connections.idle[id(self)] = self
            connections.idle.move_to_end(id(self))
            self._cancel_timer()
            self._header_timer = self.loop.call_later(limits.header_seconds, self._headers_late)

        def _headers_late(self) -> None:
            if id(self) in connections.idle and not self._under_way() and not self.transport.is_closing():
                throttle.info("headers", "closed a connection whose request headers took over %g s",
                              limits.header_seconds)
                self.transport.close()

        def _close_oldest_idle(self) -> None:
            for key, oldest in connections.idle.items():
                if oldest is not self:
                    del connections.idle[key]
                    throttle.info("connections", "closed the oldest idle connection: over %d open",
                                  limits.max_connections)
                    oldest.transport.close()
                    return

        def _cancel_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

    return GuardedH11Protocol


def server_options(limits: RequestLimits) -> dict[str, Any]:
    """uvicorn.Config's options for these limits: the guarded h11 protocol, `limit_concurrency` as the
    backstop; uvicorn's per-request warnings throttled (one filter on its logger, however many servers)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, UvicornThrottle) for f in logger.filters):
        logger.addFilter(UvicornThrottle(ThrottledLog(logger, interval=limits.log_interval)))
    throttle = ThrottledLog(log, interval=limits.log_interval)
    return {"http": connection_guard(limits, throttle), "limit_concurrency": limits.concurrency_backstop}


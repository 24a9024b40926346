"""Issue 34, item 5: half-sent requests never exhaust the bot before a signature can be checked.

The real bot as `trainbot serve --http` builds it (uvicorn with bot.serve.http_server, the Bolt app behind
bot.serve.SlackHttpApp), attacked over loopback by a client that needs no secret: requests whose headers look
signed (a fresh timestamp, a `v0=` signature) and whose bodies stop part way, connections that stop in the
middle of their headers, and a flood of requests refused for their headers. Meanwhile /healthz and a genuinely
signed command are answered; every stalled connection is answered or closed by the bot within its deadlines;
at most MAX_READING bodies are held at once; and the log holds a line per kind of refusal, not per request.
The sockets are bounded (a few hundred) so the test machine survives.
"""

from __future__ import annotations

import logging
import selectors
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.request_guard import MAX_READING, MAX_READING_BYTES, RequestLimits
from tests.security.bot_rig import RealBot, real_bot

pytestmark = pytest.mark.timeout(300)

STALLED = 300  # sockets of a flood: hundreds, within any test machine's file limit
#: How long the test waits for the bot to answer or close every stalled socket: far past its deadlines.
PATIENCE = 90.0
FAKE_SIGNATURE = "v0=" + "0" * 64


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[RealBot]:
    """The limits `serve --http` ships with."""
    with real_bot(tmp_path) as rig:
        yield rig


@pytest.fixture
def capped_bot(tmp_path: Path) -> Iterator[RealBot]:
    """The shipped limits, but a cap on open connections small enough to pass with a bounded flood."""
    with real_bot(tmp_path, limits=RequestLimits(max_connections=200, concurrency_backstop=400)) as rig:
        yield rig


def head(*, declared: int | None = 1_000_000, stamp: int | None = None, chunked: bool = False) -> bytes:
    """A POST to /slack/events whose headers look signed (no secret needed to write them)."""
    lines = ["POST /slack/events HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/x-www-form-urlencoded",
             f"X-Slack-Request-Timestamp: {int(time.time()) if stamp is None else stamp}",
             f"X-Slack-Signature: {FAKE_SIGNATURE}"]
    if declared is not None:
        lines.append(f"Content-Length: {declared}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def opened(port: int, data: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(data)
    return sock


def outcomes(sockets: list[socket.socket], patience: float = PATIENCE) -> dict[int, int | str]:
    """What became of each socket (by index) once the bot answered or closed it: the status answered, or
    "closed"; "open" for a socket the bot still held after ``patience`` seconds."""
    selector = selectors.DefaultSelector()
    received: dict[int, bytes] = {}
    result: dict[int, int | str] = {}
    for index, sock in enumerate(sockets):
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, index)
        received[index] = b""
    deadline = time.monotonic() + patience
    while len(result) < len(sockets) and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.5):
            index, sock = key.data, key.fileobj
            try:
                chunk = sock.recv(65536)  # type: ignore[union-attr]
            except (ConnectionResetError, BlockingIOError):
                chunk = b""
            received[index] += chunk
            if not chunk:
                selector.unregister(sock)
                line = received[index].split(b"\r\n", 1)[0].split()
                result[index] = int(line[1]) if len(line) > 1 and line[0].startswith(b"HTTP/") else "closed"
    for index in range(len(sockets)):
        result.setdefault(index, "open")
    selector.close()
    for sock in sockets:
        sock.close()
    return result


def answered(bot: RealBot) -> None:
    """/healthz and a genuinely signed command are answered (the rig's own 30 s client timeouts)."""
    assert bot.bot.send("", {}, path="/healthz", method="GET") == (200, '{"ok": true}')
    card = bot.command("/train", "bert-squad")
    assert card.get("blocks"), card


def test_half_sent_bodies_are_bounded_and_dropped_while_the_bot_answers(bot: RealBot) -> None:
    stalled = [opened(bot.bot.port, head() + b"x" * 1024) for _ in range(STALLED)]
    answered(bot)
    guard = bot.bot.asgi._guard
    assert guard.reading <= MAX_READING and guard._reading_bytes <= MAX_READING_BYTES
    became = outcomes(stalled)
    assert set(became.values()) <= {408, 503}, sorted(set(map(str, became.values())))
    assert guard.reading == 0
    answered(bot)


def test_the_headers_alone_refuse_what_slack_would_never_send(bot: RealBot) -> None:
    """Answered before a byte of the body is sent: a stale timestamp, a size over the cap, a chunked body."""
    port = bot.bot.port
    refused = [opened(port, head(declared=100, stamp=int(time.time()) - 600)),
               opened(port, head(declared=50_000_000)),
               opened(port, head(declared=None, chunked=True))]
    assert outcomes(refused, patience=30) == {0: 401, 1: 413, 2: 411}


def test_stalled_headers_are_closed_and_never_crowd_out_others(capped_bot: RealBot) -> None:
    bot = capped_bot
    partial = b"POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slack-Request"
    stalled = [opened(bot.bot.port, partial) for _ in range(STALLED)]  # past the cap of 200 open
    answered(bot)
    became = outcomes(stalled)
    assert set(became.values()) == {"closed"}, sorted(set(map(str, became.values())))
    answered(bot)


def test_a_flood_of_refusals_logs_a_line_per_kind(bot: RealBot, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    caplog.clear()
    port, body = bot.bot.port, b"command=%2Fjobs&user_id=U_ALICE"
    floods = [
        head(declared=len(body)) + body,  # a forged signature over a whole body
        head(declared=10, stamp=int(time.time()) - 900),  # stale
        head(declared=50_000_000),  # over the cap
        head(declared=None, chunked=True),  # no declared size
        b"NOT-HTTP \x00\x01\r\n\r\n",  # uvicorn's own "Invalid HTTP request received."
    ]
    sockets = [opened(port, floods[i % len(floods)]) for i in range(STALLED)]
    became = outcomes(sockets, patience=60)
    lines = [r for r in caplog.records if r.name.startswith(("bot", "uvicorn"))]
    assert 0 < len(lines) <= 3 * len(floods), [r.getMessage() for r in lines]
    assert any("signature does not match" in r.getMessage() for r in lines)
    assert "open" not in became.values()
    answered(bot)

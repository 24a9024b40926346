"""bot/request_guard.py on its own: what the headers alone refuse, the body's slots (the oldest reader makes
room for a new one), its deadline, and the log's one line per kind per interval on an injected clock. The
attack over real sockets is tests/security/test_slow_requests.py."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from bot.request_guard import MAX_BODY_BYTES, Refusal, RequestGuard, RequestLimits, ThrottledLog

NOW = 1_800_000_000


def headers(**values: str) -> dict[str, list[str]]:
    base = {"x-slack-request-timestamp": str(NOW), "x-slack-signature": "v0=" + "0" * 64, "content-length": "10"}
    base.update({k.replace("_", "-"): v for k, v in values.items()})
    return {k: [v] for k, v in base.items() if v != "-"}


@pytest.mark.parametrize(("changes", "expected"), [
    ({}, (10, None)),
    ({"x_slack_request_timestamp": str(NOW - 301)}, (0, Refusal(401, "stale timestamp"))),
    ({"content_length": str(MAX_BODY_BYTES + 1)}, (0, Refusal(413, f"a declared body over {MAX_BODY_BYTES} bytes"))),
    ({"content_length": "-", "transfer_encoding": "chunked"},
     (0, Refusal(411, "a body without a declared size (Content-Length)"))),
    ({"content_length": "1e3"}, (0, Refusal(400, "a malformed Content-Length"))),
    ({"x_slack_signature": "-", "content_length": "40"}, (40, None)),  # unsigned: an ssl_check's worth
    ({"x_slack_signature": "-", "content_length": "4000"}, (0, Refusal(401, "missing or malformed signature"))),
])
def test_the_headers_alone_decide_whether_a_body_is_read(changes: dict[str, str], expected: tuple) -> None:
    guard = RequestGuard(RequestLimits(), now=lambda: NOW)
    assert guard.before_body(headers(**changes)) == expected


def test_a_new_body_takes_the_oldest_slot_and_a_slow_one_meets_its_deadline() -> None:
    async def scenario() -> list[Any]:
        guard = RequestGuard(RequestLimits(max_reading=2, body_seconds=0.5), now=lambda: NOW)
        never = asyncio.Event()

        async def stalled() -> dict[str, Any]:
            await never.wait()
            return {}

        async def whole() -> dict[str, Any]:
            return {"type": "http.request", "body": b"0123456789", "more_body": False}

        first = asyncio.ensure_future(guard.read(stalled, 10))
        second = asyncio.ensure_future(guard.read(stalled, 10))
        await asyncio.sleep(0)
        third = await guard.read(whole, 10)  # the slots are full: the oldest reader is dropped for it
        return [await first, third, await second, guard.reading]

    first, third, second, reading = asyncio.run(scenario())
    assert first == Refusal(503, "a slow body, dropped for newer requests")
    assert third == b"0123456789"
    assert second == Refusal(408, "a body not sent within 0.5 s")
    assert reading == 0


def test_each_kind_is_logged_once_per_interval_with_the_count_since(caplog: pytest.LogCaptureFixture) -> None:
    clock = [0.0]
    throttle = ThrottledLog(logging.getLogger("tests.throttle"), interval=60, now=lambda: clock[0])
    caplog.set_level(logging.INFO, logger="tests.throttle")
    for second in range(0, 130):
        clock[0] = float(second)
        throttle.info("stale", "refused: %s", "stale timestamp")
        throttle.info("forged", "refused: %s", "signature does not match")
    assert [r.getMessage() for r in caplog.records] == [
        "refused: stale timestamp", "refused: signature does not match",
        "refused: stale timestamp (and 59 more like it in the last 60 s)",
        "refused: signature does not match (and 59 more like it in the last 60 s)",
        "refused: stale timestamp (and 59 more like it in the last 60 s)",
        "refused: signature does not match (and 59 more like it in the last 60 s)",
    ]

"""Waiting for something to happen, never for a while: a check polled until it holds, with one generous cap
for the whole suite (a loaded CI machine is slow, not wrong), which fails with what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable

#: Below pytest's own per-test timeout (pyproject.toml), so a wait that runs out says what it waited for.
GENEROUS_SECONDS = 240.0


def wait_for(check: Callable[[], object], what: str, *, seconds: float = GENEROUS_SECONDS, every: float = 0.2) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds:g} s waiting for {what}")
        time.sleep(every)

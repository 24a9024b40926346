"""jobs/recent.py: a value read lately is served again for its seconds, then read afresh; a refusal is not
kept; and keys typed by anyone cannot grow the memory past its bound (the least recently read go first)."""

from __future__ import annotations

import pytest

from jobs.recent import RecentReads


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_value_is_kept_for_its_seconds_and_a_refusal_never() -> None:
    clock, reads = Clock(), []
    memory: RecentReads[str, int] = RecentReads(5.0, monotonic=clock)
    read = lambda: reads.append(1) or len(reads)  # noqa: E731
    assert memory.get("a", read) == 1 and memory.get("a", read) == 1
    clock.now = 5.0
    assert memory.get("a", read) == 2
    memory.forget("a")
    assert memory.get("a", read) == 3

    def refuse() -> int:
        raise ValueError("bad")

    with pytest.raises(ValueError):
        memory.get("b", refuse)
    assert memory.get("b", read) == 4


def test_many_keys_keep_only_the_most_recently_read() -> None:
    memory: RecentReads[str, str] = RecentReads(60.0, kept=3, monotonic=Clock())
    for name in ("a", "b", "c"):
        memory.get(name, lambda name=name: name)
    memory.get("a", lambda: "never")  # read lately: kept
    for n in range(1000):
        memory.get(f"typed-{n}", lambda: "x")
    assert len(memory._values) == 3  # noqa: SLF001 - the bound is the point
    assert memory.get("a", lambda: "read again") == "read again"

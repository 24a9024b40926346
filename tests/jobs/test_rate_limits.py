"""The rate-limit policy alone, on a fake clock: what each bucket admits in every sliding window, that a
burst is there after a quiet spell, that lower priorities leave room for higher ones and yield to them under
contention, that a Retry-After holds every priority back, and that a call draws on all its budgets or none."""

from __future__ import annotations

import threading

import pytest

from jobs.rate_limits import (
    MAX_WAIT_SECONDS,
    Bucket,
    Budget,
    MemoryLedger,
    Priority,
    Rate,
    current_priority,
    prioritised,
    take,
    wait_for,
)
from tests.support.clock import FakeClock
from tests.support.slack_api import most_in_window


def hammer(ledger: MemoryLedger, budgets: list[Budget], clock: FakeClock, seconds: float,
           step: float = 0.05, priority: Priority = Priority.ENDING) -> list[float]:
    """A caller trying every ``step`` seconds for ``seconds``: the moments it was let through."""
    admitted = []
    start = clock.now().timestamp()
    while clock.now().timestamp() - start < seconds:
        now = clock.now().timestamp()
        if ledger.take(budgets, priority, now) == 0:
            admitted.append(now)
        clock.advance(step)
    return admitted


@pytest.mark.parametrize("rate, window, limit", [
    (Rate(45, burst=5), 60.0, 50),  # Tier 3's 50 a minute
    (Rate(90, burst=10), 60.0, 100),  # Tier 4's 100
    (Rate(50, burst=2), 10.0, 10),  # a channel's one a second, bursts of two
    (Rate(50, burst=2), 60.0, 60),
])
def test_a_bucket_never_admits_more_than_its_limit_in_any_sliding_window(rate: Rate, window: float,
                                                                         limit: int) -> None:
    clock = FakeClock()
    admitted = hammer(MemoryLedger(), [Budget("m", rate)], clock, seconds=300)
    assert most_in_window(admitted, window) <= limit
    # ... and it is no tighter than it needs to be: over five minutes it sustains its rate.
    assert len(admitted) >= rate.per_minute * 5


def test_a_quiet_bucket_takes_its_whole_burst_at_once_then_paces() -> None:
    ledger, now = MemoryLedger(), 1000.0
    budgets = [Budget("chat.update", Rate(45, burst=5))]
    assert [ledger.take(budgets, Priority.ENDING, now) for _ in range(5)] == [0.0] * 5
    wait = ledger.take(budgets, Priority.ENDING, now)
    assert wait == pytest.approx(60 / 45)
    assert ledger.take(budgets, Priority.ENDING, now + wait) == 0.0


def test_lower_priorities_leave_room_for_the_higher_ones() -> None:
    ledger, now = MemoryLedger(), 1000.0
    budgets = [Budget("chat.update", Rate(45, burst=5))]
    progress = 0
    while ledger.take(budgets, Priority.PROGRESS, now) == 0:
        progress += 1
    assert progress == 3  # two of the five left free
    assert ledger.take(budgets, Priority.CHANGE, now) == 0  # a state change takes one of them
    assert ledger.take(budgets, Priority.CHANGE, now) > 0  # ... and leaves the last for an ending
    assert ledger.take(budgets, Priority.ENDING, now) == 0
    assert ledger.take(budgets, Priority.ENDING, now) > 0


def test_under_contention_endings_then_changes_go_first_and_progress_takes_what_is_left() -> None:
    """Three callers that each try again every tick: progress only gets slots while neither of the others
    is waiting, and all three together stay inside the bucket's limit."""
    clock = FakeClock()
    start = clock.now().timestamp()
    ledger = MemoryLedger()
    budgets = [Budget("chat.update", Rate(45, burst=5))]
    wanting = {Priority.ENDING: 20, Priority.CHANGE: 40, Priority.PROGRESS: 1000}
    admitted: list[tuple[float, Priority]] = []
    while clock.now().timestamp() - start < 180:
        now = clock.now().timestamp()
        for priority in (Priority.PROGRESS, Priority.CHANGE, Priority.ENDING):  # the lowest asks first
            if wanting[priority] and ledger.take(budgets, priority, now) == 0:
                wanting[priority] -= 1
                admitted.append((now, priority))
        clock.advance(0.05)
    order = [priority for _, priority in admitted]
    endings = [i for i, p in enumerate(order) if p is Priority.ENDING]
    changes = [i for i, p in enumerate(order) if p is Priority.CHANGE]
    progress = [i for i, p in enumerate(order) if p is Priority.PROGRESS]
    assert len(endings) == 20 and len(changes) == 40
    assert max(endings) < changes[5]  # the endings take the room as they come; changes wait behind them
    assert not [i for i in progress if changes[0] < i < max(changes)]  # no progress while changes wait
    assert len(progress) > 50  # ... and all the rest once they are done
    assert most_in_window([at for at, _ in admitted], 60) <= 50


def test_retry_after_holds_every_priority_back_until_it_passes() -> None:
    ledger, now = MemoryLedger(), 1000.0
    budgets = [Budget("chat.update", Rate(45, burst=5))]
    ledger.block("chat.update", now + 30)
    for priority in Priority:
        assert ledger.take(budgets, priority, now + 1) == pytest.approx(29)
    ledger.block("chat.update", now + 10)  # a shorter answer later never shortens the back-off
    assert ledger.take(budgets, Priority.INTERACTIVE, now + 29.9) > 0
    assert ledger.take(budgets, Priority.INTERACTIVE, now + 30) == 0


def test_a_call_draws_on_all_its_budgets_or_none() -> None:
    buckets = {"channel:C1": Bucket(next_free=1010.0)}
    budgets = [Budget("chat.postMessage", Rate(200, burst=10)), Budget("channel:C1", Rate(50, burst=2))]
    wait, taken = take(buckets, budgets, Priority.ENDING, 1000.0)
    assert wait == pytest.approx(10 - 1.2) and taken == {}  # the channel is busy: the method's slot is kept
    wait, taken = take(buckets, budgets, Priority.ENDING, 1010.0)
    assert wait == 0 and set(taken) == {"chat.postMessage", "channel:C1"}


def test_a_burst_smaller_than_the_reserve_means_waiting_for_a_quiet_spell() -> None:
    rate = Rate(60, burst=1)
    bucket = Bucket(next_free=1001.0)  # the last call went at 1000
    assert wait_for(bucket, rate, Priority.ENDING, 1000.0) == pytest.approx(1.0)
    assert wait_for(bucket, rate, Priority.PROGRESS, 1000.0) == pytest.approx(3.0)


def test_patience_is_shortest_where_someone_waits_and_none_for_progress() -> None:
    assert MAX_WAIT_SECONDS[Priority.PROGRESS] == 0
    assert MAX_WAIT_SECONDS[Priority.INTERACTIVE] < 3  # a modal's trigger id lives 3 s


def test_a_rate_needs_a_pace_and_a_burst() -> None:
    with pytest.raises(ValueError, match="per_minute"):
        Rate(0)
    with pytest.raises(ValueError, match="burst"):
        Rate(10, burst=0)


def test_the_priority_of_the_calls_in_progress_is_per_thread_and_nests() -> None:
    assert current_priority() is Priority.INTERACTIVE
    seen: list[Priority] = []
    with prioritised(Priority.PROGRESS):
        thread = threading.Thread(target=lambda: seen.append(current_priority()))
        thread.start()
        thread.join()
        with prioritised(Priority.ENDING):
            assert current_priority() is Priority.ENDING
        assert current_priority() is Priority.PROGRESS
    assert current_priority() is Priority.INTERACTIVE
    assert seen == [Priority.INTERACTIVE]  # another thread's calls are not marked by this one

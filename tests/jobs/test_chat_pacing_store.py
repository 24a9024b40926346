"""The store's side of chat pacing, on SQLite and on a real PostgreSQL server: the rate-limit buckets and
Retry-After back-offs that two bots on one database share (never both taking the last slot, even racing
from many threads), and the coalesced card redraws (one per card, the newest request's priority, a change
that lands mid-draw kept, a card that keeps failing backed off and then given up)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from jobs.rate_limits import Budget, Priority, Rate
from jobs.store.card_redraws import MAX_FAILURES, CardRedraws
from jobs.store.rate_ledger import StoreRateLedger
from jobs.store.store import Store
from tests.support.clock import FakeClock

TIER_3 = Rate(45, burst=5)
NOW = 1_800_000_000.0


@pytest.fixture
def replica(database_url: str, clock: FakeClock, store: Store) -> Iterator[Store]:
    """A second bot's store on the same database as ``store``."""
    other = Store(database_url, clock=clock)
    yield other
    other.dispose()


def test_two_bots_share_each_methods_budget(store: Store, replica: Store) -> None:
    mine, theirs = StoreRateLedger(store.engine), StoreRateLedger(replica.engine)
    budgets = [Budget("chat.update", TIER_3)]
    assert [mine.take(budgets, Priority.ENDING, NOW) for _ in range(3)] == [0.0] * 3
    assert [theirs.take(budgets, Priority.ENDING, NOW) for _ in range(2)] == [0.0] * 2
    assert mine.take(budgets, Priority.ENDING, NOW) == pytest.approx(60 / 45)  # the burst is spent, by both
    assert theirs.take([Budget("chat.postMessage", Rate(200, burst=10))], Priority.ENDING, NOW) == 0.0


def test_a_retry_after_one_bot_heard_holds_the_other_back(store: Store, replica: Store) -> None:
    StoreRateLedger(store.engine).block("chat.update", NOW + 30)
    theirs = StoreRateLedger(replica.engine)
    assert theirs.take([Budget("chat.update", TIER_3)], Priority.INTERACTIVE, NOW + 1) == pytest.approx(29)
    assert theirs.take([Budget("views.publish", Rate(90, burst=10))], Priority.INTERACTIVE, NOW + 1) == 0.0
    assert theirs.take([Budget("chat.update", TIER_3)], Priority.INTERACTIVE, NOW + 30) == 0.0
    assert StoreRateLedger(store.engine).buckets()["chat.update"].blocked_until == NOW + 30


def test_racing_threads_of_two_bots_never_take_more_than_the_burst(store: Store, replica: Store) -> None:
    ledgers = [StoreRateLedger(store.engine), StoreRateLedger(replica.engine)]
    budgets = [Budget("chat.update", TIER_3), Budget("channel:C1", Rate(50, burst=2))]
    admitted: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def caller(index: int) -> None:
        ledger = ledgers[index % 2]
        start.wait()
        for _ in range(5):
            if ledger.take(budgets, Priority.ENDING, NOW) == 0:
                with lock:
                    admitted.append(index)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 2  # the channel's burst, although the method had five
    assert set(StoreRateLedger(store.engine).buckets()) == {"chat.update", "channel:C1"}


def test_many_changes_to_a_card_are_one_redraw_at_the_highest_priority(store: Store, clock: FakeClock) -> None:
    redraws = CardRedraws(store, clock)
    redraws.request("L1", Priority.PROGRESS)
    clock.advance(1)
    redraws.request("L2", Priority.CHANGE)
    clock.advance(1)
    redraws.request("L1", Priority.CHANGE)
    redraws.request("L3", Priority.ENDING)
    redraws.request("L1", Priority.CHANGE)
    due = redraws.due()
    assert [(r.lineage_id, r.priority) for r in due] == [("L3", Priority.ENDING), ("L1", Priority.CHANGE),
                                                         ("L2", Priority.CHANGE)]  # L1 asked first
    assert all(redraws.drawn(r) for r in due) and redraws.waiting() == []


def test_a_change_that_lands_while_the_card_is_drawn_gets_its_own_redraw(store: Store, replica: Store,
                                                                         clock: FakeClock) -> None:
    mine, theirs = CardRedraws(store, clock), CardRedraws(replica, clock)
    mine.request("L1", Priority.CHANGE)
    seen, = mine.due()
    theirs.request("L1", Priority.ENDING)  # another bot's change, after this one read the card
    assert not mine.drawn(seen)
    again, = theirs.due()
    assert again.priority == Priority.ENDING and again.version == seen.version + 1
    assert theirs.drawn(again) and mine.waiting() == []


def test_a_card_that_keeps_failing_waits_longer_then_is_given_up(store: Store, clock: FakeClock) -> None:
    redraws = CardRedraws(store, clock)
    redraws.request("L1", Priority.CHANGE)
    redraws.request("L2", Priority.PROGRESS)
    failing, = [r for r in redraws.due() if r.lineage_id == "L1"]
    assert redraws.failed(failing)
    assert [r.lineage_id for r in redraws.due()] == ["L2"]  # it waits; the others go meanwhile
    waits = []
    for _ in range(MAX_FAILURES - 2):
        before = clock.now()
        while not [r for r in redraws.due() if r.lineage_id == "L1"]:
            clock.advance(1)
        waits.append((clock.now() - before).total_seconds())
        failing, = [r for r in redraws.due() if r.lineage_id == "L1"]
        assert redraws.failed(failing)
    assert waits == [5.0 * 2 ** n for n in range(MAX_FAILURES - 2)]  # 5 s, then 10, 20, ... doubling
    clock.advance(timedelta(days=1).total_seconds())
    last, = [r for r in redraws.due() if r.lineage_id == "L1"]
    assert not redraws.failed(last)  # given up: it no longer holds a place
    assert [r.lineage_id for r in redraws.waiting()] == ["L2"]

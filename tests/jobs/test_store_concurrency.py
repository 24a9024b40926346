"""Two writers race the same guarded transition on one store (a SQLite file, then a real PostgreSQL database
under its default READ COMMITTED isolation): exactly one wins, every round.

Each round both writers are released together by a barrier and try the same three things: move the lineage
RUNNING -> RELAUNCHING, add attempt 2, and move attempt 1 RUNNING -> FAILED. A read-then-write
implementation lets both win; a guarded UPDATE (and the unique attempt number) lets exactly one.
"""

from __future__ import annotations

import multiprocessing
import threading
from datetime import datetime, timezone
from typing import Any

from jobs import lineage as moves
from jobs.clock import SystemClock
from jobs.lineage import LineageStatus
from jobs.planning.presets import preset_fields
from jobs.planning.spec import spec_from_fields
from jobs.records import Actor
from jobs.store.store import Store
from tests.support.clock import FakeClock

ROUNDS_THREADS = 60
ROUNDS_PROCESSES = 40
ACTOR = Actor("U_ALICE", via="cli")


def _prepare(url: str, rounds: int) -> None:
    store = Store(url, clock=FakeClock(datetime(2026, 3, 1, tzinfo=timezone.utc)))
    store.migrate()
    spec = spec_from_fields(preset_fields("distilbert-spot"))
    for i in range(rounds):
        lid = f"race-{i}"
        store.create_lineage(
            lineage_id=lid,
            spec=spec,
            backend="fake",
            checkpoint_uri=f"s3://b/{lid}",
            actor=ACTOR,
            estimated_usd=1.0,
        )
        store.transition_lineage(lid, moves.CONFIRM_LAUNCH)
        store.add_attempt(lid, number=1, instance_type="ml.p3.2xlarge", spot=True)
        store.transition_attempt(f"{lid}-1", moves.ATTEMPT_CONFIRMED)
    store.dispose()


def _race(url: str, rounds: int, barrier: Any) -> list[tuple[bool, bool, bool]]:
    """One writer: its own Store (own engine, own connections) on the shared file."""
    store = Store(url, clock=SystemClock())
    results = []
    for i in range(rounds):
        lid = f"race-{i}"
        barrier.wait()
        moved = store.transition_lineage(lid, moves.SCHEDULE_RELAUNCH)
        added = store.add_attempt(lid, number=2, instance_type="ml.g5.xlarge", spot=False) is not None
        ended = store.transition_attempt(f"{lid}-1", moves.ATTEMPT_FAILED)
        results.append((moved, added, ended))
    store.dispose()
    return results


def _process_worker(url: str, rounds: int, barrier: Any, queue: Any) -> None:
    queue.put(_race(url, rounds, barrier))


def _assert_one_winner_each_round(
    a: list[tuple[bool, bool, bool]], b: list[tuple[bool, bool, bool]], rounds: int, url: str
) -> None:
    assert len(a) == len(b) == rounds
    for i, (mine, theirs) in enumerate(zip(a, b, strict=True)):
        for what, x, y in zip(("lineage", "add_attempt", "attempt"), mine, theirs, strict=True):
            assert x != y, f"round {i}: {what} won by {'both' if x else 'neither'}"
    store = Store(url, clock=SystemClock())
    for lineage in store.list_lineages(limit=rounds):
        assert lineage.status is LineageStatus.RELAUNCHING
        assert [a.number for a in lineage.attempts] == [1, 2]


def test_two_threads_race_one_transition(database_url: str) -> None:
    url = database_url
    _prepare(url, ROUNDS_THREADS)
    barrier = threading.Barrier(2)
    out: dict[str, list[tuple[bool, bool, bool]]] = {}
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            out[name] = _race(url, ROUNDS_THREADS, barrier)
        except BaseException as exc:  # surface a worker's failure in the test, not a hang
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    _assert_one_winner_each_round(out["a"], out["b"], ROUNDS_THREADS, url)


def test_two_processes_race_one_transition(database_url: str) -> None:
    url = database_url
    _prepare(url, ROUNDS_PROCESSES)
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter each: no engine or lock inherited
    barrier = ctx.Barrier(2, timeout=60)
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_process_worker, args=(url, ROUNDS_PROCESSES, barrier, queue)) for _ in range(2)
    ]
    for p in procs:
        p.start()
    try:
        results = [queue.get(timeout=90) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
    assert [p.exitcode for p in procs] == [0, 0]
    _assert_one_winner_each_round(results[0], results[1], ROUNDS_PROCESSES, url)

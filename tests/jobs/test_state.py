"""The lifecycle's transition table, exhaustively: every edge it names moves, every other pair is refused,
on a real store (the guarded UPDATE is what carries a move out)."""

from __future__ import annotations

import itertools

import pytest

from jobs import lineage as moves
from jobs.lineage import AttemptStatus, LineageStatus
from jobs.planning.grammar import parse_command
from jobs.records import Actor
from jobs.store.schema import attempts, lineages
from jobs.store.store import Store
from tests.support.clock import FakeClock

L, A = LineageStatus, AttemptStatus
#: Written out by hand, independently of the moves, so a new edge has to be added twice: here and there.
EXPECTED_LINEAGE_EDGES = {
    (L.PENDING, L.RUNNING), (L.PENDING, L.RELAUNCHING), (L.PENDING, L.COMPLETED), (L.PENDING, L.FAILED),
    (L.PENDING, L.STOPPED), (L.PENDING, L.GAVE_UP),
    (L.RUNNING, L.RELAUNCHING), (L.RUNNING, L.COMPLETED), (L.RUNNING, L.FAILED), (L.RUNNING, L.STOPPED),
    (L.RUNNING, L.GAVE_UP),
    (L.RELAUNCHING, L.RELAUNCHING), (L.RELAUNCHING, L.RUNNING), (L.RELAUNCHING, L.FAILED),
    (L.RELAUNCHING, L.STOPPED), (L.RELAUNCHING, L.GAVE_UP),
}
EXPECTED_ATTEMPT_EDGES = {
    (A.LAUNCHING, A.RUNNING), (A.LAUNCHING, A.LAUNCH_FAILED),
    (A.LAUNCHING, A.COMPLETED), (A.LAUNCHING, A.FAILED), (A.LAUNCHING, A.STOPPED),
    (A.RUNNING, A.COMPLETED), (A.RUNNING, A.FAILED), (A.RUNNING, A.STOPPED),
}


def test_the_tables_are_exactly_the_expected_edges() -> None:
    assert moves.LINEAGE_EDGES == EXPECTED_LINEAGE_EDGES
    assert moves.ATTEMPT_EDGES == EXPECTED_ATTEMPT_EDGES
    assert not any(source.is_terminal() for source, _ in moves.LINEAGE_EDGES)
    assert not any(source.is_terminal() for source, _ in moves.ATTEMPT_EDGES)


def _new(store: Store, status_l: LineageStatus, status_a: AttemptStatus) -> str:
    lid = f"j{len(store.list_lineages(limit=100000))}"
    store.create_lineage(lineage_id=lid, spec=parse_command("distilbert-spot"), backend="fake",
                         checkpoint_uri="s3://b/c", actor=Actor("U1"), estimated_usd=1.0)
    store.add_attempt(lid, number=1, instance_type="ml.p3.2xlarge", spot=True)
    with store.engine.begin() as conn:  # put the rows in the starting state directly: setup, not a move
        conn.execute(lineages.update().where(lineages.c.id == lid).values(status=status_l.value))
        conn.execute(attempts.update().where(attempts.c.lineage_id == lid).values(status=status_a.value))
    return lid


@pytest.mark.parametrize("source", list(LineageStatus))
def test_every_lineage_move_from_every_status(store: Store, clock: FakeClock, source: LineageStatus) -> None:
    for move in moves.LINEAGE_MOVES:
        lid = _new(store, source, A.RUNNING)
        moved = store.transition_lineage(lid, move)
        assert moved == (source in move.sources), (move.name, source)
        assert not moved or (source, move.target) in EXPECTED_LINEAGE_EDGES
        expected_now = move.target if moved else source
        assert store.get_lineage(lid).status is expected_now


@pytest.mark.parametrize("source", list(AttemptStatus))
def test_every_attempt_move_from_every_status(store: Store, clock: FakeClock, source: AttemptStatus) -> None:
    for move in moves.ATTEMPT_MOVES:
        lid = _new(store, L.RUNNING, source)
        moved = store.transition_attempt(f"{lid}-1", move)
        assert moved == (source in move.sources), (move.name, source)
        assert not moved or (source, move.target) in EXPECTED_ATTEMPT_EDGES


def test_a_move_outside_the_table_is_refused_by_the_store(store: Store) -> None:
    lid = _new(store, L.COMPLETED, A.COMPLETED)
    for source, target in itertools.product(LineageStatus, LineageStatus):
        if (source, target) in EXPECTED_LINEAGE_EDGES:
            continue
        with pytest.raises(ValueError, match="not one of the lifecycle's moves"):
            store.transition_lineage(lid, moves.Move("ad hoc", (source,), target))

"""The store on a real SQLite file and on a real PostgreSQL database: migrations, lineages and attempts, guarded
transitions, audit, outbox, meta."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect

from jobs import lineage as moves
from jobs.errors import NotFound
from jobs.lineage import AttemptStatus, LineageStatus
from jobs.planning.presets import preset_fields
from jobs.planning.spec import JobSpec, spec_from_fields
from jobs.records import Actor
from jobs.store.migrate import head_revision, revisions, upgrade
from jobs.store.store import DuplicateLineage, Store
from tests.support.clock import FakeClock

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")


def spot_spec() -> JobSpec:
    return spec_from_fields(preset_fields("distilbert-spot"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc))


@pytest.fixture
def store(database_url: str, clock: FakeClock) -> Iterator[Store]:
    s = Store(database_url, clock=clock)
    s.migrate()
    yield s
    s.dispose()


def new_lineage(store: Store, lineage_id: str = "distilbert-spot-0001", **kw: Any) -> str:
    store.create_lineage(
        lineage_id=lineage_id,
        spec=spot_spec(),
        backend="fake",
        checkpoint_uri=f"s3://b/{lineage_id}/checkpoints",
        actor=ALICE,
        estimated_usd=3.5,
        **kw,
    )
    return lineage_id


# -- migrations ---------------------------------------------------------------------------------------


def test_migrate_creates_every_table_in_a_new_folder_and_is_idempotent(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "deep" / "er" / "trainbot.db"
    store = Store(f"sqlite:///{path}", clock=clock)
    assert store.migrate() == revisions()
    assert store.migrate() == []
    assert path.exists()
    tables = set(inspect(store.engine).get_table_names())
    assert {"lineages", "attempts", "audit", "outbox", "meta", "schedules", "endpoints", "job_runs", "alembic_version"} <= tables
    assert store.schema_revision() == head_revision()
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_a_database_at_an_older_revision_gets_only_the_later_ones(
    empty_database_url: str, clock: FakeClock
) -> None:
    store = Store(empty_database_url, clock=clock)
    assert upgrade(store.engine, "0001") == ["0001"]
    assert store.schema_revision() == "0001"
    assert store.migrate() == revisions()[1:]
    assert store.migrate() == []
    assert store.schema_revision() == head_revision()
    store.dispose()


# -- lineages and attempts ----------------------------------------------------------------------------


def test_lineage_round_trip_keeps_spec_and_who_launched_it(store: Store, clock: FakeClock) -> None:
    lineage = store.get_lineage(new_lineage(store, request_id="req-1", schedule="nightly"))
    assert lineage.spec == spot_spec()
    assert lineage.status is LineageStatus.PENDING
    assert (lineage.launched_by, lineage.origin, lineage.channel) == ("U_ALICE", "slack", "C_ML")
    assert lineage.created_at == clock.now() and lineage.created_at.tzinfo is not None
    assert lineage.request_id == "req-1" and lineage.schedule == "nightly"
    assert lineage.attempts == () and lineage.latest_attempt is None
    assert store.find_by_request("req-1") == lineage
    assert store.find_by_request("req-2") is None


def test_duplicate_lineage_id_or_request_is_refused(store: Store) -> None:
    new_lineage(store, request_id="req-1")
    with pytest.raises(DuplicateLineage):
        new_lineage(store)
    with pytest.raises(DuplicateLineage):
        new_lineage(store, "other-0002", request_id="req-1")


def test_attempts_are_numbered_once_and_found_by_job_name(store: Store) -> None:
    lid = new_lineage(store)
    first = store.add_attempt(lid, number=1, instance_type="ml.p3.2xlarge", spot=True)
    assert first is not None and first.job_name == f"{lid}-1" and first.status is AttemptStatus.LAUNCHING
    assert store.add_attempt(lid, number=1, instance_type="ml.p3.2xlarge", spot=True) is None
    second = store.add_attempt(lid, number=2, instance_type="ml.g5.xlarge", spot=False, resumed_from_step=300)
    assert second is not None and second.resumed_from_step == 300
    lineage = store.find(f"{lid}-2")
    assert lineage.id == lid
    assert [a.number for a in lineage.attempts] == [1, 2]
    assert lineage.latest_attempt == second
    assert store.find(lid) == lineage
    with pytest.raises(NotFound, match="trainbot jobs"):
        store.find("nope-1")
    with pytest.raises(NotFound):
        store.add_attempt("missing", number=1, instance_type="ml.p3.2xlarge", spot=True)


def test_guarded_transitions_only_move_from_expected(store: Store, clock: FakeClock) -> None:
    lid = new_lineage(store)
    job = store.add_attempt(lid, number=1, instance_type="ml.p3.2xlarge", spot=True)
    assert job is not None
    assert store.transition_lineage(lid, moves.CONFIRM_LAUNCH)
    assert not store.transition_lineage(lid, moves.CONFIRM_LAUNCH)  # no longer PENDING
    clock.advance(60)
    assert store.transition_lineage(
        lid,
        moves.SCHEDULE_RELAUNCH,
        restarts=1,
        next_relaunch_at=clock.now(),
        next_instance_type="ml.g5.xlarge",
        next_spot=False,
    )
    lineage = store.get_lineage(lid)
    assert lineage.status is LineageStatus.RELAUNCHING and lineage.restarts == 1
    assert (lineage.next_relaunch_at, lineage.next_instance_type, lineage.next_spot) == (
        clock.now(),
        "ml.g5.xlarge",
        False,
    )
    assert lineage.updated_at == clock.now()

    assert store.transition_attempt(job.job_name, moves.ATTEMPT_CONFIRMED)
    assert not store.transition_attempt(job.job_name, moves.ATTEMPT_CONFIRMED)
    assert store.get_attempt(job.job_name).ended_at is None
    clock.advance(30)
    assert store.transition_attempt(
        job.job_name,
        moves.ATTEMPT_FAILED,
        failure_reason="CapacityError: no spot capacity",
    )
    ended = store.get_attempt(job.job_name)
    assert ended.status is AttemptStatus.FAILED and ended.ended_at == clock.now()
    assert ended.failure_reason == "CapacityError: no spot capacity"
    with pytest.raises(TypeError):
        store.transition_lineage(lid, moves.FINISH_RELAUNCH, status="x")
    with pytest.raises(TypeError):
        store.transition_attempt(job.job_name, moves.ATTEMPT_FAILED, colour="red")


def test_update_attempt_mirrors_remote_fields_without_status(store: Store) -> None:
    lid = new_lineage(store)
    store.add_attempt(lid, number=1, instance_type="ml.p3.2xlarge", spot=True)
    store.update_attempt(
        f"{lid}-1",
        remote_status="InProgress",
        secondary_status="Interrupted",
        billable_seconds=120,
        training_seconds=600,
        metrics={"loss": 0.5},
        model_artifacts="s3://b/model.tar.gz",
    )
    a = store.get_attempt(f"{lid}-1")
    assert a.status is AttemptStatus.LAUNCHING
    assert (a.remote_status, a.secondary_status, a.billable_seconds, a.training_seconds) == (
        "InProgress",
        "Interrupted",
        120,
        600,
    )
    assert a.metrics == {"loss": 0.5} and a.model_artifacts == "s3://b/model.tar.gz"
    with pytest.raises(TypeError):
        store.update_attempt(f"{lid}-1", status="completed")
    with pytest.raises(NotFound):
        store.update_attempt("nope-1", remote_status="Completed")


def test_active_attempts_and_lists(store: Store, clock: FakeClock) -> None:
    for i in range(3):
        lid = new_lineage(store, f"job-{i}", schedule="nightly" if i == 1 else None)
        store.add_attempt(lid, number=1, instance_type="ml.p3.2xlarge", spot=True)
        clock.advance(1)
    store.transition_attempt("job-0-1", moves.ATTEMPT_NOT_LAUNCHED)
    store.transition_lineage("job-0", moves.FAIL)
    store.transition_attempt("job-1-1", moves.ATTEMPT_CONFIRMED)
    assert [a.job_name for a in store.active_attempts()] == ["job-1-1", "job-2-1"]
    assert [lin.id for lin in store.list_lineages()] == ["job-2", "job-1", "job-0"]
    assert [lin.id for lin in store.list_lineages(active_only=True)] == ["job-2", "job-1"]
    assert [lin.id for lin in store.list_lineages(limit=1)] == ["job-2"]
    assert [lin.id for lin in store.list_lineages(schedule="nightly")] == ["job-1"]
    assert store.list_lineages()[0].attempts[0].job_name == "job-2-1"


def test_set_message(store: Store) -> None:
    lid = new_lineage(store)
    store.set_message(lid, "C_ML", "1700000000.0001")
    lineage = store.get_lineage(lid)
    assert (lineage.channel, lineage.message_ts) == ("C_ML", "1700000000.0001")
    with pytest.raises(NotFound):
        store.set_message("nope", "C", "1")


def test_attempts_created_since_come_with_their_lineage_spec(store: Store, clock: FakeClock) -> None:
    new_lineage(store, "old")
    store.add_attempt("old", number=1, instance_type="ml.p3.2xlarge", spot=True)
    clock.advance(86400)
    since = clock.now()
    store.add_attempt("old", number=2, instance_type="ml.g5.xlarge", spot=True)
    found = store.attempts_created_since(since)
    assert [(a.job_name, spec.instance_count) for a, spec in found] == [("old-2", 1)]


# -- audit, outbox, meta -------------------------------------------------------------------------------


def test_audit_log_newest_first_and_by_target(store: Store, clock: FakeClock) -> None:
    store.audit(ALICE, "launch", "job-a", {"spot": True})
    clock.advance(1)
    store.audit(None, "relaunch", "job-a")
    store.audit(ALICE, "stop", "job-b")
    entries = store.audit_log(target="job-a")
    assert [(e.action, e.user, e.via) for e in entries] == [
        ("relaunch", "trainbot", "system"),
        ("launch", "U_ALICE", "slack"),
    ]
    assert entries[1].detail == {"spot": True} and entries[1].at < entries[0].at
    assert [e.action for e in store.audit_log(limit=1)] == ["stop"]


def test_outbox_dedups_defers_and_delivers(store: Store, clock: FakeClock) -> None:
    assert store.outbox.enqueue(
        kind="state",
        payload={"text": "running"},
        dedup_key="job-a:1:running",
        lineage_id="job-a",
        channel="C_ML",
    )
    assert not store.outbox.enqueue(kind="state", payload={"text": "again"}, dedup_key="job-a:1:running")
    assert store.outbox.enqueue(kind="completed", payload={"n": 1}, dedup_key="job-a:completed")
    due = store.outbox.due_notifications()
    assert [n.dedup_key for n in due] == ["job-a:1:running", "job-a:completed"]
    assert due[0].payload == {"text": "running"} and due[0].channel == "C_ML" and due[0].attempts == 0

    store.outbox.defer(due[0].id, until=clock.now() + timedelta(seconds=30), error="ratelimited")
    assert [n.dedup_key for n in store.outbox.due_notifications()] == ["job-a:completed"]
    store.outbox.mark_delivered(due[1].id)
    assert store.outbox.due_notifications() == []
    clock.advance(30)
    again = store.outbox.due_notifications(limit=5)
    assert [(n.dedup_key, n.attempts) for n in again] == [("job-a:1:running", 1)]
    store.outbox.mark_delivered(again[0].id)
    assert store.outbox.due_notifications() == []
    # Delivered stays delivered: the same event cannot be queued a second time.
    assert not store.outbox.enqueue(kind="completed", payload={}, dedup_key="job-a:completed")


def test_two_processes_delivering_from_one_store_never_both_get_a_message(
    database_url: str, clock: FakeClock
) -> None:
    first, second = Store(database_url, clock=clock), Store(database_url, clock=clock)
    first.migrate()
    first.outbox.enqueue(kind="state", payload={"text": "running"}, dedup_key="job-a:1:running")
    assert [n.dedup_key for n in first.outbox.due_notifications(claim_seconds=300)] == ["job-a:1:running"]
    assert second.outbox.due_notifications(claim_seconds=300) == []  # claimed by the first
    clock.advance(301)  # the first died without delivering: its claim runs out, nothing is dropped
    (retaken,) = second.outbox.due_notifications(claim_seconds=300)
    second.outbox.mark_delivered(retaken.id)
    clock.advance(301)
    assert first.outbox.due_notifications(claim_seconds=300) == []


def test_meta_get_and_set(store: Store) -> None:
    assert store.get_meta("watcher.last_poll") is None
    store.set_meta("watcher.last_poll", "a")
    store.set_meta("watcher.last_poll", "b")
    assert store.get_meta("watcher.last_poll") == "b"


def test_state_survives_a_new_store_on_the_same_database(database_url: str, clock: FakeClock) -> None:
    url = database_url
    first = Store(url, clock=clock)
    first.migrate()
    new_lineage(first)
    first.dispose()
    second = Store(url, clock=clock)
    second.migrate()
    assert second.get_lineage("distilbert-spot-0001").spec == spot_spec()
    second.dispose()


def test_in_memory_url_works_for_quick_tools(clock: FakeClock) -> None:
    store = Store("sqlite://", clock=clock)
    store.migrate()
    new_lineage(store)
    assert store.get_lineage("distilbert-spot-0001").status is LineageStatus.PENDING


def test_naive_datetimes_are_refused(store: Store) -> None:
    with pytest.raises(Exception, match="aware"):
        store.attempts_created_since(datetime(2026, 1, 1))

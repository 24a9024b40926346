"""The store on a real SQLite file: migrations, lineages and attempts, guarded transitions, audit, outbox, meta."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Integer, String, Table, inspect, select

from jobs.clock import FakeClock
from jobs.errors import NotFound
from jobs.planning.presets import preset_fields
from jobs.planning.spec import JobSpec, spec_from_fields
from jobs.records import Actor, AttemptStatus, LineageStatus
from jobs.store import schema as store_schema
from jobs.store.store import DuplicateLineage, Store

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")


def spot_spec() -> JobSpec:
    return spec_from_fields(preset_fields("distilbert-spot"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc))


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'state' / 'trainbot.db'}", clock=clock)
    s.migrate()
    return s


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
    store.migrate()
    store.migrate()
    assert path.exists()
    tables = set(inspect(store.engine).get_table_names())
    assert {"lineages", "attempts", "audit", "outbox", "meta", "schema_version"} <= tables
    assert store.schema_versions() == [1, 9, 20, 30]  # core, schedules, endpoints, job runs
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"


def test_a_later_step_migrates_an_older_database_once(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    Store(url, clock=clock).migrate()  # a database at version 1
    extra = Table(
        "extra_things",
        store_schema.metadata,
        Column("name", String(20), primary_key=True),
        Column("n", Integer),
    )
    calls: list[int] = []

    def step(conn: object) -> None:
        calls.append(1)
        extra.create(conn)  # type: ignore[arg-type]

    monkeypatch.setitem(store_schema._MIGRATIONS, 2, store_schema.Migration(2, "extra things", step))
    try:
        store = Store(url, clock=clock)
        store.migrate()
        store.migrate()
        assert store.schema_versions() == [1, 2, 9, 20, 30]
        assert calls == [1]
        with store.engine.begin() as conn:
            conn.execute(extra.insert().values(name="a", n=1))
            assert conn.execute(select(extra.c.n)).scalar_one() == 1
    finally:
        store_schema.metadata.remove(extra)


def test_register_migration_refuses_a_taken_version() -> None:
    with pytest.raises(ValueError, match="already taken"):
        store_schema.register_migration(1, "something else", lambda conn: None)
    store_schema.register_migration(1, "core tables", lambda conn: None)  # same step again: no-op
    assert [m.version for m in store_schema.migrations()][0] == 1


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
    assert store.transition_lineage(lid, [LineageStatus.PENDING], LineageStatus.RUNNING)
    assert not store.transition_lineage(lid, [LineageStatus.PENDING], LineageStatus.FAILED)
    clock.advance(60)
    assert store.transition_lineage(
        lid,
        [LineageStatus.RUNNING],
        LineageStatus.RELAUNCHING,
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

    assert store.transition_attempt(job.job_name, [AttemptStatus.LAUNCHING], AttemptStatus.RUNNING)
    assert not store.transition_attempt(job.job_name, [AttemptStatus.LAUNCHING], AttemptStatus.RUNNING)
    assert store.get_attempt(job.job_name).ended_at is None
    clock.advance(30)
    assert store.transition_attempt(
        job.job_name,
        [AttemptStatus.RUNNING],
        AttemptStatus.FAILED,
        failure_reason="CapacityError: no spot capacity",
    )
    ended = store.get_attempt(job.job_name)
    assert ended.status is AttemptStatus.FAILED and ended.ended_at == clock.now()
    assert ended.failure_reason == "CapacityError: no spot capacity"
    with pytest.raises(TypeError):
        store.transition_lineage(lid, [LineageStatus.RELAUNCHING], LineageStatus.RUNNING, status="x")
    with pytest.raises(TypeError):
        store.transition_attempt(job.job_name, [AttemptStatus.FAILED], AttemptStatus.RUNNING, colour="red")


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
    store.transition_attempt("job-0-1", [AttemptStatus.LAUNCHING], AttemptStatus.LAUNCH_FAILED)
    store.transition_lineage("job-0", [LineageStatus.PENDING], LineageStatus.FAILED)
    store.transition_attempt("job-1-1", [AttemptStatus.LAUNCHING], AttemptStatus.RUNNING)
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


def test_estimated_spend_counts_today_and_skips_refused_launches(store: Store, clock: FakeClock) -> None:
    day = datetime(2026, 3, 1, tzinfo=timezone.utc)
    new_lineage(store, "yesterday")  # created at noon on the 1st
    clock.advance(86400)
    for lid in ("ran", "refused", "pending"):
        new_lineage(store, lid)
    store.add_attempt("ran", number=1, instance_type="ml.p3.2xlarge", spot=True)
    store.add_attempt("refused", number=1, instance_type="ml.p3.2xlarge", spot=True)
    store.transition_attempt("refused-1", [AttemptStatus.LAUNCHING], AttemptStatus.LAUNCH_FAILED)
    store.transition_lineage("refused", [LineageStatus.PENDING], LineageStatus.FAILED)
    assert store.estimated_spend_since(day + timedelta(days=1)) == pytest.approx(7.0)
    assert store.estimated_spend_since(day) == pytest.approx(10.5)


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
    assert store.enqueue(
        kind="state",
        payload={"text": "running"},
        dedup_key="job-a:1:running",
        lineage_id="job-a",
        channel="C_ML",
    )
    assert not store.enqueue(kind="state", payload={"text": "again"}, dedup_key="job-a:1:running")
    assert store.enqueue(kind="completed", payload={"n": 1}, dedup_key="job-a:completed")
    due = store.due_notifications()
    assert [n.dedup_key for n in due] == ["job-a:1:running", "job-a:completed"]
    assert due[0].payload == {"text": "running"} and due[0].channel == "C_ML" and due[0].attempts == 0

    store.defer(due[0].id, until=clock.now() + timedelta(seconds=30), error="ratelimited")
    assert [n.dedup_key for n in store.due_notifications()] == ["job-a:completed"]
    store.mark_delivered(due[1].id)
    assert store.due_notifications() == []
    clock.advance(30)
    again = store.due_notifications(limit=5)
    assert [(n.dedup_key, n.attempts) for n in again] == [("job-a:1:running", 1)]
    store.mark_delivered(again[0].id)
    assert store.due_notifications() == []
    # Delivered stays delivered: the same event cannot be queued a second time.
    assert not store.enqueue(kind="completed", payload={}, dedup_key="job-a:completed")


def test_two_processes_delivering_from_one_store_never_both_get_a_message(
    tmp_path: Path, clock: FakeClock
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    first, second = Store(url, clock=clock), Store(url, clock=clock)
    first.migrate()
    first.enqueue(kind="state", payload={"text": "running"}, dedup_key="job-a:1:running")
    assert [n.dedup_key for n in first.due_notifications(claim_seconds=300)] == ["job-a:1:running"]
    assert second.due_notifications(claim_seconds=300) == []  # claimed by the first
    clock.advance(301)  # the first died without delivering: its claim runs out, nothing is dropped
    (retaken,) = second.due_notifications(claim_seconds=300)
    second.mark_delivered(retaken.id)
    clock.advance(301)
    assert first.due_notifications(claim_seconds=300) == []


def test_meta_get_and_set(store: Store) -> None:
    assert store.get_meta("watcher.last_poll") is None
    store.set_meta("watcher.last_poll", "a")
    store.set_meta("watcher.last_poll", "b")
    assert store.get_meta("watcher.last_poll") == "b"


def test_state_survives_a_new_store_on_the_same_file(tmp_path: Path, clock: FakeClock) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    first = Store(url, clock=clock)
    first.migrate()
    new_lineage(first)
    first.dispose()
    second = Store(url, clock=clock)
    second.migrate()
    assert second.get_lineage("distilbert-spot-0001").spec == spot_spec()


def test_in_memory_url_works_for_quick_tools(clock: FakeClock) -> None:
    store = Store("sqlite://", clock=clock)
    store.migrate()
    new_lineage(store)
    assert store.get_lineage("distilbert-spot-0001").status is LineageStatus.PENDING


def test_naive_datetimes_are_refused(store: Store) -> None:
    with pytest.raises(Exception, match="aware"):
        store.estimated_spend_since(datetime(2026, 1, 1))

"""The store's schema under Alembic: a migrated database is exactly what the code declares (no drift), a store
made by the first release upgrades in place with nothing lost, bots starting together migrate once, and a
database a newer bot migrated is left alone. On SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import logging
import multiprocessing
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect, text

from jobs import lineage as moves
from jobs.clock import SystemClock
from jobs.endpoints.store import EndpointStore
from jobs.lineage import AttemptStatus, LineageStatus
from jobs.store.migrate import head_revision, newest_on_disk, revisions, schema_drift, upgrade
from jobs.store.migrations.__main__ import main as new_revision
from jobs.store.schema import (
    preferences_table,
    read_transaction,
    recipes_table,
    schedule_runs,
    scheduler_lease,
    schedules_table,
    subscriptions_table,
)
from jobs.store.store import Store
from tests.support.clock import FakeClock

LEGACY_DB = Path(__file__).parent / "data" / "store_7cf39cc.db"  # made by data/make_store_7cf39cc.py


def test_a_database_migrated_to_head_is_what_the_code_declares(empty_database_url: str, clock: FakeClock) -> None:
    store = Store(empty_database_url, clock=clock)
    store.migrate()
    assert schema_drift(store.engine) == []
    store.dispose()


def test_revisions_are_numbered_in_order_so_the_start_up_shortcut_reads_the_head_from_the_file_names() -> None:
    assert revisions() == [f"{n:04d}" for n in range(1, len(revisions()) + 1)]
    assert newest_on_disk() == head_revision()


def test_a_start_on_a_store_at_head_does_not_import_alembic(tmp_path: Path) -> None:
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'trainbot.db'}"
    Store(url, clock=SystemClock()).migrate()
    probe = ("import sys; from jobs.clock import SystemClock; from jobs.store.store import Store; "
             f"assert Store({url!r}, clock=SystemClock()).migrate() == []; print('alembic' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_revision_helper_has_nothing_to_write_while_code_and_revisions_agree(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert new_revision(["nothing changed"]) == 0
    assert "nothing to write" in capsys.readouterr().out
    assert new_revision([]) == 2


def test_a_store_made_by_the_first_release_upgrades_in_place_with_nothing_lost(tmp_path: Path) -> None:
    path = tmp_path / "trainbot.db"
    shutil.copy(LEGACY_DB, path)
    store = Store(f"sqlite:///{path}", clock=SystemClock())
    assert store.schema_revision() is None  # the first release kept its own schema_version table
    assert store.migrate() == revisions()
    assert store.schema_revision() == head_revision()
    assert schema_drift(store.engine) == []
    assert "schema_version" not in inspect(store.engine).get_table_names()

    spot = store.get_lineage("spot-0001")
    assert spot.status is LineageStatus.RUNNING and spot.request_id == "req-1"
    assert (spot.channel, spot.message_ts) == ("C_ML", "1700000000.000100")
    assert spot.spec.hyperparameters["note"] == "legacy"
    first, second = spot.attempts
    assert (first.status, first.secondary_status, first.billable_seconds, first.metrics) == (
        AttemptStatus.STOPPED, "MaxWaitTimeExceeded", 42, {"loss": 0.5})
    assert (second.number, second.instance_type, second.resumed_from_step) == (2, "ml.p3.8xlarge", 10)
    assert first.created_at == datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
    assert "spot-0001:relaunched:2" in [n.dedup_key for n in store.outbox.due_notifications(limit=100)]
    assert store.get_meta("watcher.cursor.fake") == "2026-03-01T12:00:00+00:00"
    assert len(store.audit_log(target="spot-0001")) >= 1
    assert store.get_lineage("nightly-0002").schedule == "nightly"
    endpoint = EndpointStore(store, clock=SystemClock()).get("bert-0003-ep")
    assert endpoint.lineage_id == "bert-0003"
    with read_transaction(store.engine) as conn:
        assert conn.execute(schedules_table.select()).one().cron == "0 2 * * *"
        assert conn.execute(schedule_runs.select()).one().lineage_id == "nightly-0002"
        assert conn.execute(scheduler_lease.select()).one().holder == "legacy-host:1"
        assert conn.execute(text("SELECT count(*) FROM apscheduler_jobs")).scalar_one() == 1
    # The new code writes to it as to a new store.
    assert store.get_lineage("spot-0001").launch_plan is None  # recorded before plans were kept
    assert store.transition_attempt("spot-0001-2", moves.ATTEMPT_CONFIRMED)
    assert store.migrate() == []
    store.dispose()


def test_a_store_that_ran_mains_later_hand_written_steps_keeps_what_they_made(tmp_path: Path) -> None:
    """Before Alembic, main added hand-written steps 16 (recipes), 18 (notification tables), 30
    (lineages.launch_plan) and 31 (attempts.steps_redone). A store that ran them (made here exactly as those
    steps made it: the same tables, the same ALTERs) upgrades with their rows kept."""
    path = tmp_path / "trainbot.db"
    shutil.copy(LEGACY_DB, path)
    legacy = create_engine(f"sqlite:///{path}")
    with legacy.begin() as conn:
        recipes_table.create(conn)
        subscriptions_table.create(conn)
        preferences_table.create(conn)
        conn.execute(text("ALTER TABLE lineages ADD COLUMN launch_plan JSON"))
        conn.execute(text("ALTER TABLE attempts ADD COLUMN steps_redone INTEGER"))
        for version, name in ((16, "recipes table"), (18, "notification subscriptions"),
                              (30, "lineage launch plan"), (31, "steps redone after a resume")):
            conn.execute(text("INSERT INTO schema_version VALUES (:v, :n, '2026-11-30 12:00:00.000000')"),
                         {"v": version, "n": name})
        conn.execute(text("""UPDATE lineages SET launch_plan = '{"estimator": {"instance_type": "ml.p3.2xlarge"}}'
                             WHERE id = 'spot-0001'"""))
        conn.execute(text("UPDATE attempts SET steps_redone = 7 WHERE job_name = 'spot-0001-2'"))
        conn.execute(text("INSERT INTO recipes VALUES ('squad-nightly', 'bert-squad spot=yes', 'U_ALICE', 'slack', "
                          "'2026-11-30 12:00:00.000000', '2026-11-30 12:00:00.000000')"))
    legacy.dispose()
    store = Store(f"sqlite:///{path}", clock=SystemClock())
    assert store.migrate() == revisions()
    assert schema_drift(store.engine) == []
    assert store.get_lineage("spot-0001").launch_plan == {"estimator": {"instance_type": "ml.p3.2xlarge"}}
    assert store.get_lineage("nightly-0002").launch_plan is None
    assert store.get_attempt("spot-0001-2").steps_redone == 7
    with read_transaction(store.engine) as conn:
        assert conn.execute(recipes_table.select()).one().text == "bert-squad spot=yes"
    store.dispose()


def _migrate_in_a_process(url: str, barrier: Any, results: Any) -> None:
    store = Store(url, clock=SystemClock())
    barrier.wait()
    try:
        results.put(("ok", store.migrate()))
    except Exception as exc:  # the race lost without a lock: report it instead of hanging the test
        results.put(("error", repr(exc)))
    finally:
        store.dispose()


@pytest.mark.parametrize("processes", [3])
def test_bots_starting_together_migrate_once(empty_database_url: str, processes: int) -> None:
    database_url = empty_database_url
    ctx = multiprocessing.get_context("fork")  # each builds its own engine after the fork
    barrier, results = ctx.Barrier(processes, timeout=60), ctx.Queue()
    workers = [ctx.Process(target=_migrate_in_a_process, args=(database_url, barrier, results))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert [kind for kind, _ in outcomes] == ["ok"] * processes, outcomes
    applied = sorted((revs for _, revs in outcomes), key=len)
    assert applied == [[]] * (processes - 1) + [revisions()]
    store = Store(database_url, clock=SystemClock())
    assert store.schema_revision() == head_revision() and schema_drift(store.engine) == []
    store.dispose()


def test_a_database_a_newer_bot_migrated_is_left_alone(
    empty_database_url: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(empty_database_url, clock=clock)
    store.migrate()
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with caplog.at_level(logging.WARNING, logger="jobs.store.migrate"):
        assert upgrade(store.engine) == []
    assert "newer than this trainbot knows" in caplog.text
    assert store.schema_revision() == "9999"
    assert store.list_lineages() == []  # and the store still works
    store.dispose()

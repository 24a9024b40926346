"""`trainbot db current` and `trainbot db upgrade` as an operator runs them, on SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from jobs.store.migrate import head_revision, revisions

ROOT = Path(__file__).resolve().parents[2]


def trainbot(*args: str, url: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINBOT_HOME": str(home), "TRAINBOT_DATABASE_URL": url}
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_current_then_upgrade_then_current(empty_database_url: str, tmp_path: Path) -> None:
    before = trainbot("db", "current", url=empty_database_url, home=tmp_path)
    assert before.returncode == 0, before.stderr
    assert "no revision yet" in before.stdout
    upgraded = trainbot("db", "upgrade", url=empty_database_url, home=tmp_path)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"applied {', '.join(revisions())}" in upgraded.stdout
    again = trainbot("db", "upgrade", url=empty_database_url, home=tmp_path)
    assert "nothing to apply" in again.stdout
    after = trainbot("db", "current", url=empty_database_url, home=tmp_path)
    assert f"at revision {head_revision()}, the newest" in after.stdout


def test_an_unreachable_store_is_one_line_without_its_password(tmp_path: Path) -> None:
    from tests.support.moto_server import free_port

    url = f"postgresql+psycopg://bot:s3cret@127.0.0.1:{free_port()}/trainbot"
    done = trainbot("db", "current", url=url, home=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith("trainbot: cannot reach the store at postgresql+psycopg://bot:***@127.0.0.1")
    assert len(done.stderr.strip().splitlines()) == 1 and "s3cret" not in done.stderr + done.stdout


def test_a_postgres_url_without_its_driver_names_the_extra(tmp_path: Path) -> None:
    done = trainbot("db", "upgrade", url="postgresql+pg8000://bot@127.0.0.1/trainbot", home=tmp_path)
    assert done.returncode == 1 and "pip install 'trainbot[postgres]'" in done.stderr

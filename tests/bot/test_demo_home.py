"""Issue 35, item 3: the installed `trainbot demo` runs in a home of its own, really training the three recipes
locally. The person's TRAINBOT_HOME (and their TRAINBOT_DATABASE_URL) holds a schedule due every minute: it
does not fire during the demo, nothing is written to their store, and the demo's table reports its own three
jobs and exits 0 when they completed."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest

from jobs.backends.local.offline_assets import LocalAssets
from tests.bot.test_console_script import trainbot_command
from tests.support.assets import seed_assets


def lineage_count(database: Path) -> int:
    with sqlite3.connect(database) as conn:
        return int(conn.execute("select count(*) from lineages").fetchone()[0])


@pytest.mark.timeout(900)
def test_demo_runs_in_its_own_home_and_reports_its_own_jobs(tmp_path: Path, local_assets: LocalAssets) -> None:
    home = seed_assets(tmp_path / "home", local_assets)
    database = tmp_path / "team" / "trainbot.db"
    database.parent.mkdir()
    env = {**os.environ, "TRAINBOT_HOME": str(home), "TRAINBOT_DATABASE_URL": f"sqlite:///{database}",
           "TRAINBOT_MIN_SCHEDULE_MINUTES": "0", "PYTHONIOENCODING": "utf-8", "TMPDIR": str(tmp_path)}
    added = subprocess.run([str(trainbot_command()), "schedule", "add", "every-minute", "cron=* * * * *",
                            "distilbert-spot"], env=env, capture_output=True, text=True, timeout=120, check=False)
    assert added.returncode == 0, added.stderr

    demo = subprocess.run([str(trainbot_command()), "demo"], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=840, check=False)

    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-2000:]
    where = re.search(r"^demo home: (\S+) ", demo.stderr, re.MULTILINE)
    assert where is not None, demo.stderr
    demo_home = Path(where.group(1))
    assert demo_home.parent == tmp_path and (demo_home / "trainbot.db").is_file()
    assert lineage_count(database) == 0  # the person's schedule never fired, nothing was launched there
    assert not (home / "trainbot.db").exists() and not (home / "local-jobs").exists()
    table = demo.stdout.rstrip().split("\n\n")[-2].splitlines()
    rows = {row.split()[0]: row for row in table[2:]}
    assert set(rows) == {"bert-squad", "roberta-mnli", "distilbert-spot"}
    for preset, row in rows.items():
        assert row.split()[1].startswith(f"{preset}-") and "(" not in row.split()[1], row  # its own, completed
    assert lineage_count(demo_home / "trainbot.db") == 3

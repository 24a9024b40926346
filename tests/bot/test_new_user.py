"""The bot as a new user first meets it: an empty folder, no Slack, no AWS, no hub settings at all.

The rest of the suite runs with HF_HUB_OFFLINE=1 (tests/conftest.py); a new user's shell has nothing of
the kind, and the default state folder is the relative `./.trainbot`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jobs.backends.local.offline_assets import LocalAssets
from jobs.settings import Settings
from tests.support.assets import seed_assets
from tests.support.environment import outside_env

TRAINBOT = Path(sys.executable).with_name("trainbot")


def test_a_fresh_folder_trains_bert_squad_on_the_tiny_model(tmp_path: Path) -> None:
    env = outside_env("HF_")
    env["HF_HOME"] = str(tmp_path / "hf")  # still never the user's cache
    (tmp_path / "script.txt").write_text("/train bert-squad\nlaunch\n")
    result = subprocess.run(
        [str(TRAINBOT), "console", "--script", "script.txt"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "local: tiny BERT" in result.stdout  # the plan card says how it is scaled down
    assert "exact_match" in result.stdout and "completed" in result.stdout
    assert (tmp_path / ".trainbot" / "trainbot.db").exists()


def test_a_relative_home_is_made_absolute(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRAINBOT_HOME", raising=False)
    settings = Settings()
    assert settings.trainbot_home == tmp_path.resolve() / ".trainbot"
    assert not settings.local_uses_hub


def test_launch_prints_the_lineage_id_alone_even_on_first_use(tmp_path: Path) -> None:
    # First use builds the tiny model in-process; none of that may reach stdout, which scripts read.
    env = outside_env()
    run = lambda *args: subprocess.run(  # noqa: E731
        [str(TRAINBOT), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    launched = run("launch", "distilbert-spot")
    assert launched.returncode == 0, launched.stderr
    assert launched.stdout.count("\n") == 1 and launched.stdout.startswith("distilbert-spot-")
    # The job is not left running past the test. A local job is capped at 60 steps, which under load can end
    # before `stop` has started (a CI run): then the stop is refused, saying so.
    stopped = run("stop", launched.stdout.strip())
    assert stopped.returncode == 0 or "has already ended (Completed)" in stopped.stderr, stopped.stderr


def test_a_job_launched_from_the_shell_is_followed_by_status_alone(tmp_path: Path, local_assets: LocalAssets) -> None:
    """`trainbot launch` then `trainbot status`, nothing else running: status refreshes the job itself until
    it ends (never "running (so far)" forever), shows where its checkpoints really are, and labels the
    cost of a local run as what SageMaker would bill for it."""
    import json
    import time

    env = outside_env()
    env["TRAINBOT_HOME"] = str(seed_assets(tmp_path / "home", local_assets))
    run = lambda *args: subprocess.run(  # noqa: E731
        [str(TRAINBOT), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    launched = run("launch", "distilbert-spot", "max_steps=6", "checkpoint_minutes=0.01")
    assert launched.returncode == 0, launched.stderr
    lineage = launched.stdout.strip()
    report: dict = {}
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        shown = run("status", lineage, "--json")
        assert shown.returncode == 0, shown.stderr
        report = json.loads(shown.stdout)
        assert report["watch"]["refreshed"] or not report["partial"]
        if not report["partial"]:
            break
        time.sleep(1)
    assert report["status"] == "completed", report
    text = run("status", lineage).stdout
    [checkpoints] = [line.split(" ", 3)[-1] for line in text.splitlines() if line.startswith("  checkpoints ")]
    assert Path(checkpoints).is_dir() and "TRAINBOT_BUCKET" not in text, text
    assert "what SageMaker would bill for this run (a local run is free)" in text

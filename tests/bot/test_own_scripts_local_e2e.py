"""Scripts written as the Hugging Face SageMaker examples write them (tests/support/own_scripts.py), shipped as
they are in a git repository the test makes, run with the installed `trainbot` on the local backend: on the
image's runtime (transformers 4.28.1, datasets, evaluate, scikit-learn; the product's builder, once a session),
with their two save_to_disk channels, their offline metric, their own --model_id. The spot one is reclaimed
mid-epoch with `trainbot capacity`, relaunched by the watcher, and resumes from the checkpoint its Trainer (with
the spot entry's clock) saved; the report and the thread say from which step and how many steps were redone, and
its final metrics are the evaluation the script printed last.

Each command is a fresh process, as in a shell; the state between them lives in TRAINBOT_HOME.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jobs.backends.local.offline_assets import ensure_local_assets, write_imdb_jsonl
from jobs.backends.local.runtime import ImageRuntimes, Runtime
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from tests.support.environment import outside_env
from tests.support.git_repos import make_repo
from tests.support.own_scripts import (
    INSISTS_ON_FP16,
    LOAD_METRIC_CLASSIFIER,
    SPOT_CLASSIFIER,
    printed_final,
    save_channels,
    write_metric,
)
from tests.support.runtimes import CACHE_HOME, link_runtimes, ran_on_image_runtime

TRAINBOT = Path(sys.executable).with_name("trainbot")
JOB_TIMEOUT_S = 420


def trainbot(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINBOT), *args], env=env, capture_output=True, text=True, timeout=300, check=False)


class Team:
    """A home, the team's data (channels, tiny model, metric) under an allowed folder, and its repository."""

    def __init__(self, tmp_path: Path, runtime: Runtime, script: str, *, load_metric: bool = False,
                 batch: int = 16, examples: int = 480) -> None:
        self.home = tmp_path / "home"
        self.batch, self.examples = batch, examples
        link_runtimes(self.home)
        data = tmp_path / "data"
        runtime_assets = ensure_local_assets(ImageRuntimes(CACHE_HOME).assets(runtime))
        self.model = data / "tiny-bert"
        shutil.copytree(runtime_assets.model_dir, self.model)
        jsonl = write_imdb_jsonl(data / "raw", examples + 40, seed=7)
        self.train, self.test = save_channels(runtime.python, jsonl, data / "imdb", train=examples, test=32)
        self.metric = write_metric(data / "accuracy", for_load_metric=load_metric)
        self.repo = make_repo(tmp_path / "git", "team-models")
        self.commit = self.repo.commit({"scripts/train.py": script})
        self.env = outside_env()
        self.env.update(TRAINBOT_HOME=str(self.home), TRAINBOT_BACKEND="local", TRAINBOT_CODE_SOURCES=self.repo.url,
                        TRAINBOT_LOCAL_DATA_DIRS=str(data), TRAINBOT_RELAUNCH_BACKOFF_SECONDS="0")

    def words(self, *extra: str) -> list[str]:
        return [f"code=git+{self.repo.url}@main", "entry=scripts/train.py", f"train_data={self.train}",
                f"test_data={self.test}", f"hp.model_id={self.model}", f"hp.metric={self.metric}",
                f"hp.train_batch_size={self.batch}", "hp.learning_rate=0.002", *extra]

    def launch(self, *extra: str) -> str:
        launched = trainbot(self.env, "launch", *self.words(*extra))
        assert launched.returncode == 0, launched.stderr
        return launched.stdout.strip().splitlines()[-1]

    def report(self, lineage: str) -> dict[str, Any]:
        status = trainbot(self.env, "status", lineage, "--json")
        assert status.returncode == 0, status.stderr
        report: dict[str, Any] = json.loads(status.stdout)
        return report

    def until_ended(self, lineage: str) -> dict[str, Any]:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        report = self.report(lineage)
        while report["partial"] and time.monotonic() < deadline:
            assert trainbot(self.env, "watch", "--once").returncode == 0
            report = self.report(lineage)
            time.sleep(1)
        return report

    def log(self, job: str) -> str:
        return (self.home / "local-jobs" / job / "logs" / "train.log").read_text()

    def checkpoints(self, lineage: str) -> Path:
        found = [p for p in (self.home / "checkpoints").rglob("checkpoints") if lineage in str(p)]
        return found[0] if found else self.home / "missing"

    def thread(self) -> list[str]:
        with sqlite3.connect(self.home / "trainbot.db") as db:
            return [json.loads(row[0]).get("text", "") for row in db.execute("SELECT payload FROM outbox")]


def _saved(folder: Path) -> list[int]:
    return sorted(int(p.parent.name.split("-")[1]) for p in folder.glob("checkpoint-*/trainer_state.json"))


def _furthest(folder: Path) -> int:
    try:
        return int(json.loads((folder / "trainbot-furthest-step.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return 0


def _as_a_kill_mid_save_leaves(checkpoints: Path, saved: int, reached: int) -> str:
    """checkpoint-<reached> as a reclaim during its save would leave it (weights, no trainer_state.json), owned as
    the job's own files are; unless the kill really left one. The script's stock get_last_checkpoint picks it: the
    next attempt must resume from checkpoint-<saved> all the same (issue 31, item 5)."""
    torn = checkpoints / f"checkpoint-{reached}"
    if not torn.exists():
        shutil.copytree(checkpoints / f"checkpoint-{saved}", torn, ignore=shutil.ignore_patterns("trainer_state.json"))
        owner = checkpoints.stat()
        for path in (torn, *torn.rglob("*")):
            os.chown(path, owner.st_uid, owner.st_gid)
    assert not (torn / "trainer_state.json").exists()
    return torn.name


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_spot_script_is_reclaimed_mid_epoch_and_resumes_from_its_checkpoint(
    image_runtime: Runtime, tmp_path: Path
) -> None:
    # Epochs of 480 small steps: longer than the 3 s clock however fast this machine trains, so the clock
    # saves inside an epoch (each epoch's own save restarts it).
    epochs = 2
    team = Team(tmp_path, image_runtime, SPOT_CLASSIFIER, batch=4, examples=1920)
    clock = "checkpoint_minutes=10"  # saves on the clock are asked for (issue 32): the entry adds them
    plan = trainbot(team.env, "plan", *team.words("spot=yes", clock, f"hp.epochs={epochs}", "hp.fp16=false"))
    assert plan.returncode == 0, plan.stderr
    assert f"Channels: train {team.train}, test {team.test}" in plan.stdout
    assert "every 10 min, a save trainbot's entry adds to your script's Trainer" in plan.stdout
    assert "model_name_or_path" not in plan.stdout and "save_steps" not in plan.stdout

    lineage = team.launch("spot=yes", clock, f"hp.epochs={epochs}", "hp.fp16=false")
    checkpoints = team.checkpoints(lineage)
    steps_per_epoch = team.examples // team.batch
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:  # a complete checkpoint, and training past it inside an epoch
        checkpoints = team.checkpoints(lineage)
        saved, reached = _saved(checkpoints), _furthest(checkpoints)
        from_clock = any(step % steps_per_epoch for step in saved)
        if from_clock and reached > saved[-1] and reached % steps_per_epoch:
            break
        time.sleep(0.05)
    taken = trainbot(team.env, "capacity", lineage)
    assert taken.returncode == 0, taken.stderr + team.log(f"{lineage}-1")[-3000:]
    saved_at_kill, reached_at_kill = _saved(checkpoints)[-1], _furthest(checkpoints)
    assert 0 < saved_at_kill < reached_at_kill < epochs * steps_per_epoch
    assert any(step % steps_per_epoch for step in _saved(checkpoints)), "no save came from the clock"
    torn = _as_a_kill_mid_save_leaves(checkpoints, saved_at_kill, reached_at_kill)

    report = team.until_ended(lineage)
    second = team.log(f"{lineage}-2")
    assert report["status"] == "completed", second[-3000:]
    first, resumed = report["attempts"]
    assert first["reason"] == "MaxWaitTimeExceeded"
    assert resumed["resumed_from_step"] == saved_at_kill
    assert resumed["steps_redone"] == reached_at_kill - saved_at_kill
    # The script's own default (--output_dir /opt/ml/checkpoints): the lineage's checkpoint folder is there, in
    # the sandbox as in SageMaker's container, with what the first attempt saved.
    assert f"continuing training from checkpoint /opt/ml/checkpoints/checkpoint-{saved_at_kill}" in second
    assert f"[checkpoint] ignoring incomplete /opt/ml/checkpoints/{torn}" in second
    assert any(f"{lineage}-2 resumed from the checkpoint at step {saved_at_kill}" in line and
               f"{reached_at_kill - saved_at_kill} steps trained after it" in line for line in team.thread())
    text = trainbot(team.env, "status", lineage).stdout
    assert f"resumed at step {saved_at_kill} ({reached_at_kill - saved_at_kill} steps redone)" in text
    # The final metrics are the evaluation the script printed last ("eval_accuracy = 0.9"), not an epoch's.
    assert report["metrics"]["eval_accuracy"] == pytest.approx(printed_final(second, "eval_accuracy"))
    assert report["metrics"]["eval_loss"] == pytest.approx(printed_final(second, "eval_loss"))
    assert ran_on_image_runtime(team.home / "local-jobs" / f"{lineage}-2", second)  # the image's packages ran it
    # The loss curve: training loss at the real steps it was logged at (logging_steps=5), nothing else.
    backend = LocalBackend(team.home, clock=SystemClock())
    loss = backend.metric_series(f"{lineage}-2")["loss"]
    assert loss and all(point.x % 5 == 0 and saved_at_kill < point.x <= epochs * steps_per_epoch for point in loss)
    assert (team.home / "local-jobs" / f"{lineage}-2" / "model" / "config.json").is_file()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_datasets_load_metric_script_trains_on_the_image_runtime(image_runtime: Runtime, tmp_path: Path) -> None:
    team = Team(tmp_path, image_runtime, LOAD_METRIC_CLASSIFIER, load_metric=True)
    lineage = team.launch("hp.epochs=1", "hp.fp16=false")
    report = team.until_ended(lineage)
    log = team.log(f"{lineage}-1")
    assert report["status"] == "completed", log[-3000:]
    assert report["metrics"]["eval_accuracy"] == pytest.approx(printed_final(log, "eval_accuracy"))
    assert report["task"] is None and report["model"] == "the script's own model"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_script_that_insists_on_fp16_fails_with_one_sentence(image_runtime: Runtime, tmp_path: Path) -> None:
    team = Team(tmp_path, image_runtime, INSISTS_ON_FP16)
    lineage = team.launch("hp.epochs=1", "hp.fp16=false")  # type=bool reads the toolkit's "False" as True
    report = team.until_ended(lineage)
    assert report["status"] == "failed"
    reason = report["attempts"][0]["reason"]
    assert reason.startswith("AlgorithmError: the script turned on fp16 (half precision), which needs a GPU")
    assert "argparse type=bool" in reason and "\n" not in reason

"""`trainbot parse` and `trainbot plan` through the installed command: exit codes, stderr, JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TRAINBOT = Path(sys.executable).parent / "trainbot"
pytestmark = pytest.mark.skipif(not TRAINBOT.exists(), reason="the trainbot command is not installed in this venv")


def trainbot(*args: str, home: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRAINBOT_HOME": str(home), "TRAINBOT_BACKEND": "local", **extra_env}
    return subprocess.run([str(TRAINBOT), *args], capture_output=True, text=True, env=env, timeout=120)


def test_parse_prints_the_spec(tmp_path: Path) -> None:
    done = trainbot("parse", "bert-squad", "instances=4", "hp.run_name=two words", home=tmp_path)
    assert done.returncode == 0, done.stderr
    spec = json.loads(done.stdout)
    assert (spec["instance_count"], spec["distribution"], spec["max_wait"]) == (4, "data", None)
    assert spec["hyperparameters"]["run_name"] == "two words"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["parse", "bert-sqad"], "did you mean bert-squad"),
        (["parse", "bert-squad", "instanses=2"], "did you mean instances"),
        (["parse"], "Type a preset"),
        (["plan", "distilbert-spot", "max_wait=1m"], "max_wait"),
        (["parse", "hp.sagemaker_mpi_custom_mpi_options=-x"], "hp.sagemaker_mpi_custom_mpi_options is refused"),
        (["parse", "distilbert-spot", "hp.learning_rat=0.1"], "did you mean hp.learning_rate?"),
        (["parse", "distilbert-spot", "hp.run_name=a\x1bb"], "control character (U+001B)"),  # argv holds no NUL
        (["plan", "distilbert-spot", "train_data=/etc"], "train_data='/etc' is outside the folders local jobs may read"),
        (["plan", "bert-squad", "model=~/.ssh"], "TRAINBOT_LOCAL_DATA_DIRS"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], words: str) -> None:
    done = trainbot(*args, home=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert words in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_plan_text(tmp_path: Path) -> None:
    done = trainbot("plan", "bert-squad", home=tmp_path)
    assert done.returncode == 0, done.stderr
    for words in ("data parallel", "2 x ml.p3.16xlarge", "/hour", "worst case $", "Forecast: about "):
        assert words in done.stdout


ARTICLE = [
    # (the command, the article's minutes and dollars): bert-large on 2 epochs of SQuAD, no step cap.
    (["bert-squad", "max_steps=none"], 28, 24.0),
    (["bert-squad", "max_steps=none", "instances=1", "type=ml.p3.2xlarge", "distribution=none"], 4 * 60, 15.0),
]


@pytest.mark.parametrize(("words", "minutes", "dollars"), ARTICLE)
def test_plan_reproduces_the_articles_figures(tmp_path: Path, words: list[str], minutes: int, dollars: float) -> None:
    done = trainbot("plan", *words, "--json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    forecast = json.loads(done.stdout)["forecast"]
    assert forecast["basis"] == "physics"
    assert forecast["seconds"] == pytest.approx(minutes * 60, rel=0.25)
    assert forecast["usd"] == pytest.approx(dollars, rel=0.25)
    text = trainbot("plan", *words, home=tmp_path).stdout
    assert "Forecast: about " in text


def test_plan_json(tmp_path: Path) -> None:
    done = trainbot("plan", "distilbert-spot", "--json", home=tmp_path)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert set(plan) >= {"spec", "estimator", "cost"}
    assert plan["estimator"]["use_spot_instances"] is True
    assert plan["estimator"]["max_wait"] == 3600
    assert all("usd" in key for key, value in plan["cost"].items() if isinstance(value, float))
    assert {"seconds", "usd", "basis"} <= set(plan["forecast"])


def test_the_whole_command_may_come_as_one_quoted_argument(tmp_path: Path) -> None:
    words = trainbot("parse", "distilbert-spot", "epochs=2", "hp.run_name=two words", home=tmp_path)
    whole = trainbot("parse", 'distilbert-spot epochs=2 hp.run_name="two words"', home=tmp_path)
    assert words.returncode == whole.returncode == 0, whole.stderr
    assert json.loads(words.stdout) == json.loads(whole.stdout)
    assert json.loads(whole.stdout)["hyperparameters"]["run_name"] == "two words"


def test_a_quoted_command_of_keys_alone_is_whole_too(tmp_path: Path) -> None:
    whole = trainbot("parse", "model=bert-base-uncased dataset=squad", home=tmp_path)
    assert whole.returncode == 0, whole.stderr
    assert (json.loads(whole.stdout)["model"], json.loads(whole.stdout)["dataset"]) == ("bert-base-uncased", "squad")
    one_value = trainbot("parse", "bert-squad", "hp.run_name=two words", home=tmp_path)
    assert json.loads(one_value.stdout)["hyperparameters"]["run_name"] == "two words"


def test_plan_json_flag_may_come_before_the_text(tmp_path: Path) -> None:
    before = trainbot("plan", "--json", "distilbert-spot", home=tmp_path)
    after = trainbot("plan", "distilbert-spot", "--json", home=tmp_path)
    assert before.returncode == after.returncode == 0, before.stderr
    assert json.loads(before.stdout)["spec"] == json.loads(after.stdout)["spec"]


def test_a_folder_listed_for_local_jobs_may_be_planned(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "reviews").mkdir(parents=True)
    args = ("plan", "distilbert-spot", f"train_data={shared}/reviews")
    assert trainbot(*args, home=tmp_path / "home").returncode == 2
    done = trainbot(*args, home=tmp_path / "home", TRAINBOT_LOCAL_DATA_DIRS=f"/nonexistent,{shared}")
    assert done.returncode == 0, done.stderr

"""The training scripts on the oldest transformers the launcher targets: 4.28.1, the version of the
smdistributed data-parallel containers. The rest of the suite runs them on transformers 5.

A second virtual environment (`.venv-tf4`, made once and kept, ignored by git; the `python4` fixture of
conftest.py) holds transformers 4.28.1 beside the same CPU torch; the tiny model is built there too, since a tokenizer saved by transformers 5
names a class 4.28 does not have. Resuming is not run here: under torch >= 2.6 (all this machine has)
4.28's Trainer cannot read its own RNG state file; the containers' PyTorch 2.0 can.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.training.conftest import TRAINING_DIR, script_env

ROOT = TRAINING_DIR.parent


@pytest.fixture(scope="module")
def assets4(python4: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("home-tf4")
    build = ("from pathlib import Path; from jobs.backends.offline_assets import ensure_local_assets; "
             f"print(ensure_local_assets(Path({str(home)!r})).root)")
    done = subprocess.run([str(python4), "-c", build], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return Path(done.stdout.strip().splitlines()[-1])


def run4(python: Path, script: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), script, *args], cwd=TRAINING_DIR, env=env, capture_output=True,
                          text=True, timeout=300, check=False)


def metrics(stdout: str) -> dict[str, float]:
    found = {}
    for line in stdout.splitlines():
        if line.startswith("[metric] "):
            name, _, rest = line.removeprefix("[metric] ").partition("=")
            found[name] = float(rest.split()[0])
    return found


def test_classification_trains_and_saves_on_transformers_4(python4: Path, assets4: Path, tmp_path: Path) -> None:
    env = script_env(assets4 / "imdb" / "train", assets4 / "imdb" / "test", SM_MODEL_DIR=str(tmp_path / "model"))
    args = ["--model_name_or_path", str(assets4 / "tiny-bert"), "--output_dir", str(tmp_path / "out"),
            "--checkpoint_dir", str(tmp_path / "ckpt"), "--max_seq_length", "64", "--per_device_train_batch_size",
            "32", "--learning_rate", "2e-3", "--max_steps", "60", "--logging_steps", "30", "--save_steps", "30",
            "--do_train", "True", "--do_eval", "True", "--sagemaker_program", "train_classification.py"]
    done = run4(python4, "train_classification.py", args, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert metrics(done.stdout)["eval_accuracy"] >= 0.8
    assert (tmp_path / "model" / "model.safetensors").exists()  # 4.28 saves .bin; compat converts it


def test_question_answering_beats_the_trivial_baseline_on_transformers_4(
    python4: Path, assets4: Path, tmp_path: Path
) -> None:
    env = script_env(assets4 / "squad" / "train", assets4 / "squad" / "test", SM_MODEL_DIR=str(tmp_path / "model"))
    args = ["--model_name_or_path", str(assets4 / "tiny-bert"), "--output_dir", str(tmp_path / "out"),
            "--checkpoint_dir", str(tmp_path / "ckpt"), "--max_seq_length", "96", "--doc_stride", "32",
            "--per_device_train_batch_size", "32", "--learning_rate", "3e-3", "--max_steps", "120",
            "--logging_steps", "60", "--save_steps", "60", "--max_eval_samples", "200"]
    done = run4(python4, "train_qa.py", args, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert metrics(done.stdout)["eval_f1"] >= 30  # the trivial baselines score under 15


def test_sigterm_saves_and_exits_143_on_transformers_4(python4: Path, assets4: Path, tmp_path: Path) -> None:
    env = script_env(assets4 / "imdb" / "train", assets4 / "imdb" / "test", SM_MODEL_DIR=str(tmp_path / "model"))
    args = ["--model_name_or_path", str(assets4 / "tiny-bert"), "--output_dir", str(tmp_path / "out"),
            "--checkpoint_dir", str(tmp_path / "ckpt"), "--max_seq_length", "64", "--per_device_train_batch_size",
            "32", "--max_steps", "100000", "--save_steps", "20", "--logging_steps", "50"]
    process = subprocess.Popen([str(python4), "train_classification.py", *args], cwd=TRAINING_DIR, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "ckpt").glob("checkpoint-*/trainer_state.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 143, stderr[-3000:]
    saved = sorted(int(p.parent.name.split("-")[1]) for p in (tmp_path / "ckpt").glob("checkpoint-*/trainer_state.json"))
    assert saved and saved[-1] > 20  # a save at the stop, past the periodic one
    assert not (tmp_path / "model" / "model.safetensors").exists()  # interrupted: no final model

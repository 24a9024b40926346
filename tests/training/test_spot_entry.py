"""trainbot_spot_entry.py, run as SageMaker's toolkit runs an entry point (``python ENTRY --key value ...`` in
the code folder): the team's script runs in the same process with the same arguments, and what it saved in
its --output_dir (the checkpoint folder) is copied to SM_MODEL_DIR, checkpoint-N folders left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.planning.own_code import SPOT_ENTRY_FILES

ENTRY = Path(__file__).resolve().parents[2] / "training" / "trainbot_spot_entry.py"

SCRIPT = '''\
import argparse, os, sys
from pathlib import Path
import helper  # a sibling module of the script
parser = argparse.ArgumentParser()
parser.add_argument("--output_dir")
parser.add_argument("--epochs", type=int)
args = parser.parse_args()
out = Path(args.output_dir)
(out / "checkpoint-5").mkdir(parents=True, exist_ok=True)
(out / "checkpoint-5" / "optimizer.pt").write_text("state")
(out / "config.json").write_text(helper.CONFIG)
(out / "tokenizer").mkdir(exist_ok=True)
(out / "tokenizer" / "vocab.txt").write_text("[PAD]")
print("argv0", Path(sys.argv[0]).name, "epochs", args.epochs, "name", __name__, flush=True)
sys.exit(int(os.environ.get("EXIT_WITH", "0")))
'''


@pytest.fixture
def code(tmp_path: Path) -> Path:
    folder = tmp_path / "code"
    (folder / "scripts").mkdir(parents=True)
    (folder / "scripts" / "train.py").write_text(SCRIPT)
    (folder / "scripts" / "helper.py").write_text("CONFIG = '{\"model_type\": \"bert\"}'\n")
    for name in SPOT_ENTRY_FILES:  # as the plan ships them (`dependencies`)
        shutil.copy(ENTRY.parent / name, folder / name)
    return folder


def run(code: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "RANK"))}
    environment.update({"SM_MODEL_DIR": str(tmp_path / "model"), "TRAINBOT_USER_ENTRY": "scripts/train.py", **env})
    return subprocess.run(
        [sys.executable, ENTRY.name, "--output_dir", str(tmp_path / "checkpoints"), "--epochs", "2"],
        cwd=code, env=environment, capture_output=True, text=True, timeout=60, check=False,
    )


def test_the_script_runs_as_the_entry_and_its_final_model_is_copied(code: Path, tmp_path: Path) -> None:
    done = run(code, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "argv0 train.py epochs 2 name __main__" in done.stdout
    model = tmp_path / "model"
    assert (model / "config.json").read_text() == '{"model_type": "bert"}'
    assert (model / "tokenizer" / "vocab.txt").is_file()
    assert not (model / "checkpoint-5").exists()
    assert (tmp_path / "checkpoints" / "checkpoint-5" / "optimizer.pt").is_file()  # left for a resume


def test_a_failing_script_fails_the_job_and_copies_nothing(code: Path, tmp_path: Path) -> None:
    done = run(code, tmp_path, EXIT_WITH="3")
    assert done.returncode == 3
    assert not (tmp_path / "model").exists()


def test_only_rank_zero_copies(code: Path, tmp_path: Path) -> None:
    done = run(code, tmp_path, RANK="1")
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "model").exists()


def test_a_script_outside_the_code_folder_is_refused(code: Path, tmp_path: Path) -> None:
    done = run(code, tmp_path, TRAINBOT_USER_ENTRY="../elsewhere.py")
    assert done.returncode == 2 and "names no script" in done.stdout


RESUMING_SCRIPT = '''\
import sys
import transformers.trainer
from transformers.trainer_utils import get_last_checkpoint
out = sys.argv[sys.argv.index("--output_dir") + 1]
print("the script finds", get_last_checkpoint(out), flush=True)
print("resume_from_checkpoint=True finds", transformers.trainer.get_last_checkpoint(out), flush=True)
'''


def _checkpoints_after_a_kill_mid_save(folder: Path) -> tuple[Path, Path]:
    """checkpoint-10 whole; checkpoint-20 as a spot reclaim during its save leaves it: weights, no trainer_state."""
    whole, torn = folder / "checkpoint-10", folder / "checkpoint-20"
    whole.mkdir(parents=True)
    (whole / "model.safetensors").write_bytes(b"w")
    (whole / "trainer_state.json").write_text('{"global_step": 10}')
    torn.mkdir()
    (torn / "model.safetensors").write_bytes(b"w")
    return whole, torn


def test_a_resumed_script_skips_the_checkpoint_a_kill_left_half_written(code: Path, tmp_path: Path) -> None:
    # Issue 31, item 5: on a loaded run a reclaimed own-code job's next attempt reported no resume step. The kill
    # had landed in a save on the clock; the script's stock get_last_checkpoint picked that torn folder, and the
    # Trainer, finding no trainer_state.json in it, trained again from step 0: lost work, reported as none.
    (code / "scripts" / "resume.py").write_text(RESUMING_SCRIPT)
    whole, torn = _checkpoints_after_a_kill_mid_save(tmp_path / "checkpoints")

    done = run(code, tmp_path, TRAINBOT_USER_ENTRY="scripts/resume.py", TRAINBOT_CHECKPOINT_MINUTES="10")

    assert done.returncode == 0, done.stderr
    assert f"the script finds {whole}\n" in done.stdout
    assert f"resume_from_checkpoint=True finds {whole}\n" in done.stdout
    assert f"[checkpoint] ignoring incomplete {torn}\n" in done.stdout
    assert torn.is_dir()  # the team's folder is left as it is


def test_without_saves_on_the_clock_the_script_resumes_as_transformers_does(code: Path, tmp_path: Path) -> None:
    (code / "scripts" / "resume.py").write_text(RESUMING_SCRIPT)
    _, torn = _checkpoints_after_a_kill_mid_save(tmp_path / "checkpoints")

    done = run(code, tmp_path, TRAINBOT_USER_ENTRY="scripts/resume.py")

    assert done.returncode == 0, done.stderr
    assert f"the script finds {torn}\n" in done.stdout  # the stock choice: the entry changes nothing unasked

"""Interruption: SIGTERM saves at the next step boundary and exits 143; kill -9 (even mid-save) loses at most
one checkpoint interval; either way the resumed run ends with the weights of an uninterrupted one."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from tests.training.conftest import QA_FAST, load_weights, popen_script, run_script, script_env

MAX_STEPS = 50


def _args(root: Path) -> list[str]:
    return ["--model_name_or_path", "{model}", "--output_dir", str(root / "out"), "--checkpoint_dir",
            str(root / "ckpt"), *QA_FAST, "--max_train_samples", "400", "--max_eval_samples", "40",
            "--learning_rate", "1e-3", "--max_steps", str(MAX_STEPS), "--logging_steps", "1", "--save_steps", "10",
            "--save_total_limit", "2", "--seed", "7"]


def _run(assets, root: Path) -> subprocess.CompletedProcess[str]:
    args = [a.format(model=assets.model_dir) for a in _args(root)]
    return run_script("train_qa.py", args, script_env(*assets.channels_for("squad")), timeout=180)


def _run_until(assets, root: Path, step: int, sig: int) -> tuple[int, str, str]:
    """Start a run and send `sig` once it has logged `step`."""
    args = [a.format(model=assets.model_dir) for a in _args(root)]
    proc = popen_script("train_qa.py", args, script_env(*assets.channels_for("squad")))
    assert proc.stdout is not None
    head = []
    for line in proc.stdout:
        head.append(line)
        if line.startswith(f"[progress] step={step} "):
            proc.send_signal(sig)
            break
    out, err = proc.communicate(timeout=120)
    return proc.returncode, "".join(head) + out, err


def _first_step(stdout: str) -> int:
    return int(re.search(r"\[metric\] loss=\S+ step=(\d+)", stdout).group(1))


def _assert_same_weights(a: Path, b: Path) -> None:
    x, y = load_weights(a), load_weights(b)
    assert x.keys() == y.keys()
    different = [k for k in x if not torch.equal(x[k], y[k])]
    assert not different, different


@pytest.fixture(scope="module")
def uninterrupted(assets, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("uninterrupted")
    result = _run(assets, root)
    assert result.returncode == 0, result.stderr[-3000:]
    assert _first_step(result.stdout) == 1
    return root / "out"


def test_sigterm_saves_exits_143_and_resumes_to_identical_weights(assets, uninterrupted, tmp_path: Path) -> None:
    code, out, err = _run_until(assets, tmp_path, step=5, sig=signal.SIGTERM)
    assert code == 143, err[-3000:]
    saved = int(re.search(r"interrupted: saved step (\d+)", err).group(1))
    assert 5 <= saved < MAX_STEPS
    assert (tmp_path / "ckpt" / f"checkpoint-{saved}" / "trainer_state.json").exists()
    assert not (tmp_path / "out" / "model.safetensors").exists()  # interrupted: no final model
    assert f"step={saved + 1}" not in out  # stopped at the step boundary

    resumed = _run(assets, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {tmp_path / 'ckpt' / f'checkpoint-{saved}'}" in resumed.stderr
    assert _first_step(resumed.stdout) == saved + 1
    _assert_same_weights(uninterrupted, tmp_path / "out")

    # A relaunch after the last step (say SIGTERM came right at it) trains nothing more.
    (tmp_path / "out" / "model.safetensors").unlink()
    again = _run(assets, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already holds the final step" in again.stderr and "[metric] loss=" not in again.stdout
    assert "[metric] eval_f1=" in again.stdout and f"step={MAX_STEPS}" in again.stdout
    _assert_same_weights(uninterrupted, tmp_path / "out")


def test_kill_9_mid_save_resumes_from_previous_complete_checkpoint(assets, uninterrupted, tmp_path: Path) -> None:
    code, _, _ = _run_until(assets, tmp_path, step=25, sig=signal.SIGKILL)
    assert code == -signal.SIGKILL
    ckpt = tmp_path / "ckpt"
    complete = sorted(int(p.name.split("-")[1]) for p in ckpt.iterdir() if (p / "trainer_state.json").exists())
    assert complete and complete[-1] >= 20
    last = complete[-1]
    # What a kill during the next save leaves behind: weights written, trainer state not yet (or torn).
    partial = ckpt / f"checkpoint-{last + 10}"
    partial.mkdir(exist_ok=True)
    shutil.copy(ckpt / f"checkpoint-{last}" / "model.safetensors", partial / "model.safetensors")
    torn = ckpt / f"checkpoint-{last + 20}"
    shutil.copytree(ckpt / f"checkpoint-{last}", torn, dirs_exist_ok=True)
    (torn / "trainer_state.json").write_text('{"best_metric": null, "global_st')

    resumed = _run(assets, tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {ckpt / f'checkpoint-{last}'}" in resumed.stderr
    assert "ignoring incomplete" in resumed.stderr
    assert _first_step(resumed.stdout) == last + 1
    _assert_same_weights(uninterrupted, tmp_path / "out")

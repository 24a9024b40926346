"""`torchrun --nproc_per_node 2` on CPU (DDP over gloo): each rank trains on its own shard, rank 0 alone
prints metrics and writes the one final model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.training.conftest import QA_FAST, TRAINING_DIR, script_env


def test_torchrun_two_processes_shard_data_and_write_one_model(assets, tmp_path: Path) -> None:
    args = ["--model_name_or_path", str(assets.model_dir), "--output_dir", str(tmp_path / "out"),
            "--checkpoint_dir", str(tmp_path / "ckpt"), *QA_FAST, "--max_train_samples", "200",
            "--max_eval_samples", "40", "--max_steps", "12", "--logging_steps", "4", "--save_steps", "6"]
    # --standalone: the rendezvous binds a free port itself (a port picked here first could be taken meanwhile)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "train_qa.py", *args]
    result = subprocess.run(cmd, cwd=TRAINING_DIR, env=script_env(*assets.channels_for("squad")),
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-4000:]

    shards = dict(re.findall(r"\[shard\] rank=(\d) world_size=2 first_ids=([\d,]+)", result.stderr))
    assert set(shards) == {"0", "1"}, result.stderr[-2000:]
    first = {rank: set(ids.split(",")) for rank, ids in shards.items()}
    assert first["0"].isdisjoint(first["1"])  # different samples on each rank

    losses = re.findall(r"^\[metric\] loss=\S+ step=(\d+)$", result.stdout, flags=re.M)
    # Printed once (rank 0), not once per rank; every save logs too (step 6), so a resumed run's train_loss
    # can be computed over the whole history carried in the checkpoint.
    assert losses == ["4", "6", "8", "12"]
    assert len(re.findall(r"^\[metric\] eval_f1=", result.stdout, flags=re.M)) == 1

    out = tmp_path / "out"
    assert (out / "model.safetensors").exists() and (out / "config.json").exists()
    assert json.loads((out / "metrics.json").read_text())["train_samples_per_second"] > 0
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("checkpoint-*")) == ["checkpoint-12", "checkpoint-6"]
    state = json.loads((tmp_path / "ckpt" / "checkpoint-12" / "trainer_state.json").read_text())
    assert state["global_step"] == 12 and state["train_batch_size"] == 16

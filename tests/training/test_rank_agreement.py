"""Saves on the clock under several processes: each rank keeps its own clock, so one rank can find the time
up a step before the other. Deciding alone, that rank would save (and log, a gather) while the other entered
the next step's collectives, and the run would hang or die. Both clocks, the bot scripts' and the spot
entry's for a team's Trainer, agree over gloo first.

Two real processes in one gloo group (a file rendezvous, no port), the callbacks built on the installed
transformers, one rank's clock set past the interval and the other's not. Each then leaves the group, as
the scripts do before they exit (a group left to the interpreter's shutdown can abort a rank).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.training.conftest import TRAINING_DIR

RANK = '''\
import json, sys, time
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, sys.argv[1])
import torch.distributed as dist
rank, store, out = int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
import transformers, checkpoints, trainbot_spot_entry, trainbot_rank_agreement
args = SimpleNamespace(output_dir=str(out), logging_steps=50)
decided = {}
for late_rank in (0, 1, None):  # whose minute is up: rank 0's, rank 1's, nobody's
    clocks = {
        "bot scripts": checkpoints.make_checkpoint_clock(transformers)(1.0, out),
        "spot entry": trainbot_spot_entry.make_clock_callback(transformers.TrainerCallback, 1.0)(),
    }
    for name, clock in clocks.items():
        state = transformers.TrainerState(global_step=7, max_steps=100, is_world_process_zero=rank == 0)
        control = transformers.TrainerControl()
        clock.on_train_begin(args, state, control)
        if rank == late_rank:
            for field in ("_last_save", "last_save"):
                if hasattr(clock, field):
                    setattr(clock, field, time.monotonic() - 120)
        clock.on_step_end(args, state, control)
        decided[f"{name}, late rank {late_rank}"] = control.should_save
trainbot_rank_agreement.leave_process_group()  # as the scripts do before exit
decided["still in the group"] = dist.is_initialized()
print("DECIDED " + json.dumps(decided), flush=True)
'''


def decisions(tmp_path: Path) -> list[dict[str, bool]]:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ranks = [
        subprocess.Popen([sys.executable, str(script), str(TRAINING_DIR), str(rank), str(tmp_path / "store"),
                          str(tmp_path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for rank in (0, 1)
    ]
    found = []
    for proc in ranks:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        line = next(line for line in out.splitlines() if line.startswith("DECIDED "))
        found.append(json.loads(line.removeprefix("DECIDED ")))
    return found


def test_every_rank_saves_when_one_ranks_clock_is_up_and_none_while_nobodys_is(tmp_path: Path) -> None:
    expected = {"still in the group": False}
    for name in ("bot scripts", "spot entry"):
        expected |= {f"{name}, late rank 0": True, f"{name}, late rank 1": True, f"{name}, late rank None": False}
    assert decisions(tmp_path) == [expected, expected]

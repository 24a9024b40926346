"""What the per-step agreement on saves costs a distributed run, as a ratio against the step's own collective.

Every step, each rank of a run asks the others whether a save or a stop is due (`RankAgreement.any_rank`, a
one-number MAX all-reduce over gloo), for the checkpoint clock and for the SIGTERM stop. The baseline is the
all-reduce every DDP step already makes: the gradients, here DistilBERT's 66M parameters in fp32 as one
tensor, over the same gloo group of two processes on this machine (on GPUs they go over NCCL, faster, while
the agreement stays on gloo: the ratio is smaller here than there).

    PYTHONPATH=. .venv/bin/python bench/rank_agreement.py [--calls 2000] [--params 66000000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TRAINING = Path(__file__).resolve().parents[1] / "training"

RANK = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch, torch.distributed as dist
from trainbot_rank_agreement import RankAgreement, leave_process_group
rank, store, calls, params = int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
agreement = RankAgreement()
agreement.join()

def per_call(action, n):
    for _ in range(min(n, 20)):  # warm the pairs
        action()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(n):
        action()
    return (time.perf_counter() - start) / n

grads = torch.zeros(params, dtype=torch.float32)
agree_s = per_call(lambda: agreement.any_rank(rank == 1), calls)
grads_s = per_call(lambda: dist.all_reduce(grads), max(5, calls // 200))
leave_process_group()
if rank == 0:
    print(json.dumps({"agree_s": agree_s, "grads_s": grads_s}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="agreements timed per rank")
    parser.add_argument("--params", type=int, default=66_000_000, help="gradient elements of the baseline")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "rank.py"
        script.write_text(RANK)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        argv = [str(TRAINING), "{rank}", str(Path(tmp) / "store"), str(args.calls), str(args.params)]
        ranks = [
            subprocess.Popen([sys.executable, str(script), *(a.format(rank=r) for a in argv)], env=env,
                             stdout=subprocess.PIPE, text=True)
            for r in (0, 1)
        ]
        outputs = [proc.communicate(timeout=600)[0] for proc in ranks]
        if any(proc.returncode for proc in ranks):
            raise SystemExit("a rank failed; see its output above")
    figures = json.loads(outputs[0].strip().splitlines()[-1])
    agree_us, grads_ms = figures["agree_s"] * 1e6, figures["grads_s"] * 1e3
    print(f"agreement (one int, MAX, gloo, 2 ranks): {agree_us:.1f} us per call, two per step {2 * agree_us:.1f} us")
    print(f"gradient all-reduce ({args.params / 1e6:.0f}M fp32, same group): {grads_ms:.1f} ms per step")
    print(f"two agreements / gradient all-reduce: {2 * figures['agree_s'] / figures['grads_s']:.4f} "
          f"(1/{figures['grads_s'] / (2 * figures['agree_s']):.0f})")


if __name__ == "__main__":
    main()

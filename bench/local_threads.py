"""What sharing the cores among concurrent local jobs buys, as a ratio against each job taking them all.

Several local jobs run at once (a team trying things, or the test suite's workers): before, each job's
process got every core as its OpenMP thread pool, and pools that outnumber the cores spin against each other.
Now each launch gets the cores the running jobs left (`scaling.threads_per_process`). Both are run here in the
same process, on the same stand-in for the tiny BERT's step (a few small matrix products, forward and backward,
AdamW), JOBS copies at once; the figures are training steps per second summed over the jobs, and the slowest
job's own (the one a person waits on).

    PYTHONPATH=. .venv/bin/python bench/local_threads.py [--jobs 3] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from jobs.backends.local.scaling import LocalLimits, threads_per_process

STEP = """
import sys, time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
optimizer = torch.optim.AdamW(model.parameters())
batch = torch.randn(4 * 48, 64)  # four examples of 48 tokens, the own-scripts test's shape
end, steps = time.perf_counter() + float(sys.argv[1]), 0
while time.perf_counter() < end:
    model(batch).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    steps += 1
print(steps / float(sys.argv[1]))
"""


def run_jobs(threads: list[int], seconds: float) -> list[float]:
    """Steps per second of each job, all started together with their own OMP_NUM_THREADS."""
    jobs = [
        subprocess.Popen([sys.executable, "-c", STEP, str(seconds)], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": str(count)})
        for count in threads
    ]
    return [float(job.communicate()[0]) for job in jobs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    limits = LocalLimits()
    every_core = [limits.cpus] * args.jobs
    shared = [threads_per_process(limits, 1, busy, None) for busy in range(args.jobs)]  # launched one by one
    alone = run_jobs([limits.cpus], args.seconds)[0]
    before, after = run_jobs(every_core, args.seconds), run_jobs(shared, args.seconds)
    print(f"{limits.cpus} cores; one job alone on all of them: {alone:.0f} steps/s")
    for label, threads, rates in (("every core each", every_core, before), ("shared", shared, after)):
        print(f"{args.jobs} jobs, {label} (threads {threads}): {sum(rates):.0f} steps/s in all, "
              f"slowest job {min(rates):.0f} steps/s")
    print(f"shared / every core each: {sum(after) / sum(before):.2f}x in all, "
          f"{min(after) / min(before):.2f}x for the slowest job")


if __name__ == "__main__":
    main()

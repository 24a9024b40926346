"""Benchmark: /train commands parsed, validated and planned per second in-process, and the p99 per command.

Run: .venv/bin/python bench/parse.py [--seconds 3]. Target: p99 under 1 ms per command.
Wall-clock figures include whatever else the machine runs (preemption shows up in p99); the CPU-time
figures (this thread only) show the parser's own cost.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.errors import SpecError  # noqa: E402
from jobs.planning.grammar import parse_command  # noqa: E402
from jobs.planning.plan import build_plan  # noqa: E402
from jobs.planning.pricing import check_job_budget  # noqa: E402

COMMANDS = [
    "/train bert-squad",
    "/train roberta-mnli",
    "/train distilbert-spot",
    "/train bert-squad instances=4 spot=yes max_wait=4h",
    "/train distilbert-spot max_run=2h epochs=3 lr=3e-5 hp.run_name=\u201cnightly run\u201d",
    "/train model=bert-base-uncased dataset=squad type=ml.g5.12xlarge instances=2 distribution=ddp fp16=yes",
    "/train roberta-mnli partitions=2 mp.pipeline=simple processes=4",
    "/train model=distilbert-base-uncased dataset=imdb spot max_run=90m batch_size=16",
    "/train bert-squad instanses=2",  # refused: unknown key
    "/train bert-squad type=ml.g5.xlarge",  # refused: data parallel on a one-GPU type
]


def one(text: str) -> None:
    try:
        plan = build_plan(parse_command(text), bucket="bench-bucket", lineage_id="bench-1a2b3c4d", launched_by="U1")
        check_job_budget(plan.cost, 100000.0)
    except SpecError:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    started = time.perf_counter()
    for text in COMMANDS:  # first use loads and caches the SDK tables and the data files
        one(text)
    first_use_ms = (time.perf_counter() - started) * 1000
    wall: list[float] = []
    cpu: list[float] = []
    deadline = time.perf_counter() + args.seconds
    while time.perf_counter() < deadline:
        for text in COMMANDS:
            w0, c0 = time.perf_counter(), time.thread_time()
            one(text)
            cpu.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - w0)
    print(f"commands: {len(wall)} ({len(COMMANDS)} distinct, 2 of them refused)")
    print(f"first use ms (loading tables, {len(COMMANDS)} commands): {first_use_ms:.1f}")
    report("wall", wall)
    report("cpu", cpu)


def report(label: str, timings: list[float]) -> None:
    total = sum(timings)
    cuts = statistics.quantiles(timings, n=100)
    print(f"{label} commands per second: {len(timings) / total:.0f}")
    print(f"{label} mean ms per command: {total / len(timings) * 1000:.3f}")
    print(f"{label} p50 ms per command: {cuts[49] * 1000:.3f}")
    print(f"{label} p99 ms per command: {cuts[98] * 1000:.3f}")
    print(f"{label} max ms per command: {max(timings) * 1000:.3f}")


if __name__ == "__main__":
    main()

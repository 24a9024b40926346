"""Benchmark: a local endpoint answering a steady stream of /invocations (what `/predict` sends) while it is
promoted to another model and rolled back, 5 times each, through the same PromotionService the bot uses.

Run: .venv/bin/python bench/promote.py [--cycles 5] [--clients 2] [--steady 8].
Prints: requests answered and failed (target: 0 failed), p50 and p99 latency in steady state (no swap under
way, measured first in the same process) and during the swaps (from the update being asked for until the
endpoint is seen serving the new config), the ratio of the two p99s, and how long a swap took.

Two tiny BERTs (different weights) from the offline assets' builder: a swap loads the new one beside the
old in the endpoint's process, tries it once, and replaces the old with one assignment (see
jobs/backends/local/endpoint_server.py); the requests in flight finish on the old model.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from jobs.backends.local.offline_assets import build_tiny_bert  # noqa: E402
from jobs.endpoints.revisions import RevisionStatus  # noqa: E402
from jobs.records import Actor  # noqa: E402
from tests.support.invocations import InvocationStream  # noqa: E402
from tests.support.local_promotion import LocalPromotion, local_promotion  # noqa: E402

OWNER = Actor("U_BENCH", channel_id=None, via="cli")
TARGET_FAILED = 0


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cycles", type=int, default=5, help="promotions, each followed by a rollback")
    parser.add_argument("--clients", type=int, default=2, help="concurrent request streams")
    parser.add_argument("--steady", type=float, default=8.0, help="seconds of steady state measured first")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-promote-") as tmp:
        home = Path(tmp)
        for index in (1, 2):
            build_tiny_bert(home / "data" / f"model-{index}", seed=index)
        world = local_promotion(home, {"bench-a": home / "data" / "model-1", "bench-b": home / "data" / "model-2"},
                                actor=OWNER)
        name = world.service.deploy("bench-a", options={"name": "bench-prod"}, actor=OWNER).name
        try:
            run(world, name, args)
        finally:
            world.backend.delete(name)


def run(world: LocalPromotion, name: str, args: argparse.Namespace) -> None:
    service = world.service
    started = time.monotonic()
    while service.get(name).status.value != "in_service":
        service.poll_once()
        if time.monotonic() - started > 300:
            raise SystemExit("the local endpoint did not come up")
        time.sleep(0.1)
    port = world.port(name)
    print(f"endpoint {name} in service after {time.monotonic() - started:.1f} s; {args.clients} clients")
    with InvocationStream(port, threads=args.clients) as traffic:
        time.sleep(1.0)  # warm-up, not counted
        steady_from = time.monotonic()
        time.sleep(args.steady)
        steady_to = time.monotonic()
        windows = swap(world, name, args.cycles)
    report(traffic, steady_from, steady_to, windows)


def swap(world: LocalPromotion, name: str, cycles: int) -> list[tuple[float, float]]:
    """Promote and roll back ``cycles`` times; each swap's window, from asking to serving."""
    service = world.service
    windows: list[tuple[float, float]] = []
    for cycle in range(cycles):
        for what in ("promote", "rollback"):
            asked = time.monotonic()
            if what == "promote":
                plan = service.promotions.plan("bench-b", name, options={}, actor=OWNER)
                revision = service.promotions.promote(plan, actor=OWNER)
            else:
                revision = service.promotions.rollback(name, actor=OWNER, reason=f"bench cycle {cycle + 1}")
            status = world.follow(revision.id, 300.0)
            windows.append((asked, time.monotonic()))
            if status is not RevisionStatus.SERVING:
                raise SystemExit(f"{what} {cycle + 1} ended {status.value}")
            time.sleep(0.5)  # some traffic between swaps
    return windows


def report(traffic: InvocationStream, steady_from: float, steady_to: float,
           windows: list[tuple[float, float]]) -> None:
    samples = [s for s in traffic.answers if s.started >= steady_from]
    steady = [s.seconds for s in samples if steady_from <= s.started < steady_to and s.ok]
    swapping = [s.seconds for s in samples if s.ok and any(a <= s.started + s.seconds and s.started <= b
                                                           for a, b in windows)]
    failures = traffic.failures()
    failed = len(failures)
    print(f"requests answered: {sum(1 for s in samples if s.ok)}; failed: {failed} (target {TARGET_FAILED}: "
          f"{'OK' if failed <= TARGET_FAILED else 'MISSED'}){'; ' + failures[0] if failed else ''}")
    print(f"steady state  : {len(steady):6d} requests  p50 {percentile(steady, 0.5) * 1000:7.2f} ms  "
          f"p99 {percentile(steady, 0.99) * 1000:7.2f} ms")
    print(f"during swaps  : {len(swapping):6d} requests  p50 {percentile(swapping, 0.5) * 1000:7.2f} ms  "
          f"p99 {percentile(swapping, 0.99) * 1000:7.2f} ms  ({len(windows)} swaps)")
    ratio = percentile(swapping, 0.99) / percentile(steady, 0.99)
    print(f"p99 during swaps / p99 steady: {ratio:.2f}; p50 ratio "
          f"{percentile(swapping, 0.5) / percentile(steady, 0.5):.2f}")
    took = [b - a for a, b in windows]
    print(f"a swap took (asked -> serving): mean {statistics.fmean(took):.2f} s, max {max(took):.2f} s")


if __name__ == "__main__":
    main()

"""How soon a spot job's lost capacity becomes its relaunch, with changes pushed by EventBridge and without.

    PYTHONPATH=. .venv/bin/python bench/events.py [--jobs 1000] [--changes 100] [--poll-changes 20]

On one moto server, in one run, with the real SageMakerBackend, a SQLite store holding one RUNNING lineage per
job (1,000 active jobs), and the reconciliation poll at 300 s:
1. events on: the bot's own events loop (bot/wiring.py, TRAINBOT_EVENTS_QUEUE set after `events setup`) runs
   in a thread; for each of `--changes` jobs the bench moves the job to Stopped/MaxWaitTimeExceeded and puts
   SageMaker's "Training Job State Change" event on the bus. Timed: PutEvents sent -> the relaunch's
   CreateTrainingJob request leaving the bot's client (target: p99 < 2 s), and the AWS requests per change
   by operation (target: at most 2 SageMaker calls: one describe, the relaunch's create);
2. events off (polling every 300 s): a change waits for the next poll, then one cycle lists, describes and
   relaunches it. The cycle (poll start -> CreateTrainingJob sent) is measured on `--poll-changes` real cycles;
   the wait for the poll is the change's phase in the 300 s interval, spread evenly (the median change waits
   150 s), so the latency is that wait plus a measured cycle.
Figures only; nothing here asserts on time. The relaunch itself (the SDK's estimator, the source upload to S3,
CreateTrainingJob) is the same in both; bench/launch.py breaks it down.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopback_aws import (  # bench/ is the script's sys.path[0]
    BUCKET,
    ROLE_ARN,
    jobs_parser,
    quiet_libraries,
    start_moto,
)
from watcher import PLAN_TEXT, Requests, _arrange

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

POLL_SECONDS = 300.0
SAGEMAKER_OPERATIONS = ("DescribeTrainingJob", "CreateTrainingJob", "ListTrainingJobs")


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


def _figures(name: str, seconds: list[float]) -> str:
    return (f"{name:<34} n={len(seconds):3d}  p50 {_percentile(seconds, 0.5) * 1000:9.0f} ms  "
            f"p99 {_percentile(seconds, 0.99) * 1000:9.0f} ms  max {max(seconds) * 1000:9.0f} ms")


def _wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the bench waited too long for the bot")
        time.sleep(0.002)


def _event(job_name: str) -> dict[str, Any]:
    import json

    detail = {"TrainingJobName": job_name, "TrainingJobStatus": "Stopped", "SecondaryStatus": "MaxWaitTimeExceeded"}
    return {"Source": "aws.sagemaker", "DetailType": "SageMaker Training Job State Change", "Detail": json.dumps(detail)}


def run(jobs: int, changes: int, poll_changes: int) -> None:
    import boto3

    from bot.wiring import Runtime, build_endings, build_watcher
    from jobs.backends.aws_session import make_boto_session
    from jobs.backends.sagemaker.events import EventQueue, setup_events
    from jobs.clock import SystemClock
    from jobs.planning.grammar import parse_command
    from jobs.planning.plan import build_plan
    from jobs.settings import Settings
    from tests.support.moto_server import set_training_job_state

    server = start_moto()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            started = time.perf_counter()
            store, backend, service, requests = _arrange(jobs, home, ROLE_ARN)
            print(f"arranged {jobs} InProgress jobs and RUNNING lineages in {time.perf_counter() - started:.1f} s")
            queue_session = make_boto_session("us-east-1")
            requests.attach(queue_session)  # the queue's calls are counted with the backend's
            done = setup_events(queue_session, queue_name="bench-events", region="us-east-1")
            settings = Settings(trainbot_bucket=BUCKET, trainbot_role_arn=ROLE_ARN, trainbot_home=home,
                                trainbot_relaunch_backoff_seconds=0, trainbot_events_queue=done.queue_url)
            assert settings.watch_seconds == POLL_SECONDS
            clock = SystemClock()
            watcher = build_watcher(store, backend, clock, settings)
            runtime = Runtime(settings=settings, clock=clock, store=store, backend=backend, jobs=service,
                              watcher=watcher, endings=build_endings(store, backend, clock, settings),
                              events=EventQueue(queue_session, done.queue_url))
            # The bot pays these once at its start: the SDK session (first launch), the first full cycle.
            backend.launch("bench-warm-1", build_plan(parse_command(PLAN_TEXT), bucket=BUCKET, lineage_id="bench-warm"))
            watcher.poll_once()
            bus = boto3.client("events")

            loop = threading.Thread(target=runtime.watch_until_stopped, name="bench-events-loop", daemon=True)
            loop.start()
            _wait_for(lambda: requests.count["ReceiveMessage"] >= 1)
            pushed, per_change = _with_events(changes, requests, bus, set_training_job_state)
            runtime.stop_event.set()
            bus.put_events(Entries=[_event("bench-wake-1")])  # ends the loop's long poll
            loop.join(timeout=30)

            cycles, poll_calls = _with_polling(changes, poll_changes, jobs, requests, watcher, set_training_job_state)
            _report(pushed, per_change, cycles, poll_calls, jobs, changes)
    finally:
        server.stop()


def _with_events(changes: int, requests: Requests, bus: Any, move: Any) -> tuple[list[float], Counter[str]]:
    latencies: list[float] = []
    spent: Counter[str] = Counter()
    for index in range(changes):
        lineage = f"bench-{index:04d}"
        move(f"{lineage}-1", "Stopped", "MaxWaitTimeExceeded", billable_seconds=60, training_seconds=300)
        before = Counter(requests.count)
        deletes = requests.count["DeleteMessageBatch"]
        put_at = time.perf_counter()
        bus.put_events(Entries=[_event(f"{lineage}-1")])
        _wait_for(lambda lineage=lineage: f"{lineage}-2" in requests.created)
        latencies.append(requests.created[f"{lineage}-2"] - put_at)
        _wait_for(lambda deletes=deletes: requests.count["DeleteMessageBatch"] > deletes)  # change recorded
        spent += requests.count - before
        move(f"{lineage}-2", "InProgress", "Training")  # as SageMaker has it (moto creates jobs Completed)
    spent["PutEvents"] = 0  # the bench's own call, on its own client (not counted anyway)
    return latencies, spent


def _with_polling(changes: int, poll_changes: int, jobs: int, requests: Requests, watcher: Any, move: Any
                  ) -> tuple[list[float], Counter[str]]:
    cycles: list[float] = []
    spent: Counter[str] = Counter()
    watcher.poll_once()  # takes in what the events run changed (its relaunched jobs), unmeasured
    for index in range(changes, min(jobs, changes + poll_changes)):
        lineage = f"bench-{index:04d}"
        move(f"{lineage}-1", "Stopped", "MaxWaitTimeExceeded", billable_seconds=60, training_seconds=300)
        before = Counter(requests.count)
        started = time.perf_counter()
        watcher.poll_once()  # the next poll, whenever it comes
        cycles.append(requests.created[f"{lineage}-2"] - started)
        spent += requests.count - before
        move(f"{lineage}-2", "InProgress", "Training")
    return cycles, spent


def _report(pushed: list[float], spent: Counter[str], cycles: list[float], poll_spent: Counter[str],
            jobs: int, changes: int) -> None:
    n, m = len(pushed), len(cycles)
    print(f"\n{jobs} active jobs, reconciliation poll every {POLL_SECONDS:g} s, {changes} changes")
    print(_figures("events on: PutEvents -> Create sent", pushed) + "  (target p99 < 2000 ms)")
    sagemaker = {op: round(spent[op] / n, 2) for op in SAGEMAKER_OPERATIONS}
    others = {op: round(count / n, 2) for op, count in sorted(spent.items()) if op not in SAGEMAKER_OPERATIONS and count}
    print(f"  SageMaker calls per change {sum(sagemaker.values()):.2f} {sagemaker}  (target <= 2)")
    print(f"  other calls per change      {others}")
    # Events off: the change waits for the next poll (its phase in the interval, spread evenly), then a cycle.
    phases = [(i + 0.5) / n * POLL_SECONDS for i in range(n)]
    polled = [phase + cycles[i % m] for i, phase in enumerate(phases)]
    print(_figures("events off: change -> Create sent", polled) + "  (wait for the 300 s poll + a cycle)")
    print(_figures("  of which the cycle itself", cycles))
    per_cycle = {op: round(count / m, 2) for op, count in sorted(poll_spent.items()) if count}
    print(f"  calls per polled change     {per_cycle}")
    print(f"ratio p50 off / on            {_percentile(polled, 0.5) / _percentile(pushed, 0.5):9.0f}x")
    print(f"events on, mean {statistics.mean(pushed) * 1000:.0f} ms; polling cycle mean {statistics.mean(cycles) * 1000:.0f} ms")


def main() -> None:
    quiet_libraries("bot")
    parser = jobs_parser(__doc__)
    parser.add_argument("--changes", type=int, default=100)
    parser.add_argument("--poll-changes", type=int, default=20)
    args = parser.parse_args()
    run(args.jobs, args.changes, args.poll_changes)


if __name__ == "__main__":
    main()

"""What one watcher cycle costs with 1,000 active jobs, against a naive one-describe-per-job cycle.

    PYTHONPATH=. .venv/bin/python bench/watcher.py [--jobs 1000]

On one moto server, in one run, with the real SageMakerBackend and a SQLite store holding one RUNNING
lineage per job:
1. the first cycle ever (no cursor yet: every tracked job is described once);
2. a quiet cycle (nothing changed) against a naive cycle that describes every active job: HTTP requests
   (counted with a botocore `before-send` hook, retries included) and wall time (target <= 20 requests);
3. a change (one job Interrupted) is seen by the next cycle (target: within one poll);
4. detection to relaunch: from the DescribeTrainingJob answer that shows MaxWaitTimeExceeded to the
   CreateTrainingJob request of the next attempt leaving the client (target < 2 s of the bot's own time).
Figures only; nothing here asserts on time. moto pages ListTrainingJobs over every job before it applies
LastModifiedTimeAfter, so its list costs ceil(jobs / 100) requests where SageMaker's costs ceil(changed / 100).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from loopback_aws import (  # bench/ is the script's sys.path[0]
    BUCKET,
    ROLE_ARN,
    jobs_parser,
    quiet_libraries,
    spot_job_request,
    start_moto,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PLAN_TEXT = "distilbert-spot"


class Requests:
    """Every HTTP request the bot's session sends, by operation; and when chosen ones happen."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()
        self.detected: dict[str, float] = {}  # job -> when its describe answer arrived
        self.created: dict[str, float] = {}  # job -> when its CreateTrainingJob left

    def attach(self, session: Any) -> None:
        session.events.register("before-send", self._sent)
        session.events.register("after-call.sagemaker.DescribeTrainingJob", self._described)

    def total(self) -> int:
        return sum(self.count.values())

    def _sent(self, request: Any, event_name: str = "", **_: Any) -> None:
        operation = event_name.split(".")[-1]
        self.count[operation] += 1
        if operation == "CreateTrainingJob":
            self.created[json.loads(request.body)["TrainingJobName"]] = time.perf_counter()

    def _described(self, parsed: dict[str, Any], **_: Any) -> None:
        name = parsed.get("TrainingJobName", "")
        if parsed.get("SecondaryStatus") == "MaxWaitTimeExceeded" and name not in self.detected:
            self.detected[name] = time.perf_counter()


def _arrange(jobs: int, home: Path, role_arn: str) -> tuple[Any, Any, Any, Requests]:
    """moto jobs InProgress for 10 minutes, and one RUNNING lineage per job in a fresh store."""
    import boto3

    from jobs import lineage as moves
    from jobs.backends.aws_session import make_boto_session
    from jobs.backends.sagemaker.training_jobs import SageMakerBackend
    from jobs.clock import SystemClock
    from jobs.lifecycle.service import JobService
    from jobs.planning.grammar import parse_command
    from jobs.planning.plan import checkpoint_uri
    from jobs.records import Actor
    from jobs.settings import Settings
    from jobs.store.store import Store
    from tests.support.moto_server import ago, set_training_job_state

    clock = SystemClock()
    store = Store(f"sqlite:///{home / 'trainbot.db'}", clock=clock)
    store.migrate()
    spec = parse_command(PLAN_TEXT)
    plain = boto3.client("sagemaker")
    for index in range(jobs):
        lineage_id = f"bench-{index:04d}"
        plain.create_training_job(**spot_job_request(f"{lineage_id}-1", role_arn=role_arn))
        set_training_job_state(f"{lineage_id}-1", "InProgress", "Training", at=ago(600))
        store.create_lineage(lineage_id=lineage_id, spec=spec, backend="sagemaker",
                             checkpoint_uri=checkpoint_uri(BUCKET, lineage_id), actor=Actor("U1"),
                             estimated_usd=1.0)
        store.add_attempt(lineage_id, number=1, instance_type=spec.instance_type, spot=spec.spot)
        store.transition_attempt(f"{lineage_id}-1", moves.ATTEMPT_CONFIRMED)
        store.transition_lineage(lineage_id, moves.CONFIRM_LAUNCH)
    requests = Requests()
    session = make_boto_session("us-east-1")
    requests.attach(session)
    backend = SageMakerBackend(session, role_arn=role_arn, bucket=BUCKET, clock=clock)
    settings = Settings(trainbot_bucket=BUCKET, trainbot_role_arn=role_arn, trainbot_home=home,
                        trainbot_relaunch_backoff_seconds=0)
    service = JobService(store=store, backend=backend, settings=settings, clock=clock)
    return store, backend, service, requests


def _measure(requests: Requests, step: Any) -> tuple[Any, int, float]:
    before = requests.total()
    started = time.perf_counter()
    result = step()
    return result, requests.total() - before, time.perf_counter() - started


def run(jobs: int) -> None:
    from bot.wiring import build_watcher
    from jobs.clock import SystemClock
    from jobs.planning.grammar import parse_command
    from jobs.planning.plan import build_plan
    from jobs.settings import Settings
    from tests.support.moto_server import set_training_job_state

    server = start_moto()
    role_arn = ROLE_ARN
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            started = time.perf_counter()
            store, backend, service, requests = _arrange(jobs, home, role_arn)
            print(f"arranged {jobs} InProgress jobs and RUNNING lineages in {time.perf_counter() - started:.1f} s")
            settings = Settings(trainbot_bucket=BUCKET, trainbot_role_arn=role_arn, trainbot_home=home,
                                trainbot_relaunch_backoff_seconds=0)
            watcher = build_watcher(store, backend, SystemClock(), settings)
            # The SDK session is built on a process's first launch; the bot pays that once, at its start.
            backend.launch("bench-warm-1", build_plan(parse_command(PLAN_TEXT), bucket=BUCKET, lineage_id="bench-warm"))

            first, first_calls, first_s = _measure(requests, watcher.poll_once)
            print(f"first cycle ever (no cursor)  {first_calls:6d} requests {first_s * 1000:8.0f} ms "
                  f"({len(first.described)} described once)")

            counts_before = Counter(requests.count)
            quiet, quiet_calls, quiet_s = _measure(requests, watcher.poll_once)
            by_op = dict(requests.count - counts_before)
            active = [a.job_name for a in store.active_attempts()]
            _, naive_calls, naive_s = _measure(requests, lambda: [backend.describe(name) for name in active])
            print(f"quiet cycle, {len(active)} active jobs  {quiet_calls:6d} requests {quiet_s * 1000:8.0f} ms  "
                  f"{by_op}  (target <= 20)")
            print(f"naive cycle (describe each)   {naive_calls:6d} requests {naive_s * 1000:8.0f} ms")
            print(f"ratio naive / watcher         {naive_calls / max(quiet_calls, 1):6.1f}x requests "
                  f"{naive_s / quiet_s:8.1f}x time")

            middle = jobs // 2
            set_training_job_state(f"bench-{middle:04d}-1", "InProgress", "Interrupted")
            seen, seen_calls, seen_s = _measure(requests, watcher.poll_once)
            print(f"cycle after one interruption  {seen_calls:6d} requests {seen_s * 1000:8.0f} ms  "
                  f"changes seen: {seen.changes}  (target: the next poll)")

            lost_job = f"bench-{middle + 1:04d}"
            set_training_job_state(f"{lost_job}-1", "Stopped", "MaxWaitTimeExceeded", billable_seconds=60,
                                   training_seconds=300)
            lost, lost_calls, lost_s = _measure(requests, watcher.poll_once)
            detected = requests.detected[f"{lost_job}-1"]
            bot_s = requests.created[f"{lost_job}-2"] - detected
            print(f"cycle with a relaunch         {lost_calls:6d} requests {lost_s * 1000:8.0f} ms  "
                  f"actions: {[a for a in lost.actions if a.startswith('relaunched')]}")
            print(f"detection -> CreateTrainingJob sent   {bot_s * 1000:8.0f} ms  (target < 2000)")
            print("  (watcher, store, plan, then the SDK's estimator and source upload; see bench/launch.py)")
            again, again_calls, again_s = _measure(requests, watcher.poll_once)
            print(f"next cycle                    {again_calls:6d} requests {again_s * 1000:8.0f} ms  "
                  f"actions: {again.actions}")
    finally:
        server.stop()


def main() -> None:
    quiet_libraries()
    run(jobs_parser(__doc__).parse_args().jobs)


if __name__ == "__main__":
    main()

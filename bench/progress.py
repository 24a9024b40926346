"""What one live-progress update costs with 1,000 running SageMaker jobs, against one call per job.

    PYTHONPATH=. .venv/bin/python bench/progress.py [--jobs 1000]

On one moto server, in one run: a SQLite store holding one RUNNING lineage per job (with its forecast), and
each job's CloudWatch series as SageMaker publishes them from the metric definitions (two `step` points
and a `loss` point in the last minutes). Then:
1. a progress update by the bot (jobs.lifecycle.progress.ProgressTracker over the real SageMakerBackend):
   GetMetricData requests, queries in each, wall time, cards to redraw (target: <= 3 calls of <= 500 queries);
2. the next update (the loss rotation: each job's loss is read at least every other update);
3. the per-job way: one GetMetricData call per job for the same two series (the backend's metric_series
   costs more still: a describe and a ListMetrics per job on top).
Figures only; nothing here asserts on time. moto answers each query by scanning every stored point of every
period, so its time grows with queries x points; CloudWatch's does not.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from loopback_aws import (  # bench/ is the script's sys.path[0]
    BUCKET,
    ROLE_ARN,
    jobs_parser,
    quiet_libraries,
    start_moto,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PLAN_TEXT = "distilbert-spot"


class Requests:
    """GetMetricData requests the bot's session sends, and the queries in each."""

    def __init__(self) -> None:
        self.queries: list[int] = []

    def attach(self, session: Any) -> None:
        session.events.register("provide-client-params.cloudwatch.GetMetricData", self._sent)

    def _sent(self, params: dict[str, Any], **_: Any) -> None:
        self.queries.append(len(params.get("MetricDataQueries", [])))

    def since(self, mark: int) -> list[int]:
        return self.queries[mark:]


def _arrange(jobs: int, home: Path) -> tuple[Any, list[str]]:
    """One RUNNING lineage per job, with its launch forecast; returns the store and the job names."""
    from jobs import lineage as moves
    from jobs.clock import SystemClock
    from jobs.planning.forecast import forecast
    from jobs.planning.grammar import parse_command
    from jobs.planning.plan import checkpoint_uri
    from jobs.records import Actor
    from jobs.store.runs import RunHistory
    from jobs.store.store import Store

    clock = SystemClock()
    store = Store(f"sqlite:///{home / 'trainbot.db'}", clock=clock)
    store.migrate()
    runs = RunHistory(store, clock)
    spec = parse_command(PLAN_TEXT)
    planned = forecast(spec)
    names = []
    for index in range(jobs):
        lineage_id = f"bench-{index:04d}"
        store.create_lineage(lineage_id=lineage_id, spec=spec, backend="sagemaker",
                             checkpoint_uri=checkpoint_uri(BUCKET, lineage_id), actor=Actor("U1"),
                             estimated_usd=1.0)
        store.add_attempt(lineage_id, number=1, instance_type=spec.instance_type, spot=spec.spot)
        store.transition_attempt(f"{lineage_id}-1", moves.ATTEMPT_CONFIRMED)
        store.transition_lineage(lineage_id, moves.CONFIRM_LAUNCH)
        runs.record_launch(lineage_id, "sagemaker", spec, planned)
        names.append(f"{lineage_id}-1")
    return store, names


def _publish(names: list[str]) -> None:
    """Each job's series as SageMaker publishes them: step 100 then 160 two minutes apart, a loss."""
    import boto3

    from jobs.backends.sagemaker.training_jobs import METRIC_NAMESPACE

    now = datetime.now(timezone.utc)
    rows = []
    for n, name in enumerate(names):
        dimension = [{"Name": "TrainingJobName", "Value": name}]
        for metric, value, age in (("step", 100.0 + n % 7, 150), ("step", 160.0 + n % 7, 30),
                                   ("loss", 0.5 + n / 10_000, 30)):
            rows.append({"MetricName": metric, "Dimensions": dimension,
                         "Timestamp": now - timedelta(seconds=age), "Value": value})
    client = boto3.client("cloudwatch")
    for offset in range(0, len(rows), 1000):
        client.put_metric_data(Namespace=METRIC_NAMESPACE, MetricData=rows[offset : offset + 1000])


def _per_job(client: Any, names: list[str]) -> int:
    """The same two series, one GetMetricData call per job."""
    from jobs.backends.sagemaker.progress import WINDOW, _metric_query, _Query

    now = datetime.now(timezone.utc)
    for name in names:
        queries = [_metric_query(_Query("s0", name, "step")), _metric_query(_Query("l0", name, "loss"))]
        client.get_metric_data(MetricDataQueries=queries, StartTime=now - WINDOW, EndTime=now + timedelta(minutes=1))
    return len(names)


def run(jobs: int) -> None:
    from botocore.config import Config

    from jobs.backends.aws_session import make_boto_session
    from jobs.backends.sagemaker.progress import ProgressReader
    from jobs.backends.sagemaker.training_jobs import SageMakerBackend
    from jobs.clock import SystemClock
    from jobs.lifecycle.progress import ProgressTracker
    from jobs.settings import Settings

    server = start_moto()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            started = time.perf_counter()
            store, names = _arrange(jobs, home)
            _publish(names)
            print(f"arranged {jobs} RUNNING lineages and their CloudWatch series in "
                  f"{time.perf_counter() - started:.1f} s")
            requests = Requests()
            session = make_boto_session("us-east-1")
            requests.attach(session)
            clock = SystemClock()
            backend = SageMakerBackend(session, role_arn=ROLE_ARN, bucket=BUCKET, clock=clock)
            # moto answers a 500-query call in tens of seconds (it scans every point for every query and
            # period), past the bot's 10 s read timeout; CloudWatch does not. Same reader, patient client.
            patient = session.client("cloudwatch", config=Config(read_timeout=900, retries={"total_max_attempts": 1}))
            backend._progress = ProgressReader(patient, clock)
            settings = Settings(trainbot_bucket=BUCKET, trainbot_role_arn=ROLE_ARN, trainbot_home=home)
            tracker = ProgressTracker(store, backend, clock, settings)

            figures = []
            for label in ("first update", "next update"):
                mark = len(requests.queries)
                began = time.perf_counter()
                result = tracker.poll_once(force=True)
                took = time.perf_counter() - began
                calls = requests.since(mark)
                figures.append((len(calls), took))
                print(f"{label:<14} {len(calls):5d} GetMetricData calls, queries each {calls}  "
                      f"{took * 1000:8.0f} ms  ({result.found} jobs with progress, {len(result.updated)} cards "
                      f"to redraw)  (target <= 3 calls of <= 500 queries)")

            began = time.perf_counter()
            calls = _per_job(patient, names)
            took = time.perf_counter() - began
            print(f"per job        {calls:5d} GetMetricData calls, 2 queries each  {took * 1000:8.0f} ms")
            best_calls, best_s = figures[1]
            print(f"ratio per job / batched   {calls / max(best_calls, 1):6.0f}x calls  {took / best_s:6.1f}x time")
    finally:
        server.stop()


def main() -> None:
    quiet_libraries()
    run(jobs_parser(__doc__).parse_args().jobs)


if __name__ == "__main__":
    main()

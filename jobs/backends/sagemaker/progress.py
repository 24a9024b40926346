"""Live progress of many SageMaker training jobs from their metric definitions' CloudWatch series, in as few
GetMetricData calls as the queries allow (500 queries a call), never one call per job.

Each job's series are those SageMaker scrapes from its log with the plan's metric definitions (namespace
/aws/sagemaker/TrainingJobs, dimension TrainingJobName): ``step`` (from the ``[progress]`` line) and
``loss``. Every update reads every job's step series, which gives its step and how fast it moves. The
loss moves slowly, so when reading it for every job too would take more calls (over 250 jobs), each update
reads it for the half of the jobs read longest ago: every loss is at most two updates old, and 1,000 jobs
cost 3 calls (1,000 step queries + 500 loss queries) instead of 4.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from jobs.clock import Clock
from jobs.records import Progress

NAMESPACE = "/aws/sagemaker/TrainingJobs"
MAX_QUERIES_PER_CALL = 500  # GetMetricData's limit
PERIOD_S = 60  # SageMaker publishes the metric-definition series at one-minute resolution
#: How far back an update looks: the newest point, and enough earlier ones for a rate.
WINDOW = timedelta(minutes=15)
STEP_METRIC = "step"
LOSS_METRIC = "loss"


@dataclass(frozen=True)
class _Query:
    query_id: str
    job_name: str
    metric: str


class ProgressReader:
    """Keeps, per job, the last loss it read and when (the rotation above); one instance per backend."""

    def __init__(self, cloudwatch: Any, clock: Clock) -> None:
        self._cw = cloudwatch
        self._clock = clock
        self._update = 0
        self._loss_read: dict[str, int] = {}  # job -> the update that last read its loss
        self._loss: dict[str, tuple[float, datetime]] = {}  # job -> its latest loss and when it was logged
        self.calls = 0  # GetMetricData calls made, all updates together (the benchmark reads it)

    def progress(self, job_names: Sequence[str]) -> dict[str, Progress]:
        names = list(dict.fromkeys(job_names))
        if not names:
            return {}
        self._update += 1
        self._forget_all_but(names)
        losses = self._loss_turn(names)
        queries = [_Query(f"s{i}", name, STEP_METRIC) for i, name in enumerate(names)]
        queries += [_Query(f"l{i}", name, LOSS_METRIC) for i, name in enumerate(losses)]
        now = self._clock.now()
        series = self._read(queries, now - WINDOW, now + timedelta(seconds=PERIOD_S))
        for name in losses:
            self._loss_read[name] = self._update
            points = series.get((name, LOSS_METRIC))
            if points:
                self._loss[name] = (points[-1][1], points[-1][0])
        found = {name: _progress(series.get((name, STEP_METRIC), []), self._loss.get(name)) for name in names}
        return {name: p for name, p in found.items() if p is not None}

    def queries_for(self, jobs: int) -> int:
        """The queries one update of ``jobs`` running jobs makes (for the benchmark's figures)."""
        return jobs + (jobs if 2 * jobs <= MAX_QUERIES_PER_CALL else math.ceil(jobs / 2))

    def _loss_turn(self, names: list[str]) -> list[str]:
        if 2 * len(names) <= MAX_QUERIES_PER_CALL:
            return names
        oldest_first = sorted(names, key=lambda name: self._loss_read.get(name, 0))
        return oldest_first[: math.ceil(len(names) / 2)]

    def _forget_all_but(self, names: list[str]) -> None:
        keep = set(names)
        self._loss_read = {k: v for k, v in self._loss_read.items() if k in keep}
        self._loss = {k: v for k, v in self._loss.items() if k in keep}

    def _read(
        self, queries: list[_Query], start: datetime, end: datetime
    ) -> dict[tuple[str, str], list[tuple[datetime, float]]]:
        """(job, metric) -> its points, oldest first."""
        by_id = {q.query_id: q for q in queries}
        found: dict[tuple[str, str], list[tuple[datetime, float]]] = {}
        for chunk in _chunks(queries, MAX_QUERIES_PER_CALL):
            request: dict[str, Any] = {
                "MetricDataQueries": [_metric_query(q) for q in chunk],
                "StartTime": start,
                "EndTime": end,
                "ScanBy": "TimestampAscending",
            }
            while True:
                self.calls += 1
                page = self._cw.get_metric_data(**request)
                for result in page.get("MetricDataResults", []):
                    query = by_id[result["Id"]]
                    points = zip(result.get("Timestamps", []), result.get("Values", []), strict=False)
                    found.setdefault((query.job_name, query.metric), []).extend(
                        (_aware(at), float(value)) for at, value in points
                    )
                token = page.get("NextToken")
                if not token:
                    break
                request["NextToken"] = token
        return {key: sorted(points) for key, points in found.items()}


def _progress(steps: list[tuple[datetime, float]], loss: tuple[float, datetime] | None) -> Progress | None:
    if not steps and loss is None:
        return None
    step = int(steps[-1][1]) if steps else None
    rate = None
    if len(steps) >= 2:
        (t0, s0), (t1, s1) = steps[0], steps[-1]
        elapsed = (t1 - t0).total_seconds()
        rate = (s1 - s0) / elapsed if elapsed > 0 and s1 > s0 else None
    times = [at for at in ((steps[-1][0] if steps else None), (loss[1] if loss else None)) if at is not None]
    return Progress(step=step, loss=loss[0] if loss else None, steps_per_second=rate, at=max(times))


def _metric_query(query: _Query) -> dict[str, Any]:
    return {
        "Id": query.query_id,
        "MetricStat": {
            "Metric": {
                "Namespace": NAMESPACE,
                "MetricName": query.metric,
                "Dimensions": [{"Name": "TrainingJobName", "Value": query.job_name}],
            },
            "Period": PERIOD_S,
            "Stat": "Maximum" if query.metric == STEP_METRIC else "Average",
        },
        "ReturnData": True,
    }


def _chunks(items: list[_Query], size: int) -> Iterator[list[_Query]]:
    for offset in range(0, len(items), size):
        yield items[offset : offset + size]


def _aware(value: datetime) -> datetime:
    return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)

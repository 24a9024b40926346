"""The world of bench/slack_load.py: 1,000 RUNNING SageMaker jobs on moto with their CloudWatch series, the
bot's store, watcher, progress tracker and governed Slack chat on one FakeClock, the cards already posted, and
the window's seeded happenings (endings, failures, spot interruptions) applied to moto as SageMaker would.

moto answers each GetMetricData query by scanning every stored point for each period, which with 1,000 jobs
takes minutes a call; ``index_cloudwatch_queries`` makes each query read only its own series (the same
answers: ``check_index_answers_as_moto`` compares them with moto's own).
"""

from __future__ import annotations

import random
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from loopback_aws import BUCKET, ROLE_ARN, spot_job_request

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PLAN_TEXT = "distilbert-spot"
CHANNELS = 25
USERS = 100
AS_OF = re.compile(r"<!date\^(\d+)\^")


# ---------------------------------------------------------------- moto's GetMetricData, one series a query


def index_cloudwatch_queries() -> None:
    from moto.cloudwatch.models import CloudWatchBackend

    original = CloudWatchBackend.get_metric_data

    class _Series:
        def __init__(self, points: list[Any]) -> None:
            self._points = points

        def get_all_metrics(self) -> list[Any]:
            return self._points

    def indexed(self: Any, queries: list[dict[str, Any]], start_time: datetime, end_time: datetime,
                scan_by: str = "TimestampAscending") -> list[dict[str, Any]]:
        simple = all("MetricStat" in q and q["MetricStat"]["Metric"].get("Dimensions") for q in queries)
        if not simple:
            return original(self, queries, start_time, end_time, scan_by)
        series: dict[tuple[str, tuple[tuple[str, str], ...]], list[Any]] = defaultdict(list)
        for point in self.get_all_metrics():
            series[(point.name, _dims(point.dimensions))].append(point)
        answers = []
        for query in queries:
            metric = query["MetricStat"]["Metric"]
            key = (metric["MetricName"], tuple(sorted((d["Name"], d["Value"]) for d in metric["Dimensions"])))
            answers += original(_Series(series.get(key, [])), [query], start_time, end_time, scan_by)
        return answers

    def _dims(dimensions: list[Any]) -> tuple[tuple[str, str], ...]:
        return tuple(sorted((d.name, d.value) for d in dimensions))

    indexed.original = original  # type: ignore[attr-defined]
    CloudWatchBackend.get_metric_data = indexed  # type: ignore[method-assign]


def check_index_answers_as_moto(names: list[str], now: datetime) -> None:
    from moto.backends import get_backend
    from moto.cloudwatch.models import CloudWatchBackend
    from moto.core import DEFAULT_ACCOUNT_ID

    from jobs.backends.sagemaker.progress import WINDOW, _metric_query, _Query

    backend = get_backend("cloudwatch")[DEFAULT_ACCOUNT_ID]["us-east-1"]
    queries = [_metric_query(_Query(f"q{i}", name, metric)) for i, name in enumerate(names[:20])
               for metric in ("step", "loss")]
    queries = [{**q, "Id": f"{q['Id']}{n}"} for n, q in enumerate(queries)]
    start, end = (now - WINDOW).replace(tzinfo=None), (now + timedelta(minutes=1)).replace(tzinfo=None)
    ours = CloudWatchBackend.get_metric_data(backend, queries, start, end)
    theirs = CloudWatchBackend.get_metric_data.original(backend, queries, start, end)  # type: ignore[attr-defined]
    assert ours == theirs and any(a["values"] for a in ours), "the indexed GetMetricData answers differently"


# ---------------------------------------------------------------- the world


@dataclass
class World:
    clock: Any
    slack: Any
    store: Any
    services: Any
    chat: Any
    watcher: Any
    endings: Any  # the steps after each ending: the report is built and posted from here
    tracker: Any
    names: list[str]  # job names, by lineage index
    channel_of: dict[str, str]  # lineage -> channel
    start: float = 0.0  # the window's start, epoch seconds of the simulated clock
    ended_at: dict[str, float] = field(default_factory=dict)  # lineage -> its ending's LastModifiedTime


def arrange(jobs: int, home: Path, *, paced: bool) -> World:
    import boto3

    from bot.slack_chat import SlackChat, make_web_client
    from bot.slack_governor import SlackGovernor
    from bot.wiring import build_endings, build_watcher
    from handlers.context import Services
    from jobs import lineage as moves
    from jobs.backends.aws_session import make_boto_session
    from jobs.backends.sagemaker.training_jobs import SageMakerBackend
    from jobs.lifecycle.progress import ProgressTracker
    from jobs.lifecycle.service import JobService
    from jobs.planning.forecast import forecast
    from jobs.planning.grammar import parse_command
    from jobs.planning.plan import checkpoint_uri
    from jobs.records import Actor
    from jobs.settings import Settings
    from jobs.store.rate_ledger import StoreRateLedger
    from jobs.store.runs import RunHistory
    from jobs.store.store import Store
    from tests.support.clock import FakeClock
    from tests.support.moto_server import set_training_job_state
    from tests.support.slack_api import BOT_TOKEN, SlackApiServer

    clock = FakeClock(datetime.now(timezone.utc).replace(microsecond=0))
    slack = SlackApiServer(clock=lambda: clock.now().timestamp()).start()
    settings = Settings(slack_bot_token=BOT_TOKEN, slack_api_url=slack.base_url, trainbot_bucket=BUCKET,
                        trainbot_role_arn=ROLE_ARN, trainbot_home=home, trainbot_poll_seconds=30,
                        trainbot_progress_seconds=60)
    store = Store(f"sqlite:///{home / 'trainbot.db'}", clock=clock)
    store.migrate()
    backend = SageMakerBackend(make_boto_session("us-east-1"), role_arn=ROLE_ARN, bucket=BUCKET, clock=clock)
    jobs_service = JobService(store=store, backend=backend, settings=settings, clock=clock)
    services = Services(jobs=jobs_service, store=store, settings=settings, clock=clock, backend=backend)
    ledger = StoreRateLedger(store.engine)
    governor = SlackGovernor(ledger, clock) if paced else SlackGovernor.unpaced(clock, ledger)
    chat = SlackChat(make_web_client(settings, governor=governor))
    spec = parse_command(PLAN_TEXT)
    planned = forecast(spec)
    runs = RunHistory(store, clock)
    sagemaker = boto3.client("sagemaker")
    names, channel_of = [], {}
    for index in range(jobs):
        lineage_id = f"load{'p' if paced else 'u'}-{index:04d}"
        name = f"{lineage_id}-1"
        sagemaker.create_training_job(**spot_job_request(name, max_run=3600, max_wait=7200))
        set_training_job_state(name, "InProgress", "Training", at=clock.now() - timedelta(minutes=10))
        store.create_lineage(lineage_id=lineage_id, spec=spec, backend="sagemaker",
                             checkpoint_uri=checkpoint_uri(BUCKET, lineage_id),
                             actor=Actor(f"U{index % USERS:03d}", channel_id=f"C{index % CHANNELS:02d}", via="slack"),
                             estimated_usd=1.0)
        store.add_attempt(lineage_id, number=1, instance_type=spec.instance_type, spot=spec.spot)
        store.transition_attempt(name, moves.ATTEMPT_CONFIRMED)
        store.transition_lineage(lineage_id, moves.CONFIRM_LAUNCH)
        store.update_attempt(name, remote_status="InProgress", secondary_status="Training")
        runs.record_launch(lineage_id, "sagemaker", spec, planned)
        names.append(name)
        channel_of[lineage_id] = f"C{index % CHANNELS:02d}"
    watcher = build_watcher(store, backend, clock, settings)  # as the bot wires them
    endings = build_endings(store, backend, clock, settings)
    tracker = ProgressTracker(store, backend, clock, settings)
    return World(clock, slack, store, services, chat, watcher, endings, tracker, names, channel_of)


def publish_progress(world: World, minute: int) -> None:
    """Each running job's step and loss, as SageMaker publishes them from the metric definitions."""
    import boto3

    from jobs.backends.sagemaker.progress import NAMESPACE

    at = world.clock.now() - timedelta(seconds=5)
    rows = []
    for n, name in enumerate(world.names):
        if name.rsplit("-", 1)[0] in world.ended_at:
            continue
        dimension = [{"Name": "TrainingJobName", "Value": name}]
        rows.append({"MetricName": "step", "Dimensions": dimension, "Timestamp": at, "Value": 100.0 + 20 * minute + n % 7})
        rows.append({"MetricName": "loss", "Dimensions": dimension, "Timestamp": at, "Value": 2.0 / (2 + minute)})
    client = boto3.client("cloudwatch")
    for offset in range(0, len(rows), 1000):
        client.put_metric_data(Namespace=NAMESPACE, MetricData=rows[offset: offset + 1000])


def post_cards(world: World) -> dict[str, float]:
    """The cards as they were posted before the window (pacing off, limits off: earlier in the day), showing
    the progress read at the start; returns each card's as-of."""
    from bot.slack_chat import SlackChat
    from handlers.live import job_card
    from jobs.store.runs import RunHistory
    from tests.support.slack_bot import unpaced_web_client

    setup_chat = SlackChat(unpaced_web_client(world.services.settings))
    runs = RunHistory(world.store, world.clock)
    as_of = {}
    for lineage_id, channel in world.channel_of.items():
        text, blocks = job_card(world.services, world.store.get_lineage(lineage_id))
        ts = setup_chat.post(channel, text, blocks=blocks)
        world.store.set_message(lineage_id, channel, ts)
        runs.mark_current_progress_shown(lineage_id)
        found = AS_OF.search(str(blocks))
        as_of[lineage_id] = float(found.group(1)) if found else world.clock.now().timestamp()
    return as_of


def schedule(world: World, minutes: int, rng: random.Random) -> list[tuple[float, str, str]]:
    """(second, job, what) of the window: 70 completions, 30 failures, 100 interruptions (20 together in C00)."""
    window = minutes * 60
    lineages = list(world.channel_of)
    in_c00 = [lid for lid in lineages if world.channel_of[lid] == "C00"][:20]
    others = [lid for lid in lineages if lid not in in_c00]
    rng.shuffle(others)
    endings, changes = others[:100], others[100:180]
    events = [(rng.uniform(10, window - 10), f"{lid}-1", "completed" if i < 70 else "failed")
              for i, lid in enumerate(endings)]
    events += [(rng.uniform(10, window - 10), f"{lid}-1", "interrupted") for lid in changes]
    events += [(120 + rng.uniform(0, 5), f"{lid}-1", "interrupted") for lid in in_c00]
    return sorted(events)


def happen(world: World, job: str, what: str) -> None:
    from tests.support.moto_server import set_training_job_state

    at = world.clock.now()
    if what == "interrupted":
        set_training_job_state(job, "InProgress", "Interrupted", at=at)
        return
    world.ended_at[job.rsplit("-", 1)[0]] = at.timestamp()
    if what == "completed":
        set_training_job_state(job, "Completed", "Completed", billable_seconds=900, training_seconds=2400,
                               final_metrics={"eval_accuracy": 0.91, "train_loss": 0.2},
                               model_artifacts=f"s3://{BUCKET}/{job}/output/model.tar.gz", at=at)
    else:
        set_training_job_state(job, "Failed", "Failed", failure_reason="AlgorithmError: ValueError: bad label",
                               billable_seconds=300, training_seconds=300, at=at)

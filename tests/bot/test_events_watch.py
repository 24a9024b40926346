"""Job changes pushed by EventBridge, acted on at once by the bot's events loop (bot/wiring.py), with the real
SageMakerBackend, EventBridge and SQS on a moto server: one describe per change, then the watcher's own
mirror-and-settle path; a message is deleted only once its change is recorded."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from bot.wiring import Runtime, build_endings, build_watcher
from jobs.backends.sagemaker.events import EventQueue, setup_events
from jobs.clock import SystemClock
from jobs.lifecycle import events
from jobs.lifecycle.service import JobService
from jobs.lineage import AttemptStatus, LineageStatus
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import Store
from tests.support.moto_server import (  # noqa: F401  (fixtures)
    CallRecorder,
    ErrorAnswer,
    MotoAws,
    moto_aws,
    moto_server,
    sagemaker_backend,
    set_training_job_state,
)
from tests.support.sagemaker_events import endpoint_change, put_events, queue_counts, training_change

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
_IDS = itertools.count(1)


class Operations:
    """Every request the bot's AWS session sends, by operation (retries included)."""

    def __init__(self) -> None:
        self.count: Counter[str] = Counter()

    def attach(self, session: Any) -> None:
        session.events.register("before-send", self._sent)

    def _sent(self, event_name: str = "", **_: Any) -> None:
        self.count[event_name.split(".")[-1]] += 1


@dataclass
class Bot:
    aws: MotoAws
    runtime: Runtime
    queue_url: str
    created: CallRecorder
    sent: Operations

    def launch_running(self, text: str = "distilbert-spot") -> str:
        """A lineage whose first job is InProgress on SageMaker and RUNNING in the store; its job name."""
        lineage = self.runtime.jobs.launch(text, actor=ALICE)
        job = f"{lineage.id}-1"
        set_training_job_state(job, "InProgress", "Training")  # moto creates jobs Completed
        self.runtime.watcher.check_now([job])
        assert self.runtime.store.get_attempt(job).status is AttemptStatus.RUNNING
        return job


def _bot(aws: MotoAws, home: Path, queue: str, *, recorders: list[Any] | None = None, **settings: Any) -> Bot:
    done = setup_events(aws.boto_session(), queue_name=queue, region=aws.region)
    created, sent = CallRecorder("CreateTrainingJob"), Operations()
    session = aws.boto_session(recorders=[created, *(recorders or [])])
    sent.attach(session)
    clock = SystemClock()
    store = Store(f"sqlite:///{home / 'trainbot.db'}", clock=clock)
    store.migrate()
    options = {"trainbot_relaunch_backoff_seconds": 0, **settings}
    config = Settings(trainbot_bucket=aws.bucket, trainbot_role_arn=aws.role_arn, trainbot_home=home,
                      trainbot_events_queue=done.queue_url, **options)
    backend = sagemaker_backend(aws, session)
    jobs = JobService(store=store, backend=backend, settings=config, clock=clock,
                      new_lineage_id=lambda spec: f"ev{next(_IDS):03d}-{datetime.now():%H%M%S%f}")
    runtime = Runtime(settings=config, clock=clock, store=store, backend=backend, jobs=jobs,
                      watcher=build_watcher(store, backend, clock, config),
                      endings=build_endings(store, backend, clock, config),
                      events=EventQueue(session, done.queue_url, region=aws.region))
    return Bot(aws, runtime, done.queue_url, created, sent)


@pytest.fixture
def bot(moto_aws: MotoAws, tmp_path: Path) -> Iterator[Bot]:  # noqa: F811
    made = _bot(moto_aws, tmp_path, f"trainbot-ev-{next(_IDS)}")
    yield made
    made.runtime.store.dispose()


def test_an_event_relaunches_a_lost_spot_job_with_one_describe_and_its_message_goes(bot: Bot) -> None:
    job = bot.launch_running()
    set_training_job_state(job, "Stopped", "MaxWaitTimeExceeded", billable_seconds=60, training_seconds=300)
    before = Counter(bot.sent.count)
    put_events(bot.aws, training_change(job))
    assert bot.runtime.handle_events(wait_seconds=5) == 1

    spent = bot.sent.count - before
    relaunched = job.removesuffix("-1") + "-2"
    assert bot.created.by_name(relaunched)["CheckpointConfig"]["S3Uri"] == bot.created.by_name(job)[
        "CheckpointConfig"]["S3Uri"]
    assert (spent["DescribeTrainingJob"], spent["CreateTrainingJob"], spent["ListTrainingJobs"]) == (1, 1, 0)
    assert (spent["ReceiveMessage"], spent["DeleteMessageBatch"]) == (1, 1)
    assert bot.runtime.store.get_attempt(job).status is AttemptStatus.STOPPED
    kinds = [n.kind for n in bot.runtime.store.outbox.due_notifications(limit=100)]
    assert kinds.count(events.RELAUNCHED) == 1
    assert queue_counts(bot.aws, bot.queue_url) == (0, 0)


def test_duplicate_and_stale_events_still_act_once(bot: Bot) -> None:
    job = bot.launch_running()
    set_training_job_state(job, "Stopped", "MaxWaitTimeExceeded")
    # At least once and out of order: the same change twice, and an older "InProgress" after it.
    put_events(bot.aws, training_change(job), training_change(job), training_change(job, "InProgress", "Training"))
    handled = 0
    while handled < 3:
        handled += bot.runtime.handle_events(wait_seconds=2)
    put_events(bot.aws, training_change(job))  # and once more, later
    bot.runtime.handle_events(wait_seconds=2)
    assert [c["TrainingJobName"] for c in bot.created.calls].count(job.removesuffix("-1") + "-2") == 1
    kinds = [n.kind for n in bot.runtime.store.outbox.due_notifications(limit=100)]
    assert kinds.count(events.RELAUNCHED) == 1
    assert queue_counts(bot.aws, bot.queue_url) == (0, 0)


def test_an_event_for_a_job_the_bot_does_not_track_costs_no_describe(bot: Bot) -> None:
    before = Counter(bot.sent.count)
    put_events(bot.aws, training_change("someone-elses-job-1"))
    assert bot.runtime.handle_events(wait_seconds=5) == 1
    spent = bot.sent.count - before
    assert spent["DescribeTrainingJob"] == 0 and queue_counts(bot.aws, bot.queue_url) == (0, 0)


def test_a_change_that_could_not_be_recorded_keeps_its_message(moto_aws: MotoAws, tmp_path: Path) -> None:  # noqa: F811
    refuse = ErrorAnswer("DescribeTrainingJob", "ThrottlingException", "Rate exceeded")
    bot = _bot(moto_aws, tmp_path, "trainbot-ev-refused", recorders=[refuse])
    job = f"ev-unrecorded-{datetime.now():%H%M%S%f}-1"
    bot.runtime.store.create_lineage(lineage_id=job.removesuffix("-1"), spec=_spec(), backend="sagemaker",
                                     checkpoint_uri="s3://b/x/checkpoints", actor=ALICE, estimated_usd=1.0)
    bot.runtime.store.add_attempt(job.removesuffix("-1"), number=1, instance_type="ml.p3.2xlarge", spot=True)
    put_events(moto_aws, training_change(job))
    assert bot.runtime.handle_events(wait_seconds=5) == 0
    assert refuse.sent >= 1
    assert queue_counts(moto_aws, bot.queue_url) == (0, 1)  # still there: back after its visibility timeout
    bot.runtime.store.dispose()


def test_the_loop_acts_on_events_between_long_reconciliation_polls(bot: Bot) -> None:
    assert bot.runtime.settings.watch_seconds == 300  # events on, TRAINBOT_POLL_SECONDS unset
    job = bot.launch_running()
    loop = threading.Thread(target=bot.runtime.watch_until_stopped, daemon=True)
    loop.start()
    try:
        # The first (reconciliation) cycle has ended once the loop waits on the queue; its listing may take
        # several pages on a shared moto server, so counting its first page is not enough.
        _wait_for(lambda: bot.sent.count["ListTrainingJobs"] >= 1 and bot.sent.count["ReceiveMessage"] >= 1)
        lists = bot.sent.count["ListTrainingJobs"]
        set_training_job_state(job, "Stopped", "MaxWaitTimeExceeded")
        put_events(bot.aws, training_change(job))
        relaunched = job.removesuffix("-1") + "-2"
        _wait_for(lambda: _relaunched(bot.runtime.store.get_lineage(job.removesuffix("-1"))))
        assert any(c["TrainingJobName"] == relaunched for c in bot.created.calls)
        assert bot.sent.count["ListTrainingJobs"] == lists  # acted on the event, not on a poll
    finally:
        bot.runtime.stop_event.set()
        put_events(bot.aws, training_change("wake-the-long-poll-1"))
        loop.join(timeout=30)
    assert not loop.is_alive()


def test_a_relaunch_with_backoff_happens_when_due_not_at_the_next_poll(
    moto_aws: MotoAws, tmp_path: Path  # noqa: F811
) -> None:
    bot = _bot(moto_aws, tmp_path, "trainbot-ev-backoff", trainbot_relaunch_backoff_seconds=2)
    job = bot.launch_running()
    loop = threading.Thread(target=bot.runtime.watch_until_stopped, daemon=True)
    loop.start()
    try:
        set_training_job_state(job, "Stopped", "MaxWaitTimeExceeded")
        put_events(moto_aws, training_change(job))
        lineage_id = job.removesuffix("-1")
        _wait_for(lambda: bot.runtime.store.get_lineage(lineage_id).status is LineageStatus.RELAUNCHING)
        assert bot.created.calls[-1]["TrainingJobName"] == job  # waiting out its back-off
        _wait_for(lambda: any(c["TrainingJobName"] == f"{lineage_id}-2" for c in bot.created.calls))
    finally:
        bot.runtime.stop_event.set()
        put_events(moto_aws, training_change("wake-the-long-poll-1"))
        loop.join(timeout=30)
        bot.runtime.store.dispose()


def test_an_endpoint_event_follows_the_endpoints_at_once(bot: Bot) -> None:
    from jobs.endpoints.port import EndpointStatus
    from jobs.endpoints.service import EndpointService
    from tests.support.endpoints import LAUNCHER, FakeEndpoints, completed_lineage

    endpoints = FakeEndpoints()
    bot.runtime.endpoints = EndpointService(store=bot.runtime.store, backend=endpoints,
                                            settings=bot.runtime.settings, clock=bot.runtime.clock)
    lineage_id = f"ev-ep-{datetime.now():%H%M%S%f}"
    completed_lineage(bot.runtime.store, lineage_id)
    name = bot.runtime.endpoints.deploy(lineage_id, options={}, actor=LAUNCHER).name
    endpoints.set_status(name, "InService")
    put_events(bot.aws, endpoint_change(name, "IN_SERVICE"))
    assert bot.runtime.handle_events(wait_seconds=5) == 1
    assert bot.runtime.endpoints.get(name).status is EndpointStatus.IN_SERVICE
    assert queue_counts(bot.aws, bot.queue_url) == (0, 0)


def _relaunched(lineage: Any) -> bool:
    """The second attempt's launch is recorded (the create call went out and answered)."""
    return lineage.status is LineageStatus.RUNNING and len(lineage.attempts) == 2


def _spec() -> Any:
    from jobs.planning.grammar import parse_command

    return parse_command("distilbert-spot")


def _wait_for(condition: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)



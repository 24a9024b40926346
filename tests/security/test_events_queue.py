"""Issue 22, item 9: one bad message never stalls the events queue. A real SQS queue and EventBridge on a moto
server, the bot's events loop (bot.wiring.Runtime.handle_events) on the real SageMakerBackend.

A body of 100,000 nested brackets (json raises RecursionError on it) sits in front of a real failure event:
the failure is acted on, the bad message is set aside (not deleted), and after MAX_RECEIVES receives SQS moves
it to the dead-letter queue that `trainbot events setup` makes, idempotently, with the redrive policy.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.backends.sagemaker.events import DEAD_LETTER_SUFFIX, DEFAULT_QUEUE, MAX_RECEIVES
from jobs.lineage import LineageStatus
from tests.bot.test_events_watch import Bot, _bot
from tests.security.cli import trainbot
from tests.support.moto_server import (  # noqa: F401  (fixtures)
    MotoAws,
    moto_aws,
    moto_server,
    set_training_job_state,
)
from tests.support.sagemaker_events import put_events, queue_counts, training_change

NESTED = "[" * 100_000 + "]" * 100_000  # 200 KB, under SQS's 256 KB


@pytest.fixture
def bot(moto_aws: MotoAws, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Bot]:  # noqa: F811
    made = _bot(moto_aws, tmp_path, f"trainbot-poison-{request.node.name[-30:].strip('_')}")  # a queue each
    yield made
    made.runtime.store.dispose()


def dead_letter_url(aws: MotoAws, queue_url: str) -> str:
    attributes = aws.client("sqs").get_queue_attributes(QueueUrl=queue_url, AttributeNames=["RedrivePolicy"])
    target = json.loads(attributes["Attributes"]["RedrivePolicy"])["deadLetterTargetArn"]
    return str(aws.client("sqs").get_queue_url(QueueName=target.rsplit(":", 1)[-1])["QueueUrl"])


def test_a_deeply_nested_body_does_not_hold_back_the_failure_behind_it(bot: Bot) -> None:
    with pytest.raises(RecursionError):
        json.loads(NESTED)  # what every receive tripped over
    job = bot.launch_running()
    bot.aws.client("sqs").send_message(QueueUrl=bot.queue_url, MessageBody=NESTED)
    set_training_job_state(job, "Failed", "Failed", failure_reason="AlgorithmError: the script raised")
    put_events(bot.aws, training_change(job, "Failed", "Failed"))

    deadline = time.monotonic() + 60
    lineage = bot.runtime.store.get_lineage(job.removesuffix("-1"))
    while lineage.status is not LineageStatus.FAILED and time.monotonic() < deadline:
        bot.runtime.handle_events(wait_seconds=1)
        lineage = bot.runtime.store.get_lineage(lineage.id)
    assert lineage.status is LineageStatus.FAILED
    assert queue_counts(bot.aws, bot.queue_url) == (0, 1)  # the failure's message deleted; the bad one aside


def test_an_unreadable_message_goes_to_the_dead_letter_queue_after_a_few_receives(bot: Bot) -> None:
    sqs = bot.aws.client("sqs")
    sqs.set_queue_attributes(QueueUrl=bot.queue_url, Attributes={"VisibilityTimeout": "0"})  # back at once
    for body in (NESTED, "not json at all", json.dumps({"source": "aws.sagemaker",
                                                        "detail-type": "SageMaker Training Job State Change",
                                                        "detail": {"TrainingJobName": {"$gt": ""}}})):
        sqs.send_message(QueueUrl=bot.queue_url, MessageBody=body)
    rounds, deadline = 0, time.monotonic() + 60
    while queue_counts(bot.aws, bot.queue_url) != (0, 0) and time.monotonic() < deadline:
        assert bot.runtime.handle_events(wait_seconds=1) == 0  # nothing deleted, nothing raised
        rounds += 1
    dead = dead_letter_url(bot.aws, bot.queue_url)
    assert queue_counts(bot.aws, bot.queue_url) == (0, 0) and rounds > MAX_RECEIVES
    assert queue_counts(bot.aws, dead)[0] == 3
    bodies = [m["Body"] for m in sqs.receive_message(QueueUrl=dead, MaxNumberOfMessages=10)["Messages"]]
    assert NESTED in bodies


def test_events_setup_makes_the_dead_letter_queue_and_redrive_policy_once(moto_aws: MotoAws, tmp_path: Path) -> None:  # noqa: F811
    env = {**os.environ, "TRAINBOT_HOME": str(tmp_path / "home")}
    first, again = trainbot(env, "events", "setup"), trainbot(env, "events", "setup")
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    url = first.stdout.strip().splitlines()[-1]
    assert url == again.stdout.strip().splitlines()[-1]
    sqs = moto_aws.client("sqs")
    dead = dead_letter_url(moto_aws, url)
    assert dead.endswith(DEFAULT_QUEUE + DEAD_LETTER_SUFFIX) and dead in first.stderr
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])[
        "Attributes"]["RedrivePolicy"])
    assert int(policy["maxReceiveCount"]) == MAX_RECEIVES
    assert [q for q in sqs.list_queues()["QueueUrls"] if q.endswith(DEFAULT_QUEUE + DEAD_LETTER_SUFFIX)] == [dead]

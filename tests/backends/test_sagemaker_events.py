"""`trainbot events setup` and the events queue on a moto server: the queue, the rule for SageMaker's state
changes, its target and the queue policy are made once however often setup runs, and EventBridge's
deliveries come out of the queue as notices naming the job or endpoint to look at."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.backends.sagemaker.events import (
    DEFAULT_QUEUE,
    EVENT_PATTERN,
    RULE_NAME,
    ChangeNotice,
    EventQueue,
    setup_events,
)
from jobs.errors import ConfigError
from tests.support.moto_server import MotoAws
from tests.support.sagemaker_events import endpoint_change, put_events, queue_counts, training_change

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bot", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, timeout=120)


def test_events_setup_creates_queue_rule_target_and_policy_once(moto_aws: MotoAws, tmp_path: Path) -> None:
    env = {"TRAINBOT_HOME": str(tmp_path)}
    first = _cli("events", "setup", env=env)
    assert first.returncode == 0, first.stderr
    again = _cli("events", "setup", env=env)
    assert again.returncode == 0, again.stderr
    url = first.stdout.strip().splitlines()[-1]
    assert url == again.stdout.strip().splitlines()[-1] and url.endswith(DEFAULT_QUEUE)
    assert "TRAINBOT_EVENTS_QUEUE" in first.stderr

    events, sqs = moto_aws.client("events"), moto_aws.client("sqs")
    [rule] = [r for r in events.list_rules()["Rules"] if r["Name"] == RULE_NAME]
    assert json.loads(rule["EventPattern"]) == EVENT_PATTERN
    assert EVENT_PATTERN["detail-type"] == ["SageMaker Training Job State Change", "SageMaker Endpoint State Change"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    [target] = events.list_targets_by_rule(Rule=RULE_NAME)["Targets"]
    assert target["Arn"] == queue_arn
    policy = json.loads(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"])
    [statement] = policy["Statement"]
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert (statement["Action"], statement["Resource"]) == ("sqs:SendMessage", queue_arn)
    assert statement["Condition"] == {"ArnEquals": {"aws:SourceArn": rule["Arn"]}}
    assert [q for q in sqs.list_queues().get("QueueUrls", []) if q.endswith(DEFAULT_QUEUE)] == [url]


def test_a_put_event_comes_out_of_the_queue_as_a_notice_and_is_gone_once_deleted(moto_aws: MotoAws) -> None:
    done = setup_events(moto_aws.boto_session(), queue_name="trainbot-notices", region=moto_aws.region)
    queue = EventQueue(moto_aws.boto_session(), "trainbot-notices", region=moto_aws.region)  # by name
    assert queue.url == done.queue_url
    put_events(moto_aws, training_change("job-a-1"), endpoint_change("ep-a"),
               {"Source": "aws.ec2", "DetailType": "EC2 Instance State-change Notification", "Detail": "{}"})
    notices = queue.receive(wait_seconds=5)
    assert sorted((n.kind, n.name) for n in notices) == [("endpoint", "ep-a"), ("training", "job-a-1")]
    assert queue_counts(moto_aws, done.queue_url) == (0, 2)  # received, hidden until deleted
    queue.delete([n.receipt for n in notices])
    assert queue_counts(moto_aws, done.queue_url) == (0, 0)
    assert queue.receive(wait_seconds=0) == []


def test_a_message_that_is_not_a_sagemaker_change_is_an_other_notice(moto_aws: MotoAws) -> None:
    done = setup_events(moto_aws.boto_session(), queue_name="trainbot-odd", region=moto_aws.region)
    moto_aws.client("sqs").send_message(QueueUrl=done.queue_url, MessageBody='{"source": "aws.ec2"}')
    [notice] = EventQueue(moto_aws.boto_session(), done.queue_url).receive(wait_seconds=1)
    assert notice == ChangeNotice("other", "", notice.receipt) and notice.receipt


def test_a_message_that_cannot_be_read_is_an_unreadable_notice(moto_aws: MotoAws) -> None:
    """Kept, not deleted: SQS moves it to the dead-letter queue (tests/security/test_events_queue.py)."""
    done = setup_events(moto_aws.boto_session(), queue_name="trainbot-odd", region=moto_aws.region)
    moto_aws.client("sqs").send_message(QueueUrl=done.queue_url, MessageBody="not json")
    [notice] = EventQueue(moto_aws.boto_session(), done.queue_url).receive(wait_seconds=1)
    assert notice == ChangeNotice("unreadable", "", notice.receipt)


@pytest.mark.iam_unchecked("a queue outside the trainbot-* names iam-policy.json covers, on purpose")
def test_a_queue_name_that_does_not_exist_is_one_sentence(moto_aws: MotoAws) -> None:
    queue = EventQueue(moto_aws.boto_session(), "no-such-queue", region=moto_aws.region)
    with pytest.raises(ConfigError, match="trainbot events setup"):
        queue.receive(wait_seconds=0)


def test_iam_policy_allows_every_call_of_setup_and_the_queue(moto_aws: MotoAws) -> None:
    """Each request `events setup` and the bot's queue send is allowed by iam-policy.json, on a resource its
    statement covers (the queue and the rule are named trainbot-*)."""
    sent: list[str] = []
    session = moto_aws.boto_session()
    session.events.register("before-send", lambda event_name="", **_: sent.append(event_name))
    setup_events(session, region=moto_aws.region)
    queue = EventQueue(session, DEFAULT_QUEUE, region=moto_aws.region)
    put_events(moto_aws, training_change("iam-check-1"))
    queue.delete([n.receipt for n in queue.receive(wait_seconds=2)])

    policy = json.loads((ROOT / "iam-policy.json").read_text())
    allowed = {action: statement["Resource"] for statement in policy["Statement"]
               for action in ([statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"])}
    # IAM names the batch delete by the single one; the rest are the operation names.
    needed = {_iam_action(name) for name in sent}
    assert needed == {"sqs:CreateQueue", "sqs:GetQueueAttributes", "sqs:SetQueueAttributes", "sqs:GetQueueUrl",
                      "sqs:ReceiveMessage", "sqs:DeleteMessage", "events:PutRule", "events:PutTargets"}
    for action in needed:
        assert action in allowed, f"iam-policy.json does not allow {action}"
        service = action.split(":")[0]
        assert allowed[action] == ("arn:aws:sqs:*:*:trainbot-*" if service == "sqs" else
                                   "arn:aws:events:*:*:rule/trainbot-*")
    assert RULE_NAME.startswith("trainbot-") and DEFAULT_QUEUE.startswith("trainbot-")


def _iam_action(event_name: str) -> str:
    _, service, operation = event_name.split(".")  # before-send.<service>.<Operation>
    operation = {"DeleteMessageBatch": "DeleteMessage"}.get(operation, operation)
    return f"{'events' if service == 'eventbridge' else service}:{operation}"

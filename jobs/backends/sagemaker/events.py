"""SageMaker's state changes pushed to the bot: an EventBridge rule sends them to an SQS queue it long-polls.

`setup_events` makes (idempotently: every call is an upsert) the queue, the rule for `aws.sagemaker`'s
training-job and endpoint state changes, the rule's target, and the queue policy that lets EventBridge send.
`EventQueue` receives the messages as `ChangeNotice`s and deletes them once the bot has recorded the change.

Events come at least once and in any order, so a notice only says "look at this job now": the watcher
describes the job and acts on what SageMaker answers, never on the event's own fields.

A message is outside input like any other: one that cannot be read (any exception: bad JSON, a body nested
too deep for the parser, a name SageMaker would never send) becomes an "unreadable" notice that is never
deleted, so it neither stops the rest of its batch nor comes back for ever: after MAX_RECEIVES receives SQS
moves it to the dead-letter queue `setup_events` makes beside the queue (RedrivePolicy), to be looked at.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Literal

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from jobs.backends.aws_session import CONNECT_TIMEOUT_S, MAX_ATTEMPTS, endpoint_of, make_boto_session
from jobs.backends.sagemaker.errors import AwsContext, aws_errors, error_code
from jobs.errors import ConfigError
from jobs.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_QUEUE = "trainbot-sagemaker-events"
RULE_NAME = "trainbot-sagemaker-state-changes"
TARGET_ID = "trainbot-queue"
TRAINING_CHANGE = "SageMaker Training Job State Change"
ENDPOINT_CHANGE = "SageMaker Endpoint State Change"
EVENT_PATTERN = {"source": ["aws.sagemaker"], "detail-type": [TRAINING_CHANGE, ENDPOINT_CHANGE]}
WAIT_SECONDS = 20  # SQS's longest long poll
#: A received message stays hidden this long; one whose change was not recorded (an error, a crash) comes
#: back after it and is handled again. Far longer than one describe and a relaunch take.
VISIBILITY_SECONDS = 120
RETENTION_SECONDS = 86_400  # older changes are caught by the periodic poll anyway
BATCH = 10  # SQS's most messages per receive or delete
#: Receives of one message before SQS moves it to the dead-letter queue (a message the bot cannot read, or one
#: whose job could not be looked at that often: the periodic poll catches its change anyway).
MAX_RECEIVES = 5
DEAD_LETTER_SUFFIX = "-dead-letters"
DEAD_LETTER_RETENTION_SECONDS = 1_209_600  # SQS's longest: 14 days to look at what was set aside
#: The names SageMaker gives training jobs and endpoints (its own rule); anything else is not its event.
_SAGEMAKER_NAME = re.compile(r"[a-zA-Z0-9](?:-*[a-zA-Z0-9]){0,62}")


@dataclass(frozen=True)
class EventsSetup:
    queue_url: str
    queue_arn: str
    rule_arn: str
    dead_letter_url: str = ""
    dead_letter_arn: str = ""


@dataclass(frozen=True)
class ChangeNotice:
    """One queued event: which training job or endpoint to look at now. `kind` "other" is a message that
    is not a SageMaker change the bot follows (deleted unread); "unreadable" one it could not read (kept, so
    SQS moves it to the dead-letter queue)."""

    kind: Literal["training", "endpoint", "other", "unreadable"]
    name: str
    receipt: str


def setup_events(session: boto3.Session, *, queue_name: str = DEFAULT_QUEUE, region: str | None = None
                 ) -> EventsSetup:
    """The queue, its dead-letter queue, the rule, its target and the queue policy; safe to run again (each
    call is an upsert)."""
    sqs = session.client("sqs", region_name=region)
    events = session.client("events", region_name=region)
    queue_url, queue_arn = _queue(sqs, queue_name)
    dead_name = queue_name[: 80 - len(DEAD_LETTER_SUFFIX)] + DEAD_LETTER_SUFFIX  # SQS names are at most 80
    dead_url, dead_arn = _queue(sqs, dead_name)
    with aws_errors(AwsContext(action=f"create the EventBridge rule {RULE_NAME}", endpoint=endpoint_of(events))):
        rule_arn = events.put_rule(
            Name=RULE_NAME, EventPattern=json.dumps(EVENT_PATTERN), State="ENABLED",
            Description="SageMaker training job and endpoint state changes, for trainbot",
        )["RuleArn"]
        failed = events.put_targets(Rule=RULE_NAME, Targets=[{"Id": TARGET_ID, "Arn": queue_arn}])
    if failed.get("FailedEntryCount"):
        reason = failed["FailedEntries"][0].get("ErrorMessage", "no reason given")
        raise ConfigError(f"EventBridge refused the queue {queue_name} as the rule's target: {reason}")
    with aws_errors(AwsContext(action=f"set the policy of the SQS queue {queue_name}", endpoint=endpoint_of(sqs))):
        sqs.set_queue_attributes(QueueUrl=queue_url, Attributes={
            "Policy": json.dumps(queue_policy(queue_arn, rule_arn)),
            "VisibilityTimeout": str(VISIBILITY_SECONDS),
            "MessageRetentionPeriod": str(RETENTION_SECONDS),
            "ReceiveMessageWaitTimeSeconds": str(WAIT_SECONDS),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dead_arn, "maxReceiveCount": str(MAX_RECEIVES)}),
        })
        sqs.set_queue_attributes(QueueUrl=dead_url, Attributes={
            "MessageRetentionPeriod": str(DEAD_LETTER_RETENTION_SECONDS),
        })
    log.info("events set up: rule %s -> queue %s (dead letters: %s)", rule_arn, queue_url, dead_url)
    return EventsSetup(queue_url=queue_url, queue_arn=queue_arn, rule_arn=rule_arn, dead_letter_url=dead_url,
                       dead_letter_arn=dead_arn)


def _queue(sqs: Any, name: str) -> tuple[str, str]:
    """(URL, ARN) of the queue ``name``, made if it is not there (CreateQueue returns an existing one)."""
    with aws_errors(AwsContext(action=f"create the SQS queue {name}", endpoint=endpoint_of(sqs))):
        url = sqs.create_queue(QueueName=name)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return str(url), str(arn)


def setup_from_settings(settings: Settings, queue: str | None = None) -> EventsSetup:
    """`trainbot events setup`: the queue named by `queue`, else by TRAINBOT_EVENTS_QUEUE (a name or a URL),
    else DEFAULT_QUEUE, in AWS_DEFAULT_REGION."""
    name = (queue or settings.trainbot_events_queue or DEFAULT_QUEUE).rstrip("/").rsplit("/", 1)[-1]
    region = settings.aws_region or None
    return setup_events(make_boto_session(region), queue_name=name, region=region)


def queue_policy(queue_arn: str, rule_arn: str) -> dict[str, Any]:
    """EventBridge may send to the queue, and only for this rule."""
    return {
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "TrainbotSageMakerEvents",
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": queue_arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}},
        }],
    }


class EventQueue:
    """The queue the rule fills, long-polled by the bot."""

    def __init__(self, session: boto3.Session, queue: str, *, region: str | None = None) -> None:
        # A long poll holds the connection up to WAIT_SECONDS: the read timeout must outlast it.
        config = Config(retries={"mode": "adaptive", "total_max_attempts": MAX_ATTEMPTS},
                        connect_timeout=CONNECT_TIMEOUT_S, read_timeout=WAIT_SECONDS + 10)
        self._sqs = session.client("sqs", region_name=region, config=config)
        self._queue = queue
        self._url = queue if queue.startswith(("https://", "http://")) else ""

    @property
    def url(self) -> str:
        """The queue's URL (a name is looked up once, on first use: commands that never poll ask nothing)."""
        if not self._url:
            self._url = self._resolve(self._queue)
        return self._url

    @classmethod
    def from_settings(cls, settings: Settings) -> EventQueue:
        region = settings.aws_region or None
        return cls(make_boto_session(region), settings.trainbot_events_queue, region=region)

    def receive(self, wait_seconds: float = WAIT_SECONDS) -> list[ChangeNotice]:
        """Up to ten notices, waiting at most `wait_seconds` (whole seconds, 0 to 20) for the first."""
        wait = max(0, min(WAIT_SECONDS, int(wait_seconds)))
        with aws_errors(self._ctx("receive from")):
            answer = self._sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=BATCH, WaitTimeSeconds=wait)
        return [_notice(message) for message in answer.get("Messages", [])]

    def delete(self, receipts: list[str]) -> None:
        """Done with these messages: the changes they announced are recorded."""
        for start in range(0, len(receipts), BATCH):
            entries = [{"Id": str(i), "ReceiptHandle": r} for i, r in enumerate(receipts[start:start + BATCH])]
            with aws_errors(self._ctx("delete messages from")):
                answer = self._sqs.delete_message_batch(QueueUrl=self.url, Entries=entries)
            for failure in answer.get("Failed", []):
                # Not fatal: the message comes back after its visibility timeout and is handled again.
                log.warning("could not delete an event message: %s", failure.get("Message", failure))

    def _resolve(self, queue: str) -> str:
        with aws_errors(self._ctx(f"find the queue {queue} as")):
            try:
                return str(self._sqs.get_queue_url(QueueName=queue)["QueueUrl"])
            except ClientError as exc:
                if error_code(exc) in ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
                    raise ConfigError(
                        f"TRAINBOT_EVENTS_QUEUE names the queue {queue!r}, which does not exist here: run "
                        "`trainbot events setup` to create it, or set the queue's URL."
                    ) from exc
                raise

    def _ctx(self, action: str) -> AwsContext:
        return AwsContext(action=f"{action} the events queue", endpoint=endpoint_of(self._sqs))


def _notice(message: dict[str, Any]) -> ChangeNotice:
    """Never raises: whatever reading one message throws sets that message aside, not its batch."""
    receipt = str(message.get("ReceiptHandle", ""))
    try:
        return _read(message, receipt)
    except Exception as exc:  # RecursionError from a deeply nested body included
        log.warning("events-queue message %s cannot be read (%s); left for the dead-letter queue",
                    str(message.get("MessageId", "?"))[:80], type(exc).__name__)
        return ChangeNotice("unreadable", "", receipt)


def _read(message: dict[str, Any], receipt: str) -> ChangeNotice:
    event = json.loads(message.get("Body") or "")
    if not isinstance(event, dict) or event.get("source") != "aws.sagemaker":
        log.info("an events-queue message is not a SageMaker change; deleted")
        return ChangeNotice("other", "", receipt)
    detail_type, detail = event.get("detail-type"), event.get("detail")
    field = {TRAINING_CHANGE: "TrainingJobName", ENDPOINT_CHANGE: "EndpointName"}.get(str(detail_type))
    if field is None:
        return ChangeNotice("other", "", receipt)
    name = detail.get(field) if isinstance(detail, dict) else None
    if not isinstance(name, str) or not _SAGEMAKER_NAME.fullmatch(name):
        raise ValueError(f"{field} is not a SageMaker name")
    return ChangeNotice("training" if field == "TrainingJobName" else "endpoint", name, receipt)

"""SageMaker state-change events put on moto's EventBridge bus, as SageMaker itself sends them."""

from __future__ import annotations

import json
from typing import Any

from tests.support.moto_server import MotoAws

TRAINING_CHANGE = "SageMaker Training Job State Change"
ENDPOINT_CHANGE = "SageMaker Endpoint State Change"


def training_change(job_name: str, status: str = "Stopped", secondary: str = "MaxWaitTimeExceeded") -> dict[str, Any]:
    """One PutEvents entry shaped like SageMaker's (the detail is DescribeTrainingJob's answer)."""
    detail = {"TrainingJobName": job_name, "TrainingJobStatus": status, "SecondaryStatus": secondary}
    return {"Source": "aws.sagemaker", "DetailType": TRAINING_CHANGE, "Detail": json.dumps(detail)}


def endpoint_change(endpoint_name: str, status: str = "IN_SERVICE") -> dict[str, Any]:
    detail = {"EndpointName": endpoint_name, "EndpointStatus": status}
    return {"Source": "aws.sagemaker", "DetailType": ENDPOINT_CHANGE, "Detail": json.dumps(detail)}


def put_events(aws: MotoAws, *entries: dict[str, Any]) -> None:
    answer = aws.client("events").put_events(Entries=list(entries))
    assert answer["FailedEntryCount"] == 0, answer


def queue_counts(aws: MotoAws, queue_url: str) -> tuple[int, int]:
    """(messages waiting, messages received and not yet deleted)."""
    attributes = aws.client("sqs").get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])

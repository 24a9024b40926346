"""iam-policy.json, the bot's own AWS identity: least privilege that matches the code.

Every test of the suite checks the AWS calls the bot made in it against the policy (tests/conftest.py, with the
recorder of tests/support/aws_calls.py and the evaluator of tests/support/iam_policy.py). Here the boundary is
attacked: the bot, on the real SageMaker backend against moto, asked to stop a training job or to change, delete
or invoke an endpoint it did not make, makes a call the policy refuses; what it made itself it may act on.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from jobs.backends.sagemaker.endpoint_updates import ENDPOINT_TAG
from jobs.errors import BackendError
from tests.support.aws_calls import RECORDER, AwsCall
from tests.support.iam_policy import POLICY_FILE, REQUESTS, Request, allowed, denied, load_policy
from tests.support.moto_server import BUCKET, MotoAws, moto_aws, moto_server, plan_for, sagemaker_backend  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
CODE = f"{BUCKET}-code/team/"


def statements() -> list[dict]:
    return load_policy(BUCKET, CODE)


def test_the_policy_names_no_action_the_code_never_calls() -> None:
    needed = {request.action.lower() for name, describe in REQUESTS.items() for request in describe(_sample(name))}
    granted = {action.lower() for s in statements() for action in ([s["Action"]] if isinstance(s["Action"], str)
                                                                     else s["Action"])}
    assert granted <= needed, f"iam-policy.json allows actions no call of the bot needs: {sorted(granted - needed)}"
    assert not any("*" in action for action in granted), "no action wildcards: each action is one the code calls"


def test_destructive_and_invoking_actions_are_scoped_to_what_the_bot_tagged() -> None:
    job = "arn:aws:sagemaker:us-east-1:123456789012:training-job/someone-elses-job"
    endpoint = "arn:aws:sagemaker:us-east-1:123456789012:endpoint/prod-payments"
    for action, resource, tag in [("sagemaker:StopTrainingJob", job, "trainbot:lineage"),
                                  ("sagemaker:UpdateEndpoint", endpoint, ENDPOINT_TAG),
                                  ("sagemaker:DeleteEndpoint", endpoint, ENDPOINT_TAG),
                                  ("sagemaker:DeleteEndpointConfig", endpoint.replace("endpoint/", "endpoint-config/"), ENDPOINT_TAG),
                                  ("sagemaker:InvokeEndpoint", endpoint, ENDPOINT_TAG)]:
        assert not allowed(Request(action, resource), statements()), f"{action} on an untagged resource"
        assert allowed(Request(action, resource, {f"aws:ResourceTag/{tag}": "x"}), statements()), action
    untagged_create = Request("sagemaker:CreateTrainingJob", job, {"aws:TagKeys": []})
    assert not allowed(untagged_create, statements())
    foreign_tag = Request("sagemaker:AddTags", job, {"aws:RequestTag/trainbot:lineage": "x", "aws:TagKeys": ["owner"]})
    assert not allowed(foreign_tag, statements())
    assert not allowed(Request("logs:GetLogEvents", "arn:aws:logs:us-east-1:1:log-group:/app/payments:log-stream:x"),
                       statements())
    assert not allowed(Request("cloudwatch:PutMetricAlarm", "arn:aws:cloudwatch:us-east-1:1:alarm:billing"),
                       statements())


def test_s3_reaches_the_bucket_and_the_code_sources_only() -> None:
    assert allowed(Request("s3:GetObject", f"arn:aws:s3:::{BUCKET}/trainbot/x/model.tar.gz"), statements())
    assert allowed(Request("s3:AbortMultipartUpload", f"arn:aws:s3:::{BUCKET}/trainbot/x/code.tar.gz"), statements())
    assert allowed(Request("s3:GetObject", f"arn:aws:s3:::{CODE}train.tar.gz"), statements())
    assert not allowed(Request("s3:PutObject", f"arn:aws:s3:::{CODE}train.tar.gz"), statements())
    assert not allowed(Request("s3:GetObject", "arn:aws:s3:::payroll/2026.csv"), statements())


@pytest.mark.iam_unchecked("the bot attempts a refused stop on purpose; the test judges its calls itself")
def test_the_bot_may_stop_its_own_job_and_not_one_it_did_not_launch(moto_aws: MotoAws) -> None:  # noqa: F811
    backend = sagemaker_backend(moto_aws)
    ours = plan_for("distilbert-spot", "iam-ours")
    backend.launch("iam-ours-1", ours)
    theirs = "someone-elses-job"
    created = dict(_request_of("sagemaker.CreateTrainingJob"), TrainingJobName=theirs)
    created.pop("Tags", None)
    moto_aws.client("sagemaker").create_training_job(**created)
    start = RECORDER.mark()
    for job in ("iam-ours-1", theirs):
        with contextlib.suppress(BackendError):  # moto answers StopTrainingJob with a 500; IAM judges the request
            backend.stop(job)
    stops = [c for c in RECORDER.calls(start) if c.name == "sagemaker.StopTrainingJob" and not c.by_test]
    assert {c.params["TrainingJobName"] for c in stops} == {"iam-ours-1", theirs}
    problems = denied(stops, bucket=BUCKET)
    assert len(problems) == 1 and theirs in problems[0] and "StopTrainingJob" in problems[0], problems


def test_the_readme_and_the_policy_name_the_same_placeholders() -> None:
    policy = POLICY_FILE.read_text()
    readme = (ROOT / "README.md").read_text()
    for placeholder in ("YOUR-TRAINBOT-BUCKET", "YOUR-CODE-BUCKET/YOUR-CODE-PREFIX"):
        assert placeholder in policy and placeholder in readme
    execution = json.loads((ROOT / "execution-role-policy.json").read_text())
    assert "AmazonSageMakerFullAccess" not in readme
    assert all(s["Resource"] != "*" or s["Action"] in (["ecr:GetAuthorizationToken"], "ecr:GetAuthorizationToken")
               for s in execution["Statement"] if s.get("Sid") != "TrainingMetrics")


def _request_of(name: str) -> dict:
    found = [c for c in RECORDER.calls() if c.name == name and not c.by_test]
    assert found, f"the bot made no {name}"
    return dict(found[-1].params)


def _sample(name: str) -> AwsCall:
    """A call of ``name`` with every parameter the mapping reads, to list the actions it needs."""
    service, operation = name.split(".", 1)
    params = {key: "x" for key in ("TrainingJobName", "EndpointName", "EndpointConfigName", "ModelName",
                                   "ModelPackageGroupName", "ModelPackageName", "ModelPackageArn", "Bucket",
                                   "Key", "logGroupName", "logStreamName", "QueueName", "QueueUrl", "Name",
                                   "Rule", "AlarmName", "RoleArn", "SecretId")}
    params["Tags"] = [{"Key": "trainbot:x", "Value": "y"}]
    return AwsCall(service, operation, params, "us-east-1", by_test=False)

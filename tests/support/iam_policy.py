"""iam-policy.json, evaluated against the AWS calls the bot makes in the suite (tests/support/aws_calls.py).

``REQUESTS`` says, for every operation the bot's code calls, which IAM actions it needs on which resources, and
with which request context (the tags a create call sends, the role it passes); ``denied`` evaluates each such
request against the policy's Allow statements the way IAM does for the parts the policy uses: actions and
resources with wildcards, and the condition operators StringEquals, StringLike, ForAllValues:StringLike and
Null over ``aws:RequestTag/*``, ``aws:ResourceTag/*``, ``aws:TagKeys`` and ``iam:PassedToService``. An
operation missing from ``REQUESTS`` is a failure of its own: a new call needs its line here and, most likely,
in the policy. The test bucket and account stand in for the policy's placeholders.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.aws_calls import AwsCall

ROOT = Path(__file__).resolve().parents[2]
POLICY_FILE = ROOT / "iam-policy.json"
ACCOUNT = "123456789012"
BUCKET_PLACEHOLDER = "YOUR-TRAINBOT-BUCKET"
CODE_BUCKET_PLACEHOLDER = "YOUR-CODE-BUCKET/YOUR-CODE-PREFIX"


@dataclass(frozen=True)
class Request:
    """One IAM authorization a call needs: an action on a resource, with the request's context keys."""

    action: str
    resource: str
    context: Mapping[str, Any] = field(default_factory=dict)


def _sm(region: str, kind: str, name: str) -> str:
    return f"arn:aws:sagemaker:{region}:{ACCOUNT}:{kind}/{name}"


def _s3(bucket: str, key: str | None = None) -> str:
    return f"arn:aws:s3:::{bucket}" + (f"/{key}" if key is not None else "")


def _request_tags(tags: Iterable[Mapping[str, str]] | None) -> dict[str, Any]:
    """The context of a call that tags what it creates."""
    pairs = {t["Key"]: t["Value"] for t in tags or []}
    return {**{f"aws:RequestTag/{k}": v for k, v in pairs.items()}, "aws:TagKeys": sorted(pairs)}


def _resource_tags(call: AwsCall, arn: str) -> dict[str, Any]:
    return {f"aws:ResourceTag/{k}": v for k, v in call.resource_tags.get(arn, {}).items()}


Describe = Callable[[AwsCall], list[Request]]


def _on(action: str, arn: Callable[[AwsCall], str], *, tagged: bool = False) -> Describe:
    """``action`` on one resource; ``tagged``: with that resource's tags, read when it was called."""
    def requests(call: AwsCall) -> list[Request]:
        resource = arn(call)
        return [Request(action, resource, _resource_tags(call, resource) if tagged else {})]
    return requests


def _everywhere(action: str) -> Describe:
    return lambda call: [Request(action, "*")]


def _create(action: str, arn: Callable[[AwsCall], str], *, role: bool = False) -> Describe:
    """A create call that tags what it makes: the action and sagemaker:AddTags (SageMaker asks for both), and
    iam:PassRole on the role it hands to SageMaker."""
    def requests(call: AwsCall) -> list[Request]:
        resource, context = arn(call), _request_tags(call.params.get("Tags"))
        made = [Request(action, resource, context)]
        if call.params.get("Tags"):
            made.append(Request("sagemaker:AddTags", resource, context))
        if role:
            role_arn = call.params.get("RoleArn") or call.params.get("ExecutionRoleArn")
            made.append(Request("iam:PassRole", role_arn, {"iam:PassedToService": "sagemaker.amazonaws.com"}))
        return made
    return requests


def _job(call: AwsCall) -> str:
    return _sm(call.region, "training-job", call.params["TrainingJobName"])


def _endpoint(call: AwsCall) -> str:
    return _sm(call.region, "endpoint", call.params["EndpointName"])


def _config(call: AwsCall) -> str:
    return _sm(call.region, "endpoint-config", call.params["EndpointConfigName"])


def _update_endpoint(call: AwsCall) -> list[Request]:
    """UpdateEndpoint needs the endpoint and the config it moves to, each as the bot tagged it."""
    return [Request("sagemaker:UpdateEndpoint", arn, _resource_tags(call, arn)) for arn in (_endpoint(call), _config(call))]


def _log_group(call: AwsCall) -> str:
    return f"arn:aws:logs:{call.region}:{ACCOUNT}:log-group:{call.params['logGroupName']}:*"


def _log_stream(call: AwsCall) -> str:
    group, stream = call.params["logGroupName"], call.params["logStreamName"]
    return f"arn:aws:logs:{call.region}:{ACCOUNT}:log-group:{group}:log-stream:{stream}"


def _queue(call: AwsCall) -> str:
    name = call.params.get("QueueName") or str(call.params.get("QueueUrl", "")).rstrip("/").rsplit("/", 1)[-1]
    return f"arn:aws:sqs:{call.region}:{ACCOUNT}:{name}"


def _rule(call: AwsCall) -> str:
    return f"arn:aws:events:{call.region}:{ACCOUNT}:rule/{call.params.get('Name') or call.params['Rule']}"


def _object(call: AwsCall) -> str:
    return _s3(call.params["Bucket"], call.params["Key"])


def _bucket(call: AwsCall) -> str:
    return _s3(call.params["Bucket"])


#: Every operation the bot's code calls (directly or through the SageMaker SDK), as IAM authorizes it.
REQUESTS: dict[str, Describe] = {
    # training jobs: created tagged with trainbot:lineage (jobs/planning/plan.py), stopped only when so tagged
    "sagemaker.CreateTrainingJob": _create("sagemaker:CreateTrainingJob", _job, role=True),
    "sagemaker.DescribeTrainingJob": _on("sagemaker:DescribeTrainingJob", _job),
    "sagemaker.ListTrainingJobs": _everywhere("sagemaker:ListTrainingJobs"),
    "sagemaker.StopTrainingJob": _on("sagemaker:StopTrainingJob", _job, tagged=True),
    # endpoints: every model, config and endpoint created tagged with trainbot:endpoint
    # (jobs/backends/sagemaker/endpoint_updates.py); changed, deleted and invoked only when so tagged
    "sagemaker.CreateModel": _create("sagemaker:CreateModel",
                                     lambda c: _sm(c.region, "model", c.params["ModelName"]), role=True),
    "sagemaker.CreateEndpointConfig": _create("sagemaker:CreateEndpointConfig", _config),
    "sagemaker.CreateEndpoint": _create("sagemaker:CreateEndpoint", _endpoint),
    "sagemaker.DescribeEndpoint": _on("sagemaker:DescribeEndpoint", _endpoint),
    "sagemaker.DescribeEndpointConfig": _on("sagemaker:DescribeEndpointConfig", _config),
    "sagemaker.UpdateEndpoint": _update_endpoint,
    "sagemaker.DeleteEndpoint": _on("sagemaker:DeleteEndpoint", _endpoint, tagged=True),
    "sagemaker.DeleteEndpointConfig": _on("sagemaker:DeleteEndpointConfig", _config, tagged=True),
    "sagemaker-runtime.InvokeEndpoint": _on("sagemaker:InvokeEndpoint", _endpoint, tagged=True),
    # the model registry
    "sagemaker.CreateModelPackageGroup": _create(
        "sagemaker:CreateModelPackageGroup", lambda c: _sm(c.region, "model-package-group", c.params["ModelPackageGroupName"])),
    "sagemaker.DescribeModelPackageGroup": _on(
        "sagemaker:DescribeModelPackageGroup", lambda c: _sm(c.region, "model-package-group", c.params["ModelPackageGroupName"])),
    "sagemaker.CreateModelPackage": _create(
        "sagemaker:CreateModelPackage", lambda c: _sm(c.region, "model-package", f"{c.params['ModelPackageGroupName']}/*")),
    "sagemaker.ListModelPackages": _everywhere("sagemaker:ListModelPackages"),
    "sagemaker.DescribeModelPackage": _on(
        "sagemaker:DescribeModelPackage", lambda c: str(c.params["ModelPackageName"])),
    "sagemaker.UpdateModelPackage": _on("sagemaker:UpdateModelPackage", lambda c: str(c.params["ModelPackageArn"])),
    # the bucket (code, checkpoints, outputs, registry metrics) and own code's S3 sources
    "s3.HeadBucket": _on("s3:ListBucket", _bucket),
    # The SDK's first model asks ListBuckets for its default bucket's creation date; boto3 reads AccessDenied
    # as "unknown" and the SDK then asks HeadBucket: nothing to grant (s3:ListAllMyBuckets would list them all).
    "s3.ListBuckets": lambda call: [],
    "s3.HeadObject": _on("s3:GetObject", _object),
    "s3.GetObject": _on("s3:GetObject", _object),
    "s3.PutObject": _on("s3:PutObject", _object),
    "s3.CreateMultipartUpload": _on("s3:PutObject", _object),
    "s3.UploadPart": _on("s3:PutObject", _object),
    "s3.CompleteMultipartUpload": _on("s3:PutObject", _object),
    "s3.AbortMultipartUpload": _on("s3:AbortMultipartUpload", _object),
    # training logs and metrics; the rollback alarm of a promotion
    "logs.DescribeLogStreams": _on("logs:DescribeLogStreams", _log_group),
    "logs.GetLogEvents": _on("logs:GetLogEvents", _log_stream),
    "cloudwatch.GetMetricData": _everywhere("cloudwatch:GetMetricData"),
    "cloudwatch.ListMetrics": _everywhere("cloudwatch:ListMetrics"),
    "cloudwatch.DescribeAlarms": _everywhere("cloudwatch:DescribeAlarms"),
    "cloudwatch.PutMetricAlarm": lambda c: [Request(
        action, f"arn:aws:cloudwatch:{c.region}:{ACCOUNT}:alarm:{c.params['AlarmName']}",
        _request_tags(c.params.get("Tags"))) for action in ("cloudwatch:PutMetricAlarm", "cloudwatch:TagResource")],
    # job changes pushed by EventBridge (trainbot events setup, and the watcher's queue)
    "sqs.GetQueueUrl": _on("sqs:GetQueueUrl", _queue),
    "sqs.CreateQueue": _on("sqs:CreateQueue", _queue),
    "sqs.GetQueueAttributes": _on("sqs:GetQueueAttributes", _queue),
    "sqs.SetQueueAttributes": _on("sqs:SetQueueAttributes", _queue),
    "sqs.ReceiveMessage": _on("sqs:ReceiveMessage", _queue),
    "sqs.DeleteMessage": _on("sqs:DeleteMessage", _queue),
    "sqs.DeleteMessageBatch": _on("sqs:DeleteMessage", _queue),  # IAM names the batch by the single one
    "events.PutRule": _on("events:PutRule", _rule),
    "events.PutTargets": _on("events:PutTargets", _rule),
    # a gated model's token (TRAINBOT_HF_TOKEN_SECRET_ARN): checked before a SageMaker job gets its ARN, read for
    # a local job's process (jobs/backends/hub_token.py)
    "secretsmanager.DescribeSecret": _on("secretsmanager:DescribeSecret", lambda c: str(c.params["SecretId"])),
    "secretsmanager.GetSecretValue": _on("secretsmanager:GetSecretValue", lambda c: str(c.params["SecretId"])),
}

#: The SageMaker resources a tag-scoped call acts on, whose tags the recorder reads at call time.
_TAGGED_SAGEMAKER = {
    "sagemaker.StopTrainingJob": lambda c: [_job(c)],
    "sagemaker.UpdateEndpoint": lambda c: [_endpoint(c), _config(c)],
    "sagemaker.DeleteEndpoint": lambda c: [_endpoint(c)],
    "sagemaker.DeleteEndpointConfig": lambda c: [_config(c)],
    "sagemaker-runtime.InvokeEndpoint": lambda c: [_endpoint(c)],
}


def sagemaker_arns_acted_on(service: str, operation: str, params: Mapping[str, Any], region: str) -> list[str]:
    pick = _TAGGED_SAGEMAKER.get(f"{service}.{operation}")
    if pick is None:
        return []
    try:
        return list(pick(AwsCall(service, operation, dict(params), region, by_test=False)))
    except KeyError:
        return []


# ---------------------------------------------------------------- evaluation


def load_policy(bucket: str, code_bucket: str | None = None) -> list[dict[str, Any]]:
    """The policy's statements, its placeholders filled as a team fills them (README)."""
    text = POLICY_FILE.read_text(encoding="utf-8").replace(BUCKET_PLACEHOLDER, bucket)
    if code_bucket is not None:
        text = text.replace(CODE_BUCKET_PLACEHOLDER, code_bucket)
    statements = json.loads(text)["Statement"]
    return [statements] if isinstance(statements, dict) else list(statements)


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _matches(pattern: str, value: str) -> bool:
    """IAM's wildcards: * any run of characters (``/`` and ``:`` included), ? one."""
    return fnmatch.fnmatchcase(value, pattern)


def _condition_holds(operator: str, key: str, wanted: Any, context: Mapping[str, Any]) -> bool:
    wanted_values = _listed(wanted) if not isinstance(wanted, bool) else [str(wanted).lower()]
    present = key in context
    if operator == "Null":
        return (not present) == (str(wanted_values[0]).lower() == "true")
    if operator == "ForAllValues:StringLike":
        return all(any(_matches(w, v) for w in wanted_values) for v in _listed(context.get(key, [])))
    if not present:
        return False
    value = str(context[key])
    if operator == "StringEquals":
        return value in wanted_values
    if operator == "StringLike":
        return any(_matches(w, value) for w in wanted_values)
    raise AssertionError(f"tests/support/iam_policy.py does not evaluate the condition operator {operator}")


def allowed(request: Request, statements: list[dict[str, Any]]) -> bool:
    for statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        if not any(_matches(a.lower(), request.action.lower()) for a in _listed(statement["Action"])):
            continue
        if not any(_matches(r, request.resource) for r in _listed(statement["Resource"])):
            continue
        conditions = statement.get("Condition", {})
        if all(_condition_holds(op, key, wanted, request.context)
               for op, pairs in conditions.items() for key, wanted in pairs.items()):
            return True
    return False


def requests_of(call: AwsCall) -> list[Request]:
    describe = REQUESTS.get(call.name)
    assert describe is not None, (
        f"the bot called {call.name}, which tests/support/iam_policy.py does not know: add what IAM authorizes "
        "for it to REQUESTS (and to iam-policy.json, scoped to what the bot made)")
    return describe(call)


def denied(calls: Iterable[AwsCall], *, bucket: str, code_bucket: str | None = None) -> list[str]:
    """One line per authorization the policy would refuse to a bot call."""
    statements = load_policy(bucket, code_bucket)
    problems = []
    for call in calls:
        if call.by_test:
            continue
        for request in requests_of(call):
            if not allowed(request, statements):
                problems.append(f"{call.name} needs {request.action} on {request.resource} "
                                f"(context {dict(request.context)}), which iam-policy.json does not allow")
    return problems

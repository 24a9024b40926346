"""A real AWS stand-in for tests: one moto server on loopback, reached through AWS_ENDPOINT_URL.

Use the fixtures by importing them into a test module (or a conftest)::

    from tests.support.moto_server import moto_aws, moto_server  # noqa: F401

- ``moto_server`` (session): the ``ThreadedMotoServer`` on 127.0.0.1 with a free port, a bucket
  (``BUCKET``) and a role ARN (``ROLE_ARN``) created.
- ``moto_aws`` (function): the same, with the environment pointed at it for this test (AWS_ENDPOINT_URL,
  fake credentials, AWS_DEFAULT_REGION=us-east-1); returns a ``MotoAws`` handle.
- ``captured_create_requests``: a ``CallRecorder`` for CreateTrainingJob; attach it to the boto session
  the backend is built from (``moto_aws.boto_session(recorders=[...])``). moto drops MetricDefinitions
  and other fields from what it stores, so assert on what was sent.
- ``set_training_job_state(name, status, ...)``: moves a job, as SageMaker would (moto creates every
  job Completed and never moves it); the watcher tests drive jobs with it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from moto.backends import get_backend
from moto.core import DEFAULT_ACCOUNT_ID
from moto.server import ThreadedMotoServer

from jobs.backends.aws_session import make_boto_session

REGION = "us-east-1"
BUCKET = "trainbot-test-bucket"
ROLE_NAME = "TrainbotSageMakerExecution"  # the README's name, the one iam-policy.json lets the bot pass
ROLE_ARN = f"arn:aws:iam::{DEFAULT_ACCOUNT_ID}:role/{ROLE_NAME}"
ACCOUNT_ID = DEFAULT_ACCOUNT_ID
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}
    ],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def closed_port_url() -> str:
    """An endpoint where nothing listens: connections are refused at once."""
    return f"http://127.0.0.1:{free_port()}"


@dataclass
class CallRecorder:
    """Records the JSON body of every `service.operation` request a boto session's clients send
    (each retry included), decoded from the wire: what AWS really receives."""

    operation: str = "CreateTrainingJob"
    service: str = "sagemaker"
    calls: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def attach(self, session: boto3.Session) -> boto3.Session:
        """Register on `session` (before its clients are created: clients copy the hooks)."""
        session.events.register(f"before-call.{self.service}.{self.operation}", self._record)
        return session

    def _record(self, params: dict[str, Any], **_: Any) -> None:
        body = params.get("body") or b"{}"
        decoded = json.loads(body.decode() if isinstance(body, bytes) else body)
        with self._lock:
            self.calls.append(decoded)

    def by_name(self, job_name: str) -> dict[str, Any]:
        found = [call for call in self.calls if call.get("TrainingJobName") == job_name]
        assert found, (
            f"no {self.operation} request for {job_name}; saw {[c.get('TrainingJobName') for c in self.calls]}"
        )
        return found[-1]

    @property
    def last(self) -> dict[str, Any]:
        assert self.calls, f"no {self.operation} request was sent"
        return self.calls[-1]


class _RawBody:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


@dataclass
class ErrorAnswer:
    """Answers `service.operation` with an AWS JSON error instead of sending it (each retry counts):
    how a real service refuses, for codes moto never sends (throttling, quotas, duplicates)."""

    operation: str
    code: str
    message: str
    status: int = 400
    service: str = "sagemaker"
    sent: int = 0

    def attach(self, session: boto3.Session) -> boto3.Session:
        session.events.register(f"before-send.{self.service}.{self.operation}", self._answer)
        return session

    def _answer(self, request: Any, **_: Any) -> AWSResponse:
        self.sent += 1
        body = json.dumps({"__type": self.code, "message": self.message}).encode()
        headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-RequestId": f"fake-{self.sent}"}
        return AWSResponse(request.url, self.status, headers, _RawBody(body))


@dataclass(frozen=True)
class MotoAws:
    endpoint_url: str
    region: str = REGION
    bucket: str = BUCKET
    role_arn: str = ROLE_ARN
    account_id: str = ACCOUNT_ID

    def client(self, service: str) -> Any:
        """A plain client on the server (for arranging state and checking results)."""
        return boto3.client(
            service,
            region_name=self.region,
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def boto_session(
        self, *, recorders: Sequence[CallRecorder | ErrorAnswer] = (), max_attempts: int | None = None
    ) -> boto3.Session:
        """A session as the bot builds it (adaptive retries, short timeouts), with recorders attached."""
        session = (
            make_boto_session(self.region)
            if max_attempts is None
            else make_boto_session(self.region, max_attempts=max_attempts)
        )
        for recorder in recorders:
            recorder.attach(session)
        return session

    def reset(self) -> None:
        """Forget everything moto holds, then re-create the bucket and role."""
        import urllib.request

        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", method="POST"))
        _arrange(self)


def _arrange(aws: MotoAws) -> None:
    """The bucket and the role. Idempotent: every ThreadedMotoServer in this process shares moto's
    in-memory state, and a module that imports the fixture gets a server of its own."""
    aws.client("s3").create_bucket(Bucket=aws.bucket)
    iam = aws.client("iam")
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
        iam.create_role(RoleName=ROLE_NAME, AssumeRolePolicyDocument=json.dumps(_TRUST))


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoAws]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    aws = MotoAws(endpoint_url=f"http://{host}:{port}")
    _arrange(aws)
    yield aws
    server.stop()


def point_environment_at(aws: MotoAws, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every AWS client built after this reaches `aws` with fake credentials, and nothing else."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws.endpoint_url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", aws.region)
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    # No shared config or credentials file of the machine, and no instance metadata, may leak in.
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def moto_aws(moto_server: MotoAws, monkeypatch: pytest.MonkeyPatch) -> MotoAws:
    """The moto server, with this test's environment pointing every AWS client at it."""
    point_environment_at(moto_server, monkeypatch)
    return moto_server


@pytest.fixture(scope="module")
def moto_aws_module(moto_server: MotoAws) -> Iterator[MotoAws]:
    """`moto_aws` for module-scoped fixtures (launch once, assert many times)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        point_environment_at(moto_server, monkeypatch)
        yield moto_server


@pytest.fixture
def captured_create_requests() -> CallRecorder:
    return CallRecorder("CreateTrainingJob")


def _naive_utc(value: datetime | None) -> datetime:
    """moto keeps naive UTC datetimes."""
    value = value or datetime.now(timezone.utc)
    return value.astimezone(timezone.utc).replace(tzinfo=None) if value.tzinfo else value


def training_job(name: str, *, region: str = REGION, account_id: str = ACCOUNT_ID) -> Any:
    """moto's in-process record of a training job (a ``FakeTrainingJob``)."""
    jobs = get_backend("sagemaker")[account_id][region].training_jobs
    assert name in jobs, f"moto has no training job {name}; it has {sorted(jobs)}"
    return jobs[name]


def set_training_job_state(
    name: str,
    status: str,
    secondary_status: str | None = None,
    failure_reason: str | None = None,
    billable_seconds: int | None = None,
    training_seconds: int | None = None,
    *,
    final_metrics: dict[str, float] | None = None,
    model_artifacts: str | None = None,
    at: datetime | None = None,
    region: str = REGION,
    account_id: str = ACCOUNT_ID,
) -> None:
    """Move a moto training job as SageMaker would: status, secondary status (appended to the
    transitions), failure reason, billable/training seconds, final metrics; LastModifiedTime = `at`
    (default now). An InProgress/Stopping job loses its end time."""
    job = training_job(name, region=region, account_id=account_id)
    when = _naive_utc(at)
    job.training_job_status = status
    secondary = secondary_status or {"InProgress": "Training", "Stopping": "Stopping"}.get(status, status)
    _close_last_transition(job, when)
    job.secondary_status = secondary
    job.secondary_status_transitions.append({"Status": secondary, "StartTime": when, "StatusMessage": ""})
    job.training_end_time = None if status in ("InProgress", "Stopping") else when
    job.last_modified_time = when
    if failure_reason is not None:
        job.failure_reason = (
            failure_reason  # moto has no such field; DescribeTrainingJob shows it as FailureReason
        )
    if billable_seconds is not None:
        job.billable_time_in_seconds = billable_seconds
    if training_seconds is not None:
        job.training_time_in_seconds = training_seconds
    if final_metrics is not None:
        job.final_metric_data_list = [
            {"MetricName": key, "Value": value, "Timestamp": when} for key, value in final_metrics.items()
        ]
    if model_artifacts is not None:
        job.model_artifacts = {"S3ModelArtifacts": model_artifacts}


def _close_last_transition(job: Any, when: datetime) -> None:
    transitions = job.secondary_status_transitions
    if transitions and "EndTime" not in transitions[-1]:
        transitions[-1]["EndTime"] = when


def set_training_job_times(
    name: str,
    *,
    created: datetime | None = None,
    started: datetime | None = None,
    modified: datetime | None = None,
    region: str = REGION,
    account_id: str = ACCOUNT_ID,
) -> None:
    """Set a moto job's CreationTime / TrainingStartTime / LastModifiedTime."""
    job = training_job(name, region=region, account_id=account_id)
    if created is not None:
        job.creation_time = _naive_utc(created)
    if started is not None:
        job.training_start_time = _naive_utc(started)
    if modified is not None:
        job.last_modified_time = _naive_utc(modified)


def ago(seconds: float) -> datetime:
    return datetime.now(timezone.utc) - timedelta(seconds=seconds)


def sagemaker_backend(aws: MotoAws, session: boto3.Session | None = None, **kwargs: Any) -> Any:
    """A `SageMakerBackend` on the moto server (a fresh session unless one is given)."""
    from jobs.backends.sagemaker.training_jobs import SageMakerBackend
    from jobs.clock import SystemClock

    options: dict[str, Any] = {
        "role_arn": aws.role_arn,
        "bucket": aws.bucket,
        "region": aws.region,
        "clock": SystemClock(),
    }
    options.update(kwargs)
    return SageMakerBackend(session or aws.boto_session(), **options)


def plan_for(text: str, lineage_id: str, *, bucket: str = BUCKET) -> Any:
    """The LaunchPlan the bot would build for `/train TEXT` in lineage `lineage_id`."""
    from jobs.planning.grammar import parse_command
    from jobs.planning.plan import build_plan

    return build_plan(
        parse_command(text), bucket=bucket, lineage_id=lineage_id, launched_by="U1", origin="cli"
    )

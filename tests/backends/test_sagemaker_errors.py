"""Launch failures end in one actionable sentence of the project's own exceptions, and nothing is
created that the bot would then believe is running."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import ClientError

from jobs.backends.sagemaker.errors import AwsContext, translate
from jobs.backends.sagemaker.training_jobs import SageMakerBackend
from jobs.errors import BackendError, BackendUnavailable, CapacityError, ConfigError, NotFound, SpecError
from tests.support.moto_server import (
    CallRecorder,
    ErrorAnswer,
    MotoAws,
    closed_port_url,
    plan_for,
    sagemaker_backend,
)

SPOT = "distilbert-spot"


def _backend_answering(aws: MotoAws, answer: ErrorAnswer) -> SageMakerBackend:
    return sagemaker_backend(aws, aws.boto_session(recorders=[answer]))  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("ResourceInUse", "Training job err-dup-1 already exists"),
        (
            "ValidationException",
            "Training job names must be unique within an AWS account and region, "
            "and a training job with this name already exists (arn:aws:sagemaker:us-east-1:123:training-job/x)",
        ),
    ],
)
def test_a_job_that_already_exists_counts_as_launched(moto_aws: MotoAws, code: str, message: str) -> None:
    answer = ErrorAnswer("CreateTrainingJob", code, message)
    _backend_answering(moto_aws, answer).launch(f"err-dup-{code}", plan_for(SPOT, "err-dup"))
    assert answer.sent == 1  # not retried, not raised


def test_no_quota_is_a_capacity_error_that_says_what_to_change(moto_aws: MotoAws) -> None:
    answer = ErrorAnswer(
        "CreateTrainingJob",
        "ResourceLimitExceeded",
        "The account-level service limit 'ml.p3.16xlarge for training job usage' is 0 Instances",
    )
    with pytest.raises(CapacityError) as caught:
        _backend_answering(moto_aws, answer).launch("err-quota-1", plan_for("bert-squad", "err-quota"))
    message = caught.value.user_message()
    assert "ml.p3.16xlarge for training job usage" in message
    assert "quota" in message and "instance_type=" in message


def test_throttling_is_retried_then_reported(moto_aws: MotoAws) -> None:
    answer = ErrorAnswer("CreateTrainingJob", "ThrottlingException", "Rate exceeded")
    # Three attempts rather than the default four keep the back-off (random, up to 1 + 2 s) short.
    session = moto_aws.boto_session(recorders=[answer], max_attempts=3)
    backend = sagemaker_backend(moto_aws, session, max_attempts=3)
    with pytest.raises(BackendError) as caught:
        backend.launch("err-throttle-1", plan_for(SPOT, "err-throttle"))
    assert answer.sent == 3  # adaptive retries: the call and two retries
    assert "throttling" in caught.value.user_message() and "3 tries" in caught.value.user_message()
    assert "err-throttle-1" not in {job["TrainingJobName"] for job in _jobs(moto_aws)}


def test_an_unreachable_endpoint_fails_fast_and_clearly(
    moto_aws: MotoAws, monkeypatch: pytest.MonkeyPatch
) -> None:
    unreachable = closed_port_url()
    monkeypatch.setenv("AWS_ENDPOINT_URL", unreachable)
    recorder = CallRecorder()
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as caught:
        sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[recorder])).launch(
            "err-down-1", plan_for(SPOT, "err-down")
        )
    assert time.monotonic() - started < 60
    assert unreachable in caught.value.user_message() and "AWS_ENDPOINT_URL" in caught.value.user_message()
    assert recorder.calls == []


@pytest.mark.iam_unchecked("a bucket other than the one iam-policy.json is filled with, on purpose")
def test_a_missing_bucket_is_named_before_anything_is_uploaded(moto_aws: MotoAws) -> None:
    recorder = CallRecorder()
    backend = sagemaker_backend(
        moto_aws, moto_aws.boto_session(recorders=[recorder]), bucket="no-such-bucket"
    )
    with pytest.raises(ConfigError) as caught:
        backend.launch("err-bucket-1", plan_for(SPOT, "err-bucket", bucket="no-such-bucket"))
    assert (
        "'no-such-bucket'" in caught.value.user_message() and "TRAINBOT_BUCKET" in caught.value.user_message()
    )
    assert recorder.calls == []
    buckets = {bucket["Name"] for bucket in moto_aws.client("s3").list_buckets()["Buckets"]}
    assert "no-such-bucket" not in buckets  # the SDK's habit of creating it never ran


def test_a_bucket_that_answered_is_not_asked_again_on_every_launch(moto_aws: MotoAws) -> None:
    heads = CallRecorder("HeadBucket", "s3")
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[heads]))
    backend.launch("err-head-1", plan_for(SPOT, "err-head"))
    backend.launch("err-head-2", plan_for(SPOT, "err-head"))
    assert len(heads.calls) == 1


def test_no_credentials_names_the_variables(moto_aws: MotoAws, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(ConfigError) as caught:
        sagemaker_backend(moto_aws).launch("err-creds-1", plan_for(SPOT, "err-creds"))
    assert "AWS_ACCESS_KEY_ID" in caught.value.user_message()


def test_rejected_credentials_never_echo_the_secret(
    moto_aws: MotoAws, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sekrit-value-42")
    answer = ErrorAnswer("HeadBucket", "403", "Forbidden", status=403, service="s3")
    with pytest.raises(ConfigError) as caught:
        _backend_answering(moto_aws, answer).launch("err-denied-1", plan_for(SPOT, "err-denied"))
    assert "HeadBucket" in caught.value.user_message()
    assert "sekrit" not in caught.value.user_message() and "sekrit" not in caplog.text


def test_settings_the_sdk_refuses_become_a_backend_error(moto_aws: MotoAws) -> None:
    plan = plan_for(SPOT, "err-sdk")
    plan.estimator["transformers_version"] = "0.0.1"  # no such container
    with pytest.raises(BackendError) as caught:
        sagemaker_backend(moto_aws).launch("err-sdk-1", plan)
    assert "0.0.1" in caught.value.user_message()


def test_local_train_data_is_refused_on_sagemaker(moto_aws: MotoAws) -> None:
    with pytest.raises(SpecError):
        sagemaker_backend(moto_aws).launch("err-local-1", plan_for(f"{SPOT} train_data=./data", "err-local"))


def test_missing_role_or_bucket_is_a_config_error(moto_aws: MotoAws) -> None:
    with pytest.raises(ConfigError, match="TRAINBOT_ROLE_ARN"):
        sagemaker_backend(moto_aws, role_arn="")
    with pytest.raises(ConfigError, match="TRAINBOT_BUCKET"):
        sagemaker_backend(moto_aws, bucket="")


# -- translation of the answers moto never gives -------------------------------------------------------

CTX = AwsContext(
    action="launch training job j-1",
    endpoint="https://sagemaker.us-east-1.amazonaws.com",
    role_arn="arn:aws:iam::1:role/r",
    bucket="b",
)


def _client_error(
    code: str, message: str, status: int = 400, operation: str = "CreateTrainingJob"
) -> ClientError:
    response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, operation)  # type: ignore[arg-type]


def test_validation_quotes_sagemakers_own_reason() -> None:
    error = translate(_client_error("ValidationException", "Instance type ml.x is not supported."), CTX)
    assert type(error) is BackendError
    assert (
        error.user_message()
        == "SageMaker refused to launch training job j-1: Instance type ml.x is not supported."
    )


def test_a_role_sagemaker_cannot_assume_points_at_the_setting() -> None:
    error = translate(
        _client_error("ValidationException", "Could not assume role arn:aws:iam::1:role/r."), CTX
    )
    assert isinstance(error, ConfigError)
    assert "TRAINBOT_ROLE_ARN" in error.user_message() and "sagemaker.amazonaws.com" in error.user_message()


def test_access_denied_names_the_operation() -> None:
    error = translate(
        _client_error("AccessDeniedException", "not authorized to perform sagemaker:CreateTrainingJob"), CTX
    )
    assert isinstance(error, ConfigError) and "CreateTrainingJob" in error.user_message()


def test_an_html_error_page_is_reduced_to_its_title() -> None:
    page = "<!doctype html>\n<html><title>500 Internal Server Error</title><h1>Oops</h1></html>"
    error = translate(_client_error("500", page, status=500), CTX)
    assert "500 Internal Server Error" in error.user_message() and "<" not in error.user_message()


def test_unknown_jobs_are_not_found(moto_aws: MotoAws) -> None:
    with pytest.raises(NotFound):
        sagemaker_backend(moto_aws).describe("never-launched")


def _jobs(aws: MotoAws) -> list[dict]:  # type: ignore[type-arg]
    return aws.client("sagemaker").list_training_jobs(MaxResults=100)["TrainingJobSummaries"]

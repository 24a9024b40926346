"""AWS and SageMaker SDK errors, translated into the project's exceptions with a sentence to act on.

Messages name the setting or permission to fix and quote AWS's own reason; they never include
request parameters, headers or credentials.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    CredentialRetrievalError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)

from jobs.errors import (
    BackendError,
    BackendUnavailable,
    CapacityError,
    ConfigError,
    NotFound,
    TrainbotError,
)
from jobs.planning.patterns import linear

logger = logging.getLogger(__name__)

_THROTTLING = frozenset(
    {"ThrottlingException", "Throttling", "TooManyRequestsException", "RequestLimitExceeded", "SlowDown"}
)
_ACCESS_DENIED = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError", "403"}
)
_BAD_CREDENTIALS = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidClientTokenId",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
    }
)
_NOT_FOUND = frozenset({"ResourceNotFound", "ResourceNotFoundException", "NoSuchKey", "404"})
#: An error page's title (a proxy's body is outside text: RE2, linear however many titles it opens).
_HTML_TITLE = linear(r"(?is)<title>(.*?)</title>")
_MAX_MESSAGE = 400
_CREDENTIAL_VARIABLES = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"


@dataclass(frozen=True)
class AwsContext:
    """What the bot was doing, to say it in the error: `action` reads after "could not"."""

    action: str  # e.g. "launch training job lin-1"
    endpoint: str  # where the request went, for unreachable endpoints
    role_arn: str = ""
    bucket: str = ""


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def error_message(exc: ClientError) -> str:
    """AWS's reason, on one line; an HTML error page (a proxy, a stand-in server) becomes its title."""
    message = str(exc.response.get("Error", {}).get("Message", "")).strip()
    if message.startswith("<"):
        title = _HTML_TITLE.search(message)
        message = title.group(1) if title else ""
    message = " ".join(message.split())
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 3] + "..."


def is_already_exists(exc: ClientError) -> bool:
    """CreateTrainingJob for a name SageMaker already has: ResourceInUse, or the ValidationException
    SageMaker actually sends ("... a training job with this name already exists")."""
    code, message = error_code(exc), error_message(exc).lower()
    return code == "ResourceInUse" or (code == "ValidationException" and "already exists" in message)


def is_not_found(exc: ClientError) -> bool:
    """SageMaker answers an unknown job with a ValidationException ("Requested resource not found")."""
    code, message = error_code(exc), error_message(exc).lower()
    if code in _NOT_FOUND:
        return True
    return code == "ValidationException" and ("not found" in message or "could not find" in message)


def _retries(exc: ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0))


def _client_error(exc: ClientError, ctx: AwsContext) -> TrainbotError:
    code, message = error_code(exc), error_message(exc) or "no reason given"
    if code in _THROTTLING:
        return BackendError(
            f"AWS kept throttling the request to {ctx.action} after {_retries(exc) + 1} tries "
            f"({code}): wait a minute and try again."
        )
    if code in _BAD_CREDENTIALS:
        return ConfigError(
            f"AWS rejected the credentials ({code}) while trying to {ctx.action}: "
            f"refresh them or set valid {_CREDENTIAL_VARIABLES}."
        )
    if code in _ACCESS_DENIED:
        operation = getattr(exc, "operation_name", "") or "this call"
        return ConfigError(
            f"AWS denied {operation} while trying to {ctx.action}: give the bot's IAM identity that "
            f"permission ({message})."
        )
    if "assume" in message.lower() and "role" in message.lower():
        return ConfigError(
            f"SageMaker could not assume the role {ctx.role_arn or '(none set)'}: set TRAINBOT_ROLE_ARN "
            f"to a role that trusts sagemaker.amazonaws.com ({message})."
        )
    if code == "ResourceLimitExceeded":
        return CapacityError(
            f"SageMaker has no quota left to {ctx.action} ({message}): ask for a quota increase in "
            "Service Quotas, or choose fewer or other instances with instance_type= or instance_count=."
        )
    if code in ("NoSuchBucket",) or (code in ("404", "NotFound") and ctx.bucket):
        return missing_bucket(ctx.bucket)
    if code == "ValidationException":
        return BackendError(f"SageMaker refused to {ctx.action}: {message}")
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    if status >= 500:
        return BackendError(
            f"AWS failed to {ctx.action} ({code or status}: {message}); try again in a few minutes."
        )
    return BackendError(f"AWS refused to {ctx.action} ({code}): {message}")


def missing_bucket(bucket: str) -> ConfigError:
    return ConfigError(
        f"The S3 bucket {bucket!r} does not exist or is not reachable with these credentials: "
        "create it, or set TRAINBOT_BUCKET to a bucket the bot can write to."
    )


def _botocore_error(exc: BotoCoreError, ctx: AwsContext) -> TrainbotError:
    if isinstance(exc, NoCredentialsError | PartialCredentialsError | CredentialRetrievalError):
        return ConfigError(
            f"No usable AWS credentials to {ctx.action}: set {_CREDENTIAL_VARIABLES}, "
            "or run where an IAM role is attached."
        )
    if isinstance(exc, NoRegionError):
        return ConfigError(f"No AWS region is set to {ctx.action}: set AWS_DEFAULT_REGION (e.g. us-east-1).")
    if isinstance(exc, ConnectionError | HTTPClientError):
        return BackendUnavailable(
            f"Could not reach AWS at {ctx.endpoint} to {ctx.action} ({type(exc).__name__}): "
            "check the network, AWS_DEFAULT_REGION and AWS_ENDPOINT_URL, then try again."
        )
    return BackendError(f"The AWS client failed to {ctx.action}: {exc}")


def _upload_error(exc: S3UploadFailedError, ctx: AwsContext) -> TrainbotError:
    text = str(exc)
    if "NoSuchBucket" in text:
        return missing_bucket(ctx.bucket)
    if "AccessDenied" in text:
        return ConfigError(
            f"AWS denied uploading the training code to bucket {ctx.bucket!r}: give the bot's IAM identity "
            "s3:PutObject on it, or set TRAINBOT_BUCKET to another bucket."
        )
    return BackendError(f"Uploading the training code to {ctx.bucket!r} failed while trying to {ctx.action}.")


def translate(exc: Exception, ctx: AwsContext) -> TrainbotError:
    """The project's exception for an AWS client, S3 transfer or SDK error."""
    if isinstance(exc, TrainbotError):
        return exc
    if isinstance(exc, ClientError):
        return _client_error(exc, ctx)
    if isinstance(exc, BotoCoreError):
        return _botocore_error(exc, ctx)
    if isinstance(exc, S3UploadFailedError):
        return _upload_error(exc, ctx)
    # The SDK raises ValueError/TypeError for settings it cannot turn into a job (versions, distribution).
    return BackendError(f"The SageMaker SDK could not {ctx.action}: {exc}")


@contextmanager
def aws_errors(ctx: AwsContext, *, sdk: bool = False) -> Iterator[None]:
    """Re-raise AWS errors (and, with `sdk`, the SDK's ValueError/TypeError) as the project's own."""
    handled: tuple[type[Exception], ...] = (ClientError, BotoCoreError, S3UploadFailedError)
    if sdk:
        handled += (ValueError, TypeError)
    try:
        yield
    except TrainbotError:
        raise
    except handled as exc:
        translated = translate(exc, ctx)
        logger.warning("%s: %s", type(translated).__name__, translated.message)
        raise translated from exc


def not_found(job_name: str, region: str) -> NotFound:
    return NotFound(f"SageMaker has no training job named {job_name!r} in {region}: check the job name.")

"""The SageMaker SDK's session for the SageMaker backend: one that never phones home, and quiet imports."""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config

if TYPE_CHECKING:
    from sagemaker.session import Session as SdkSession

logger = logging.getLogger(__name__)

#: sagemaker 2.x's intelligent-defaults config with telemetry off. With telemetry on, every decorated
#: SDK call (fit() included) sends a request to an S3 URL, which hangs where there is no network.
#: Passing the dict also stops the SDK from reading config files from disk or S3.
SDK_CONFIG: dict[str, Any] = {
    "SchemaVersion": "1.0",
    "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}},
}


def quiet_sdk_import() -> None:
    """sagemaker 2.x prints a v3 deprecation notice and config INFO lines (to stdout) on import and
    on each estimator; they would corrupt the CLI's output. Set before the first import."""
    os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    config_logger = logging.getLogger("sagemaker.config")
    if config_logger.level == logging.NOTSET:
        config_logger.setLevel(logging.WARNING)


def remember_valid_configs() -> None:
    """Validate each SDK defaults config once, not on every lookup.

    sagemaker 2.x checks the whole session config against its JSON schema (and the schema against
    the meta-schema) each time it reads a default: about 20 times per launch or deploy, over 95% of
    a launch's CPU. Our config is the constant `SDK_CONFIG`, so one that passed once passes again;
    a different one is still checked. Idempotent.
    """
    quiet_sdk_import()
    import sagemaker.utils as sdk_utils

    original = sdk_utils.validate_sagemaker_config
    if getattr(original, "remembers_valid_configs", False):
        return
    valid: set[str] = set()
    lock = threading.Lock()

    def validate(sagemaker_config: Any = None) -> None:
        key = json.dumps(sagemaker_config, sort_keys=True, default=str)
        with lock:
            if key in valid:
                return
        original(sagemaker_config)
        with lock:
            valid.add(key)

    validate.remembers_valid_configs = True  # type: ignore[attr-defined]
    sdk_utils.validate_sagemaker_config = validate


def build_sdk_session(boto_session: boto3.Session, *, bucket: str, config: Config) -> SdkSession:
    """The SDK session: the given boto session and clients built with `config`, `default_bucket` set
    (otherwise the SDK derives one from the account id through STS), telemetry off."""
    remember_valid_configs()
    # Imported here: the SDK takes about a second to import and only launches need it.
    from sagemaker.session import Session

    return Session(
        boto_session=boto_session,
        sagemaker_client=boto_session.client("sagemaker", config=config),
        sagemaker_runtime_client=boto_session.client("sagemaker-runtime", config=config),
        sagemaker_featurestore_runtime_client=boto_session.client(
            "sagemaker-featurestore-runtime", config=config
        ),
        sagemaker_metrics_client=boto_session.client("sagemaker-metrics", config=config),
        default_bucket=bucket,
        sagemaker_config=SDK_CONFIG,
    )


def huggingface_estimator(**kwargs: Any) -> Any:
    """`sagemaker.huggingface.HuggingFace(**kwargs)`, imported on first use."""
    quiet_sdk_import()
    from sagemaker.huggingface import HuggingFace

    return HuggingFace(**kwargs)

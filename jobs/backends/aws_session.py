"""AWS sessions shared by both backends: bounded retries and timeouts on the standard credential chain.

Every client the bot or the SDK creates inherits one botocore Config (the botocore session's default
client config), so throttling is retried with adaptive back-off and an unreachable endpoint fails in
well under a minute: max_attempts x connect_timeout plus back-off (4 x 5 s + at most 1+2+4 s). The local
backend uses it for an own-code tarball on S3; the SageMaker backend for everything.
"""

from __future__ import annotations

from typing import Any

import boto3
import botocore.session
from botocore.config import Config

MAX_ATTEMPTS = 4  # the first call and three retries
CONNECT_TIMEOUT_S = 5
READ_TIMEOUT_S = 10  # control-plane calls answer in well under a second; uploads are small tarballs

def client_config(max_attempts: int = MAX_ATTEMPTS) -> Config:
    return Config(
        # total_max_attempts counts the first call; botocore's `max_attempts` key would mean retries.
        retries={"mode": "adaptive", "total_max_attempts": max_attempts},
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
    )


def make_boto_session(region: str | None = None, *, max_attempts: int = MAX_ATTEMPTS) -> boto3.Session:
    """A boto3 session on the standard credential chain and variables (AWS_ENDPOINT_URL included),
    whose every client uses `client_config`."""
    core = botocore.session.get_session()
    core.set_default_client_config(client_config(max_attempts))
    return boto3.Session(botocore_session=core, region_name=region or None)


def endpoint_of(client: Any) -> str:
    return str(getattr(getattr(client, "meta", None), "endpoint_url", "") or "AWS")

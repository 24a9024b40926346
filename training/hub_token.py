"""The Hugging Face token a gated model needs, from AWS Secrets Manager, into this process's HF_TOKEN only.

The bot never handles the token on SageMaker: it passes the secret's ARN (TRAINBOT_HF_TOKEN_SECRET_ARN) in the
job's environment, and the job reads the secret with its own role here, at start (a token in the job's
Environment would show in DescribeTrainingJob). The local backend reads it itself and sets HF_TOKEN. Either
way the token is never printed: the log says only that one is set, and a failure names the secret, not the value.
"""

from __future__ import annotations

import json
import os
import sys

from script_arguments import UsageError

ARN_ENV = "TRAINBOT_HF_TOKEN_SECRET_ARN"
TOKEN_ENV = "HF_TOKEN"
#: Keys a JSON secret may keep the token under (a plain-text secret is the token itself).
JSON_KEYS = ("HF_TOKEN", "hf_token", "token", "HUGGING_FACE_HUB_TOKEN")


def token_of(secret: str) -> str:
    """The token a secret's text holds: the text itself, or the value of one of JSON_KEYS."""
    text = secret.strip()
    if text.startswith("{"):
        try:
            found = json.loads(text)
        except ValueError:
            raise UsageError("the Hugging Face token's secret is neither a token nor JSON") from None
        values = [found.get(key) for key in JSON_KEYS if isinstance(found, dict)]
        text = next((v.strip() for v in values if isinstance(v, str) and v.strip()), "")
    if not text or any(c.isspace() for c in text):
        raise UsageError(f"the Hugging Face token's secret holds no token (a plain value, or JSON with {JSON_KEYS[0]})")
    return text


def load_token() -> None:
    """Set HF_TOKEN from the secret TRAINBOT_HF_TOKEN_SECRET_ARN names, unless it is set already."""
    if os.environ.get(TOKEN_ENV):
        _say("a Hugging Face token is set for gated models")
        return
    arn = os.environ.get(ARN_ENV, "")
    if not arn:
        return
    parts = arn.split(":")
    if len(parts) < 7 or parts[2] != "secretsmanager":
        raise UsageError(f"{ARN_ENV} is not a Secrets Manager secret's ARN")
    try:
        import boto3
    except ImportError:
        raise UsageError(f"{ARN_ENV} is set but boto3 is not installed here to read the secret") from None
    try:
        secret = boto3.client("secretsmanager", region_name=parts[3]).get_secret_value(SecretId=arn)
    except Exception as exc:  # any failure: named by its kind, the secret by its ARN
        raise UsageError(f"cannot read the Hugging Face token's secret {arn} ({type(exc).__name__}): "
                         "the job's role needs secretsmanager:GetSecretValue on it") from None
    os.environ[TOKEN_ENV] = token_of(str(secret.get("SecretString") or ""))
    _say("a Hugging Face token is set for gated models (read from Secrets Manager)")


def _say(text: str) -> None:
    print(f"[hub] {text}", file=sys.stderr, flush=True)

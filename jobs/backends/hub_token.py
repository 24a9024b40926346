"""TRAINBOT_HF_TOKEN_SECRET_ARN: the AWS Secrets Manager secret holding a Hugging Face token for gated models.

The token reaches a job's environment only. On SageMaker the bot never reads it: the launch checks that the
secret exists (DescribeSecret, no value) and hands the job the ARN, and the job reads the secret with its own
role at start (training/hub_token.py): a token in CreateTrainingJob's Environment would be shown by
DescribeTrainingJob to anyone who may describe jobs. The local backend has no job role: it reads the secret
itself at launch and puts the token in the job process's HF_TOKEN, nowhere else (not the job's state, its
plan, a message or a log line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from jobs.errors import ConfigError

ARN_ENV = "TRAINBOT_HF_TOKEN_SECRET_ARN"
TOKEN_ENV = "HF_TOKEN"
#: Keys a JSON secret may keep the token under (a plain-text secret is the token itself); training/hub_token.py
#: reads the same.
JSON_KEYS = ("HF_TOKEN", "hf_token", "token", "HUGGING_FACE_HUB_TOKEN")
_ARN = re.compile(r"arn:aws[a-z-]*:secretsmanager:([a-z0-9-]+):[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]{1,512}", re.ASCII)


@dataclass(frozen=True)
class HubTokenSecret:
    """The configured secret: its ARN and region. ``client_for(region)`` builds a Secrets Manager client."""

    arn: str
    client_for: Callable[[str], Any]

    @classmethod
    def configured(cls, arn: str, client_for: Callable[[str], Any]) -> HubTokenSecret | None:
        """None when TRAINBOT_HF_TOKEN_SECRET_ARN is empty; ConfigError when it is not a secret's ARN."""
        if not arn:
            return None
        if not _ARN.fullmatch(arn.strip()):
            raise ConfigError(f"{ARN_ENV} must be a Secrets Manager secret's ARN "
                              "(arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME), and it is not.")
        return cls(arn.strip(), client_for)

    @property
    def region(self) -> str:
        match = _ARN.fullmatch(self.arn)
        return match.group(1) if match else ""

    def check_exists(self) -> None:
        """ConfigError unless the secret is there (its value is not read)."""
        self._call(lambda client: client.describe_secret(SecretId=self.arn))

    def environment(self) -> dict[str, str]:
        """What a SageMaker job gets: the ARN, which its script reads with the job's role."""
        return {ARN_ENV: self.arn}

    def token(self) -> str:
        """The token itself, for a local job's process environment only."""
        answer = self._call(lambda client: client.get_secret_value(SecretId=self.arn))
        return token_of(str(answer.get("SecretString") or ""), self.arn)

    def _call(self, call: Callable[[Any], Any]) -> Any:
        try:
            return call(self.client_for(self.region))
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            raise ConfigError(f"{ARN_ENV} names a secret the bot cannot use ({code or 'refused'}): check that "
                              f"{self.arn} exists and that the bot's role may read it.") from None
        except BotoCoreError as exc:
            raise ConfigError(f"Could not reach Secrets Manager for {ARN_ENV} ({type(exc).__name__}).") from None


def token_of(secret: str, arn: str) -> str:
    """The token a secret's text holds: the text itself, or one of JSON_KEYS' values. Refusals never quote it."""
    text = secret.strip()
    if text.startswith("{"):
        try:
            found = json.loads(text)
        except ValueError:
            found = None
        values = [found.get(key) for key in JSON_KEYS] if isinstance(found, dict) else []
        text = next((v.strip() for v in values if isinstance(v, str) and v.strip()), "")
    if not text or any(char.isspace() for char in text):
        raise ConfigError(f"The secret {arn} ({ARN_ENV}) holds no Hugging Face token: store the token itself, "
                          f"or JSON with a {JSON_KEYS[0]} key.")
    return text

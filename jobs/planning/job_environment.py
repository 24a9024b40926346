"""``env.NAME=VALUE``: the job's environment variables, as the estimator's ``environment=`` sets them.

Scripts and launchers read settings from the environment (accelerate's launcher, ``NCCL_DEBUG``,
``TOKENIZERS_PARALLELISM``, a script's own ``MY_FLAG``), so the team sets them as it would in its own
``HuggingFace(..., environment={...})``. Refused, with one sentence: the names SageMaker, its toolkit, AWS and
trainbot set themselves (``SM_*``, ``SAGEMAKER_*``, ``AWS_*``, ``TRAINBOT_*``, the interpreter's own paths), the
Hugging Face token (it comes from TRAINBOT_HF_TOKEN_SECRET_ARN, never from a chat), and anything that looks like
a credential: a command typed in a channel is seen by everyone there, stored with the lineage and shown on its
card, so a secret never belongs in it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from jobs.errors import SpecError
from jobs.planning.hyperparameters import check_plain_text, show

#: SageMaker's own limits on CreateTrainingJob's Environment map.
MAX_VARIABLES = 100
MAX_VALUE_CHARS = 512
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,511}", re.ASCII)
#: Prefixes of what SageMaker, its training toolkit, AWS and trainbot set themselves.
RESERVED_PREFIXES = ("SM_", "SAGEMAKER_", "AWS_", "TRAINBOT_", "AMZN_")
#: Exact names: the Hugging Face token, and what the interpreter and the job's sandbox are made of.
RESERVED_NAMES = frozenset({
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_API_TOKEN", "PATH", "HOME", "PYTHONPATH", "PYTHONHOME",
    "PYTHONSTARTUP", "PYTHONUSERBASE", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "TMPDIR",
    "TRAINING_JOB_NAME", "TRAINING_JOB_ARN",
})
#: Parts of a name that say its value is a credential.
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "APIKEY", "ACCESS_KEY", "PRIVATE_KEY",
                 "CREDENTIAL")
#: Values shaped like the credentials people paste: AWS keys, Slack, Hugging Face, GitHub, OpenAI and W&B
#: tokens, a private key, a JWT, a URL with a password.
_SECRET_VALUE = re.compile(
    r"(?:\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bxox[abposr]-|\bxapp-|\bhf_[A-Za-z0-9]{20,}|\bgh[pousr]_[A-Za-z0-9]{20,}"
    r"|\bgithub_pat_|\bsk-[A-Za-z0-9_-]{20,}|-----BEGIN [A-Z ]*PRIVATE KEY|\beyJ[A-Za-z0-9_-]{10,}\.eyJ"
    r"|://[^/\s:@]+:[^/\s@]+@)",
    re.ASCII,
)


def check_environment(environment: Mapping[str, object]) -> dict[str, str]:
    """The variables as a job may get them; SpecError (one sentence) for the first that may not pass."""
    if len(environment) > MAX_VARIABLES:
        raise SpecError(f"A job takes at most {MAX_VARIABLES} env.NAME= variables (SageMaker's limit), "
                        f"not {len(environment)}.")
    checked: dict[str, str] = {}
    for name, value in environment.items():
        checked[check_name(name)] = check_value(str(name), value)
    return checked


def check_name(name: object) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise SpecError(f"env.{show(name)} is not a variable name: use letters, digits and _, not starting with "
                        "a digit, e.g. env.NCCL_DEBUG=INFO.")
    upper = name.upper()
    if upper.startswith(RESERVED_PREFIXES) or upper in RESERVED_NAMES:
        raise SpecError(f"env.{name} is refused: SageMaker, AWS and trainbot set {name} themselves (names "
                        "starting with SM_, SAGEMAKER_, AWS_, TRAINBOT_, the interpreter's paths and the Hugging "
                        "Face token, which comes from TRAINBOT_HF_TOKEN_SECRET_ARN).")
    if any(word in upper for word in _SECRET_WORDS):
        raise SpecError(f"env.{name} looks like a credential, and a command is seen by the whole channel and kept "
                        "with the job: keep secrets out of /train (an operator gives jobs the Hugging Face token "
                        "with TRAINBOT_HF_TOKEN_SECRET_ARN).")
    return name


def check_value(name: str, value: object) -> str:
    if isinstance(value, bool):
        value = "true" if value else "false"
    if not isinstance(value, str | int | float):
        raise SpecError(f"env.{name} takes text, not {show(value)}.")
    text = str(value)
    check_plain_text(f"env.{name}", text)
    if len(text) > MAX_VALUE_CHARS:
        raise SpecError(f"env.{name} takes at most {MAX_VALUE_CHARS} characters (SageMaker's limit), "
                        f"not {len(text)}.")
    if _SECRET_VALUE.search(text):
        raise SpecError(f"env.{name} holds what looks like a token, key or password, and a command is seen by the "
                        "whole channel and kept with the job: keep secrets out of /train.")
    return text

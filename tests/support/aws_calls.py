"""Every AWS call made in this test process, recorded from botocore's own event hooks, with who made it.

``install()`` adds a handler to botocore's built-in list, so every botocore session made afterwards (the
bot's, the SageMaker SDK's on it, the tests' own) registers it: on ``before-parameter-build`` (emitted for every
call, before anything may answer in the service's place, as tests/support/update_endpoint.py answers
UpdateEndpoint for moto) it records the call's API parameters with the service, the operation, the tags of the
resource acted on (read from moto's in-process backend at that moment, before a delete takes
them away) and who called: the innermost frame of this repository decides, so the tests' arrangements
(``moto_aws.client(...)``) are told apart from the bot's calls; a call with no frame of the repository (the
SDK's upload threads) is the bot's.

tests/conftest.py installs it for the session and checks each bot call of each test against iam-policy.json
(tests/support/iam_policy.py).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import botocore.handlers

ROOT = Path(__file__).resolve().parents[2]
_TESTS = str(ROOT / "tests") + "/"
_THIS = str(Path(__file__).resolve())


@dataclass(frozen=True)
class AwsCall:
    service: str  # botocore's service name: sagemaker, sagemaker-runtime, s3, logs, cloudwatch, ...
    operation: str  # the API operation: CreateTrainingJob, PutObject, ...
    params: dict[str, Any]
    region: str
    by_test: bool  # the test arranging or checking state, not the bot
    resource_tags: dict[str, dict[str, str]] = field(default_factory=dict)  # ARN -> its tags, at call time

    @property
    def name(self) -> str:
        return f"{self.service}.{self.operation}"


class Recorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[AwsCall] = []
        self.installed = False

    def install(self) -> None:
        if self.installed:
            return
        botocore.handlers.BUILTIN_HANDLERS.append(("before-parameter-build", self._record))
        self.installed = True

    def calls(self, since: int = 0) -> list[AwsCall]:
        with self._lock:
            return list(self._calls[since:])

    def mark(self) -> int:
        with self._lock:
            return len(self._calls)

    def _record(self, params: dict[str, Any], model: Any, context: dict[str, Any] | None = None, **_: Any) -> None:
        params = dict(params)
        service = model.service_model.service_name
        region = str((context or {}).get("client_region") or "")
        call = AwsCall(service, model.name, params, region, by_test=_called_by_test(sys._getframe(1)),
                       resource_tags=_resource_tags(service, model.name, params, region))
        with self._lock:
            self._calls.append(call)


def _frames(frame: FrameType | None) -> Iterator[FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _called_by_test(frame: FrameType | None) -> bool:
    for each in _frames(frame):
        path = each.f_code.co_filename
        if path == _THIS or not path.startswith(str(ROOT) + "/") or "/.venv" in path:
            continue
        return path.startswith(_TESTS)
    return False


def _resource_tags(service: str, operation: str, params: dict[str, Any], region: str) -> dict[str, dict[str, str]]:
    """The tags moto holds for the SageMaker resources a tag-scoped call acts on (see iam_policy.TAGGED)."""
    from tests.support.iam_policy import sagemaker_arns_acted_on

    arns = sagemaker_arns_acted_on(service, operation, params, region)
    if not arns:
        return {}
    from moto.backends import get_backend
    from moto.core import DEFAULT_ACCOUNT_ID

    backend = get_backend("sagemaker")[DEFAULT_ACCOUNT_ID][region]
    found: dict[str, dict[str, str]] = {}
    for arn in arns:
        try:
            tags = backend.list_tags(arn)
        except Exception:  # a resource moto does not have: no tags, and the policy check says so
            tags = []
        tags = tags[0] if isinstance(tags, tuple) else tags
        found[arn] = {t["Key"]: t["Value"] for t in tags or []}
    return found


RECORDER = Recorder()

"""UpdateEndpoint for tests on moto, which lacks it (its server answers HTTP 500).

`UpdateEndpointStub` is attached to the boto3 session a backend is built from (before its clients are
made). For every UpdateEndpoint the bot sends it:
1. checks the exact request against botocore's own service model: a `botocore.stub.Stubber` on a client of
   its own expects these very parameters and answers with a response of the real output shape, so a
   parameter the API does not have, a wrong type or a missing required one fails the test
   (ParamValidationError, StubAssertionError);
2. records the request (tests assert on what was sent);
3. answers in moto's place and carries the update out on moto's in-process endpoint as SageMaker does when
   a blue/green update ends: the endpoint serves the new config (its variants from that config), InService.
   With `hold=True` the endpoint stays Updating on its old config until `finish()`; `finish(rolled_back=True)`
   ends it as an automatic rollback does (InService, the old config).
Everything else the bot sends goes to moto itself.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber
from moto.backends import get_backend

from tests.support.moto_server import ACCOUNT_ID, REGION


@dataclass
class UpdateEndpointStub:
    hold: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    _pending: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def attach(self, session: boto3.Session) -> boto3.Session:
        session.events.register("before-parameter-build.sagemaker.UpdateEndpoint", self._check)
        session.events.register("before-call.sagemaker.UpdateEndpoint", self._answer)
        return session

    def _check(self, params: dict[str, Any], **_: Any) -> None:
        checker = boto3.client("sagemaker", region_name=REGION, aws_access_key_id="stub",
                               aws_secret_access_key="stub", endpoint_url="http://127.0.0.1:9")
        response = {"EndpointArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT_ID}:endpoint/{params.get('EndpointName')}"}
        with Stubber(checker) as stubber:
            stubber.add_response("update_endpoint", response, expected_params=copy.deepcopy(params))
            checker.update_endpoint(**params)  # raises unless the request fits the service model
            stubber.assert_no_pending_responses()
        with self._lock:
            self.requests.append(copy.deepcopy(params))

    def _answer(self, model: Any, params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        import json

        body = json.loads(params["body"] or b"{}")
        name, config = body["EndpointName"], body["EndpointConfigName"]
        endpoint = _moto_endpoint(name)
        if self.hold:
            endpoint.endpoint_status = "Updating"
            self._pending[name] = config
        else:
            _serve(endpoint, config)
        parsed = {"EndpointArn": endpoint.arn, "ResponseMetadata": {"HTTPStatusCode": 200}}
        return AWSResponse("http://moto/update-endpoint", 200, {}, None), parsed

    def finish(self, name: str, *, rolled_back: bool = False) -> None:
        endpoint = _moto_endpoint(name)
        config = self._pending.pop(name)
        if rolled_back:
            endpoint.endpoint_status = "InService"
        else:
            _serve(endpoint, config)

    def last_for(self, name: str) -> dict[str, Any]:
        found = [r for r in self.requests if r["EndpointName"] == name]
        assert found, f"no UpdateEndpoint for {name}; sent {self.requests}"
        return found[-1]


def _moto_backend() -> Any:
    return get_backend("sagemaker")[ACCOUNT_ID][REGION]


def _moto_endpoint(name: str) -> Any:
    return _moto_backend().endpoints[name]


def _serve(endpoint: Any, config_name: str) -> None:
    from moto.core.utils import utcnow

    config = _moto_backend().endpoint_configs[config_name]
    endpoint.endpoint_config_name = config_name
    endpoint.production_variants = endpoint._process_production_variants(config.production_variants)
    endpoint.endpoint_status = "InService"
    endpoint.last_modified_time = utcnow()

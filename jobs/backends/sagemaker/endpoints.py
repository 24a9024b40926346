"""SageMaker hosting for `jobs.endpoints.port.EndpointBackend`: the SDK's `HuggingFaceModel` deployed with
`wait=False` (real-time instances or serverless inference), read back and removed with plain boto3 calls,
asked through sagemaker-runtime with the Hugging Face inference toolkit's JSON (``{"inputs": ...}``). A fine-tuned
causal LM runs on the SDK's Text Generation Inference image (``get_huggingface_llm_image_uri``), which loads the
merged model from the job's model.tar.gz (``HF_MODEL_ID=/opt/ml/model``) on every GPU of the instance.

Sessions, retries, timeouts and error translation are the SageMaker training backend's own
(`session`, `errors`), so both back ends behave the same way when AWS misbehaves.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from jobs.backends.aws_session import MAX_ATTEMPTS, client_config, endpoint_of, make_boto_session
from jobs.backends.sagemaker.endpoint_updates import (
    alarm_arguments,
    alarm_watches,
    endpoint_config_arguments,
    endpoint_tags,
    update_endpoint_arguments,
)
from jobs.backends.sagemaker.errors import AwsContext, aws_errors, error_code, error_message, is_not_found
from jobs.backends.sagemaker.hosted_models import deploy_arguments, model_arguments, runs_on_gpu
from jobs.backends.sagemaker.session import build_sdk_session, quiet_sdk_import, remember_valid_configs
from jobs.endpoints.port import DeployRequest, EndpointAccess, RemoteEndpoint, UpdateRequest
from jobs.errors import BackendError, ConfigError, NotFound
from jobs.planning import images
from jobs.settings import Settings

logger = logging.getLogger(__name__)

#: Invocations may take longer than control-plane calls: the first request loads the model.
INVOKE_READ_TIMEOUT_S = 60


class SageMakerEndpoints:
    """`EndpointBackend` on SageMaker real-time and serverless endpoints."""

    name = "sagemaker"

    def __init__(
        self,
        boto_session: boto3.Session,
        *,
        role_arn: str,
        bucket: str,
        region: str | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        code_home: Path | None = None,
    ) -> None:
        if not role_arn:
            raise ConfigError("No SageMaker execution role is set: set TRAINBOT_ROLE_ARN to the role's ARN.")
        self.region = region or boto_session.region_name or ""
        if not self.region:
            raise ConfigError("No AWS region is set: set AWS_DEFAULT_REGION (e.g. us-east-1).")
        self._boto = boto_session
        self._role_arn = role_arn
        self._bucket = bucket
        self._config = client_config(max_attempts)
        self._sm = boto_session.client("sagemaker", region_name=self.region, config=self._config)
        runtime_config = self._config.merge(Config(read_timeout=INVOKE_READ_TIMEOUT_S))
        self._runtime = boto_session.client(
            "sagemaker-runtime", region_name=self.region, config=runtime_config
        )
        self._sdk_session: Any = None
        self._cw: Any = None
        self._sdk_lock = threading.Lock()
        self._images: dict[tuple[Any, str | None], str] = {}
        # Where a team's handler is checked out (the training code's cache, TRAINBOT_HOME/code).
        self._code_home = code_home or Path(tempfile.gettempdir()) / "trainbot"

    # The session, clients and bucket, shared with the Model Registry backend (registry.py).
    @property
    def boto_session(self) -> boto3.Session:
        return self._boto

    @property
    def client(self) -> Any:
        return self._sm

    @property
    def config(self) -> Config:
        return self._config

    @property
    def bucket(self) -> str:
        return self._bucket

    # -- deploy ------------------------------------------------------------------------------------

    def deploy(self, request: DeployRequest) -> None:
        ctx = self._ctx(f"deploy endpoint {request.name}")
        with aws_errors(ctx, sdk=True):
            model = self._model(request)
            try:
                model.deploy(**deploy_arguments(request))
            except ClientError as exc:
                if "already exist" in error_message(exc).lower():
                    raise BackendError(
                        f"SageMaker already has an endpoint or endpoint config named {request.name}: "
                        f"`/undeploy {request.name}`, or deploy with another name=."
                    ) from exc
                raise
        logger.info("asked SageMaker for endpoint %s (model %s)", request.name, request.model_name)

    def container_definition(self, request: DeployRequest) -> dict[str, Any]:
        """The container SageMaker would run for ``request`` (Image, ModelDataUrl, Environment), as the SDK
        builds it for a deploy: what a model package's inference specification names."""
        with aws_errors(self._ctx(f"describe the inference container of {request.model_data}"), sdk=True):
            arguments = deploy_arguments(request)
            definition = self._model(request).prepare_container_def(
                instance_type=arguments.get("instance_type"),
                serverless_inference_config=arguments.get("serverless_inference_config"),
            )
        return {key: definition[key] for key in ("Image", "ModelDataUrl", "Environment") if definition.get(key)}

    def _model(self, request: DeployRequest) -> Any:
        quiet_sdk_import()
        from sagemaker.huggingface import HuggingFaceModel  # imported on first deploy: about a second

        remember_valid_configs()
        if request.framework is not None and request.framework.text_generation:
            return HuggingFaceModel(**model_arguments(request, role=self._role_arn),
                                    image_uri=self._tgi_image_uri(request.framework.version),
                                    sagemaker_session=self._session())
        if request.framework is not None and request.framework.by_uri:  # newer than the SDK's tables
            image = images.inference_image(request.framework.transformers, request.framework.pytorch)
            if image is None:
                raise BackendError(f"No inference image is listed for {request.framework.label()}; this is a bug.")
            return HuggingFaceModel(**model_arguments(request, role=self._role_arn), **self._handler_arguments(request),
                                    image_uri=image.image_uri(self.region, gpu=runs_on_gpu(request)),
                                    sagemaker_session=self._session())
        model = HuggingFaceModel(
            **model_arguments(request, role=self._role_arn), **self._handler_arguments(request),
            sagemaker_session=self._session()
        )
        model.image_uri = self._image_uri(model, request)
        return model

    def _tgi_image_uri(self, version: str) -> str:
        """The SDK's TGI image of ``version`` in this region, remembered."""
        key = ("tgi", version)
        session = self._session()
        with self._sdk_lock:
            if key not in self._images:
                from sagemaker.huggingface import get_huggingface_llm_image_uri

                self._images[key] = str(get_huggingface_llm_image_uri("huggingface", session=session, version=version))
            return self._images[key]

    def _handler_arguments(self, request: DeployRequest) -> dict[str, Any]:
        """``entry_point=``/``source_dir=`` of the team's handler: its folder in the job's code at the pinned
        commit, checked out here (without debris) and repacked by the SDK into the model as code/."""
        if request.handler is None:
            return {}
        from jobs.backends.code_sources import handler_folder

        folder = handler_folder(self._code_home, request.handler, s3=lambda: self._boto.client("s3"))
        return {"entry_point": request.handler.entry_point, "source_dir": str(folder)}

    def _image_uri(self, model: Any, request: DeployRequest) -> str:
        """The SDK's own choice of inference image, remembered: reading its image tables takes a second."""
        key = (request.framework, None if request.serverless else request.instance_type)
        with self._sdk_lock:
            if key not in self._images:
                arguments = deploy_arguments(request)
                self._images[key] = str(
                    model.serving_image_uri(
                        self.region,
                        instance_type=arguments.get("instance_type"),
                        serverless_inference_config=arguments.get("serverless_inference_config"),
                    )
                )
            return self._images[key]

    def _session(self) -> Any:
        with self._sdk_lock:
            if self._sdk_session is None:
                with aws_errors(self._ctx("set up the SageMaker session"), sdk=True):
                    self._sdk_session = build_sdk_session(
                        self._boto, bucket=self._bucket, config=self._config
                    )
            return self._sdk_session

    # -- update in place ---------------------------------------------------------------------------

    def update(self, request: UpdateRequest) -> None:
        """The new model and endpoint config (a promotion), the rollback alarm, then UpdateEndpoint; every
        step that finds its resource made already (a retry) goes on. Never waits for the update."""
        ctx = self._ctx(f"update endpoint {request.endpoint} in place")
        with aws_errors(ctx, sdk=True):
            found = self._describe(request.endpoint)
            if found is None:
                raise NotFound(f"SageMaker has no endpoint named {request.endpoint!r} in {self.region}: "
                               f"/deploy JOB name={request.endpoint} makes it.")
            if request.model is not None:
                self._create_model(request.model, endpoint=request.endpoint)
                self._create(lambda: self._sm.create_endpoint_config(
                    **endpoint_config_arguments(request.config_name, request.model, endpoint=request.endpoint)))
            if request.rollout.alarm:
                self._ensure_alarm(request.endpoint, request.rollout.alarm)
            serverless = self._serverless(request)
            try:
                self._sm.update_endpoint(**update_endpoint_arguments(request, serverless=serverless))
            except ClientError as exc:
                if not _already_updating_to(exc, self._describe(request.endpoint), request.config_name):
                    raise
        logger.info("asked SageMaker to update endpoint %s to config %s", request.endpoint, request.config_name)

    def _create_model(self, request: DeployRequest, *, endpoint: str) -> None:
        model = self._model(request)
        arguments = deploy_arguments(request)
        try:
            model.create(instance_type=arguments.get("instance_type"), tags=endpoint_tags(endpoint),
                         serverless_inference_config=arguments.get("serverless_inference_config"))
        except ClientError as exc:
            if "already exist" not in error_message(exc).lower():
                raise

    @staticmethod
    def _create(call: Any) -> None:
        try:
            call()
        except ClientError as exc:
            if "already exist" not in error_message(exc).lower():
                raise

    def _serverless(self, request: UpdateRequest) -> bool:
        if request.model is not None:
            return request.model.serverless
        config = self._sm.describe_endpoint_config(EndpointConfigName=request.config_name)
        return any("ServerlessConfig" in v for v in config.get("ProductionVariants") or [])

    def _ensure_alarm(self, endpoint: str, alarm: str) -> None:
        """The alarm on this endpoint's 5xx errors: made (or kept) by the bot; one of that name that watches
        something else is never overwritten."""
        cloudwatch = self._cloudwatch()
        existing = cloudwatch.describe_alarms(AlarmNames=[alarm]).get("MetricAlarms") or []
        if existing and not alarm_watches(existing[0], endpoint):
            raise BackendError(f"The CloudWatch alarm {alarm} exists and watches something else than endpoint "
                               f"{endpoint}'s 5xx errors: pass alarm=yes, or another alarm=NAME.")
        if not existing:
            cloudwatch.put_metric_alarm(**alarm_arguments(endpoint, alarm))

    def _cloudwatch(self) -> Any:
        with self._sdk_lock:
            if self._cw is None:
                self._cw = self._boto.client("cloudwatch", region_name=self.region, config=self._config)
            return self._cw

    # -- reading -----------------------------------------------------------------------------------

    def describe(self, name: str) -> RemoteEndpoint:
        with aws_errors(self._ctx(f"describe endpoint {name}")):
            response = self._describe(name)
        if response is None:
            raise NotFound(f"SageMaker has no endpoint named {name!r} in {self.region}: check the name.")
        return RemoteEndpoint(
            name=name,
            status=str(response.get("EndpointStatus", "")),
            failure_reason=str(response.get("FailureReason", "")),
            last_modified=response.get("LastModifiedTime"),
            config_name=str(response.get("EndpointConfigName", "")),
        )

    def _describe(self, name: str) -> dict[str, Any] | None:
        try:
            response: dict[str, Any] = self._sm.describe_endpoint(EndpointName=name)
        except ClientError as exc:
            if is_not_found(exc):
                return None
            raise
        return response

    # -- delete ------------------------------------------------------------------------------------

    def delete(self, name: str, *, configs: Sequence[str] = ()) -> None:
        """The endpoint, then its config and the ones it served before; the models stay (a redeploy can use
        them)."""
        with aws_errors(self._ctx(f"delete endpoint {name}")):
            found = self._describe(name)
            config = str(found["EndpointConfigName"]) if found else name
            if found is not None:
                self._ignore_missing(lambda: self._sm.delete_endpoint(EndpointName=name))
            for each in dict.fromkeys([config, *configs]):
                # Only a config that exists: the bot may delete only what it tagged, and a deploy refused before
                # its config was made leaves none (IAM would refuse the delete, not answer "not found").
                if self._config_exists(each):
                    self._ignore_missing(lambda each=each: self._sm.delete_endpoint_config(EndpointConfigName=each))
        logger.info("deleted endpoint %s and its config %s", name, config)

    def _config_exists(self, name: str) -> bool:
        try:
            self._sm.describe_endpoint_config(EndpointConfigName=name)
        except ClientError as exc:
            if is_not_found(exc):
                return False
            raise
        return True

    @staticmethod
    def _ignore_missing(call: Any) -> None:
        try:
            call()
        except ClientError as exc:
            if not is_not_found(exc):
                raise

    # -- invoke ------------------------------------------------------------------------------------

    def invoke(self, name: str, payload: dict[str, Any]) -> Any:
        with aws_errors(self._ctx(f"ask endpoint {name}")):
            try:
                response = self._runtime.invoke_endpoint(
                    EndpointName=name,
                    ContentType="application/json",
                    Accept="application/json",
                    Body=json.dumps(payload).encode(),
                )
            except ClientError as exc:
                raise _invoke_error(name, exc) from exc
        body = response["Body"].read()
        try:
            return json.loads(body)
        except ValueError:
            raise BackendError(
                f"Endpoint {name} answered with something that is not JSON ({body[:80]!r}): check that it serves "
                "a Hugging Face model."
            ) from None

    # -- links -------------------------------------------------------------------------------------

    def access(self, name: str) -> EndpointAccess:
        region = self.region
        return EndpointAccess(
            console_url=f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/endpoints/{name}",
            invocation_url=f"https://runtime.sagemaker.{region}.amazonaws.com/endpoints/{name}/invocations",
            region=region,
        )

    def context(self, action: str) -> AwsContext:
        return self._ctx(action)

    def _ctx(self, action: str) -> AwsContext:
        return AwsContext(
            action=action, endpoint=endpoint_of(self._sm), role_arn=self._role_arn, bucket=self._bucket
        )


def _already_updating_to(exc: ClientError, found: dict[str, Any] | None, config: str) -> bool:
    """A retried UpdateEndpoint that SageMaker refuses because the first one is under way (or done)."""
    if found is None or error_code(exc) != "ValidationException":
        return False
    pending = (found.get("PendingDeploymentSummary") or {}).get("EndpointConfigName")
    return config in (found.get("EndpointConfigName"), pending)


def _invoke_error(name: str, exc: ClientError) -> Exception:
    code, message = error_code(exc), error_message(exc) or "no reason given"
    if is_not_found(exc):
        return NotFound(f"SageMaker has no endpoint named {name!r} any more: /deploy the job again.")
    if code == "ModelError":
        return BackendError(f"The model behind {name} failed on this input ({message}): check the inputs.")
    return exc


def from_settings(settings: Settings) -> SageMakerEndpoints:
    """Built from the bot's settings exactly as the training backend is: the standard AWS chain (and
    AWS_ENDPOINT_URL), TRAINBOT_ROLE_ARN, TRAINBOT_BUCKET, AWS_DEFAULT_REGION."""
    region = settings.aws_region or None
    return SageMakerEndpoints(
        make_boto_session(region),
        role_arn=settings.trainbot_role_arn,
        bucket=settings.trainbot_bucket,
        region=region,
        code_home=settings.trainbot_home,
    )

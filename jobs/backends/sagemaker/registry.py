"""SageMaker's Model Registry for `jobs.registry.port.RegistryBackend`: a Model Package Group per model
line, a versioned model package per lineage, approval PendingManualApproval until a promotion or a
rollback decides it.

Each package carries the inference container the bot would deploy (image, model data URL, HF_TASK), the
lineage id, task, job and schedule as customer metadata, the commit and repository of own code as
metadata properties, and the final metrics: as customer metadata (``metric:NAME``) and as the package's
ModelQuality statistics, a JSON file beside the lineage's other files in the bucket.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any

from botocore.exceptions import ClientError

from jobs.backends.sagemaker.endpoints import SageMakerEndpoints
from jobs.backends.sagemaker.errors import aws_errors, error_message, is_not_found
from jobs.endpoints.options import DEFAULT_INSTANCE_TYPE
from jobs.endpoints.port import DeployRequest
from jobs.planning.plan import S3Layout
from jobs.registry.port import Approval, PackageRequest, RemotePackage

logger = logging.getLogger(__name__)

MARKER = "trainbot lineage {lineage}:"  # starts every package's description: how a retry finds it
METRICS_FILE = "registry/model-quality.json"
_TASKS = {"text-classification": "CLASSIFICATION", "text-generation": "TEXT_GENERATION"}  # SageMaker's words; else OTHER
_MAX_PROPERTIES = 50
_MAX_VALUE = 256
#: What CustomerMetadataProperties keys and values may hold (letters, spaces, digits, _.:/=+-@); anything else
#: (a metric name of a team's own script, say) becomes "_".
_NOT_PROPERTY = re.compile(r"[^\w\s.:/=+@-]", re.UNICODE)


class SageMakerRegistry:
    """`RegistryBackend` on SageMaker, sharing the endpoints backend's session, clients and SDK models."""

    name = "sagemaker"

    def __init__(self, endpoints: SageMakerEndpoints) -> None:
        self._endpoints = endpoints
        self._sm = endpoints.client
        self._s3: Any = None  # made on the first package with metrics (loading a client's model takes a while)
        self._bucket = endpoints.bucket

    def register(self, request: PackageRequest) -> RemotePackage:
        with aws_errors(self._endpoints.context(f"register the model of {request.lineage_id}"), sdk=True):
            self._ensure_group(request)
            found = self._find(request.group, request.lineage_id)
            if found is not None:
                return found
            arguments = self.package_arguments(request)
            if request.metrics:
                arguments["ModelMetrics"] = {"ModelQuality": {"Statistics": {
                    "ContentType": "application/json", "S3Uri": self._put_metrics(request)}}}
            arn = str(self._sm.create_model_package(**arguments)["ModelPackageArn"])
            described = self._sm.describe_model_package(ModelPackageName=arn)
        logger.info("registered %s as %s", request.lineage_id, arn)
        return _remote(described)

    def package_arguments(self, request: PackageRequest) -> dict[str, Any]:
        """CreateModelPackage, less the metrics file (see the module docstring)."""
        container = self._endpoints.container_definition(DeployRequest(
            name=request.group, model_name=request.group, model_data=request.model_data,
            task=request.task or "text-classification", framework=request.framework,
            instance_type=DEFAULT_INSTANCE_TYPE, instance_count=1))
        if not request.task:  # own code without task=: the container must not be told a task it lacks
            container.get("Environment", {}).pop("HF_TASK", None)
        arguments: dict[str, Any] = {
            "ModelPackageGroupName": request.group,
            "ModelPackageDescription": (MARKER.format(lineage=request.lineage_id)
                                        + f" {request.task or 'own code'} model of {request.job_name}")[:1024],
            "InferenceSpecification": {
                "Containers": [container],
                "SupportedContentTypes": ["application/json"],
                "SupportedResponseMIMETypes": ["application/json"],
            },
            "ModelApprovalStatus": Approval.PENDING.value,
            "CustomerMetadataProperties": _properties(request),
            "Domain": "NATURAL_LANGUAGE_PROCESSING",
            "Task": _TASKS.get(request.task, "OTHER"),
            # Idempotency on AWS's side too: one lineage, one token (36 characters at most).
            "ClientToken": str(uuid.uuid5(uuid.NAMESPACE_URL, f"trainbot:{request.lineage_id}")),
        }
        metadata = {"GeneratedBy": f"trainbot {request.job_name}", "CommitId": request.commit,
                    "Repository": request.code}
        arguments["MetadataProperties"] = {key: value[:1024] for key, value in metadata.items() if value}
        return arguments

    def set_approval(self, arn: str, approval: Approval, description: str, properties: dict[str, str]) -> None:
        with aws_errors(self._endpoints.context(f"set the approval of {arn}")):
            current = self._sm.describe_model_package(ModelPackageName=arn).get("CustomerMetadataProperties") or {}
            merged = {**current, **{_clean(f"trainbot:{key}", 128): _clean(value, _MAX_VALUE)
                                    for key, value in properties.items()}}
            self._sm.update_model_package(ModelPackageArn=arn, ModelApprovalStatus=approval.value,
                                          ApprovalDescription=description[:1000],
                                          CustomerMetadataProperties=dict(list(merged.items())[:_MAX_PROPERTIES]))
        logger.info("model package %s is %s", arn, approval.value)

    # -- helpers ----------------------------------------------------------------------------------

    def _ensure_group(self, request: PackageRequest) -> None:
        try:
            self._sm.describe_model_package_group(ModelPackageGroupName=request.group)
            return
        except ClientError as exc:
            if not (is_not_found(exc) or "does not exist" in error_message(exc).lower()):
                raise
        what = f"schedule {request.schedule}" if request.schedule == request.group else f"model line {request.group}"
        try:
            self._sm.create_model_package_group(ModelPackageGroupName=request.group,
                                                ModelPackageGroupDescription=f"trainbot: the models of {what}")
        except ClientError as exc:
            if "already exist" not in error_message(exc).lower():
                raise

    def _find(self, group: str, lineage_id: str) -> RemotePackage | None:
        marker = MARKER.format(lineage=lineage_id)
        pages = self._sm.get_paginator("list_model_packages").paginate(ModelPackageGroupName=group)
        for page in pages:
            for summary in page.get("ModelPackageSummaryList") or []:
                if str(summary.get("ModelPackageDescription", "")).startswith(marker):
                    arn = summary["ModelPackageArn"]
                    return _remote(self._sm.describe_model_package(ModelPackageName=arn))
        return None

    def _put_metrics(self, request: PackageRequest) -> str:
        layout = S3Layout(self._bucket, request.lineage_id)
        key = f"{layout.prefix.removeprefix(f's3://{self._bucket}/')}/{METRICS_FILE}"
        body = {"lineage_id": request.lineage_id, "task": request.task or "own code",
                "metrics": {name: {"value": value, "standard_deviation": "NaN"}
                            for name, value in sorted(request.metrics.items())}}
        if self._s3 is None:
            self._s3 = self._endpoints.boto_session.client("s3", region_name=self._endpoints.region,
                                                           config=self._endpoints.config)
        self._s3.put_object(Bucket=self._bucket, Key=key, Body=json.dumps(body, indent=1).encode(),
                            ContentType="application/json")
        return f"s3://{self._bucket}/{key}"


def _properties(request: PackageRequest) -> dict[str, str]:
    values = {"trainbot:lineage_id": request.lineage_id, "trainbot:job_name": request.job_name,
              "trainbot:task": request.task or "own code", "trainbot:schedule": request.schedule,
              "trainbot:launched_by": request.launched_by, "trainbot:commit": request.commit}
    for name, value in sorted(request.metrics.items()):
        values[f"trainbot:metric:{name}"] = f"{value:g}"
    kept = {_clean(key, 128): _clean(value, _MAX_VALUE) for key, value in values.items() if value}
    return dict(list(kept.items())[:_MAX_PROPERTIES])


def _clean(text: str, limit: int) -> str:
    return _NOT_PROPERTY.sub("_", text)[:limit]


def _remote(described: dict[str, Any]) -> RemotePackage:
    containers = (described.get("InferenceSpecification") or {}).get("Containers") or [{}]
    return RemotePackage(arn=str(described["ModelPackageArn"]), version=int(described.get("ModelPackageVersion") or 0),
                         image=str(containers[0].get("Image", "")))

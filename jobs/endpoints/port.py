"""The port every endpoint backend implements (SageMaker hosting, local processes, test doubles), and the
plain records that cross it.

Backends translate; they decide nothing. Which job may be deployed, with which framework, under which
name, and who may do it is decided in `jobs.endpoints.service`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any, Protocol

from jobs.planning.serving import Framework


class EndpointStatus(str, Enum):
    CREATING = "creating"  # recorded and asked for; the backend is still bringing it up
    IN_SERVICE = "in_service"  # answering requests (and costing money while it stays up)
    FAILED = "failed"  # the backend could not bring it up; nothing is left running
    DELETED = "deleted"  # undeployed: endpoint and its config are gone, the model is kept

    def is_terminal(self) -> bool:
        return self in (EndpointStatus.FAILED, EndpointStatus.DELETED)


@dataclass(frozen=True)
class DeployRequest:
    """Everything a backend needs to create one endpoint; it must not wait for it to come up."""

    name: str  # the endpoint's name (also its config's)
    model_name: str  # the hosted model's name, unique per deploy (models are kept after undeploy)
    model_data: str  # S3ModelArtifacts (s3://.../model.tar.gz) or a local model folder
    task: str  # "question-answering" or "text-classification"
    framework: Framework | None  # None: the backend's own (local)
    instance_type: str
    instance_count: int
    serverless: bool = False
    memory_mb: int = 2048  # serverless only
    max_concurrency: int = 5  # serverless only
    # The team's inference handler (HuggingFaceModel(entry_point=, source_dir=)): its file, and where it is: the
    # job's own code as planned (git_config/source_dir/entry_point of its estimator), with ``folder`` inside it.
    handler: InferenceCode | None = None


@dataclass(frozen=True)
class InferenceCode:
    """``entry_point=`` in ``folder`` of the code the job trained with (``code``: its estimator's code
    arguments, which the backend checks out at the pinned commit)."""

    entry_point: str
    folder: str
    code: dict[str, Any]


@dataclass(frozen=True)
class RemoteEndpoint:
    """What the backend says about one endpoint, in SageMaker's vocabulary (EndpointStatus values:
    Creating, InService, Updating, Failed, Deleting, OutOfService, ...)."""

    name: str
    status: str
    failure_reason: str = ""
    last_modified: datetime | None = None
    config_name: str = ""  # the endpoint config it serves now ("" where the backend does not say)

    @property
    def ready(self) -> bool:
        return self.status == "InService"

    @property
    def failed(self) -> bool:
        return self.status in ("Failed", "OutOfService")


@dataclass(frozen=True)
class Rollout:
    """How an update in place shifts traffic (SageMaker's blue/green deployment; the local backend swaps
    its model atomically whatever this says)."""

    canary_percent: int | None = None  # a canary step of this share of capacity first; None: all at once
    wait_seconds: int = 300  # between the canary and the rest, and before the old fleet goes
    alarm: str | None = None  # a CloudWatch alarm on the endpoint's 5xx errors: firing rolls it back


@dataclass(frozen=True)
class UpdateRequest:
    """An endpoint updated in place to the config ``config_name``: a new one made of ``model`` (a
    promotion), or one it served before (``model`` None: a rollback). Name and URL never change."""

    endpoint: str
    config_name: str
    model: DeployRequest | None
    rollout: Rollout


@dataclass(frozen=True)
class EndpointAccess:
    """How a person reaches a live endpoint: a console page and the URL requests go to."""

    console_url: str  # the AWS console page, or the local log file
    invocation_url: str  # https://runtime.sagemaker.<region>.amazonaws.com/endpoints/<name>/invocations
    region: str = ""  # "" for local endpoints


class EndpointBackend(Protocol):
    #: "sagemaker" or "local"; stored on each endpoint.
    name: str

    def deploy(self, request: DeployRequest) -> None:
        """Start creating the endpoint and return at once (SageMaker: ``wait=False``).
        Raises BackendError (or a subclass) with a sentence a person can act on."""
        ...

    def describe(self, name: str) -> RemoteEndpoint:
        """Raises NotFound for an endpoint the backend does not have."""
        ...

    def update(self, request: UpdateRequest) -> None:
        """Start moving the live endpoint to ``request.config_name`` (made first when ``request.model`` is
        given) and return at once; `describe` says when it serves it. Safe to retry: a config or model
        that exists already is used, not made twice. Raises BackendError with a sentence a person can act on."""
        ...

    def delete(self, name: str, *, configs: Sequence[str] = ()) -> None:
        """Delete the endpoint, its config and ``configs`` (those it served before; the models stay); an
        endpoint or config already gone is not an error."""
        ...

    def invoke(self, name: str, payload: dict[str, Any]) -> Any:
        """Send ``payload`` as JSON and return the decoded JSON answer."""
        ...

    def access(self, name: str) -> EndpointAccess: ...

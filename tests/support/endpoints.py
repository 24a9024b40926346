"""Helpers for the endpoint tests: a completed lineage recorded in a real store, and an in-memory
EndpointBackend peer whose endpoints move when the test says so (as SageMaker's would)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobs import lineage as moves
from jobs.endpoints.port import DeployRequest, EndpointAccess, RemoteEndpoint, UpdateRequest
from jobs.errors import NotFound
from jobs.lineage import Lineage, LineageStatus
from jobs.planning.grammar import parse_command
from jobs.records import Actor
from jobs.store.store import Store

LAUNCHER = Actor("U_ALICE", channel_id="C_ML", via="slack")


def completed_lineage(
    store: Store,
    lineage_id: str,
    *,
    text: str = "bert-squad",
    backend: str = "sagemaker",
    model_artifacts: str | None = None,
    actor: Actor = LAUNCHER,
    status: LineageStatus = LineageStatus.COMPLETED,
) -> Lineage:
    """A lineage whose attempt 1 ended Completed with `model_artifacts` (default: its S3 model.tar.gz)."""
    spec = parse_command(text)
    store.create_lineage(
        lineage_id=lineage_id,
        spec=spec,
        backend=backend,
        checkpoint_uri=f"s3://bkt/{lineage_id}/checkpoints",
        actor=actor,
        estimated_usd=1.0,
    )
    job = f"{lineage_id}-1"
    store.add_attempt(lineage_id, number=1, instance_type=spec.instance_type, spot=spec.spot)
    store.transition_attempt(job, moves.ATTEMPT_CONFIRMED)
    artifacts = model_artifacts or f"s3://bkt/{job}/output/model.tar.gz"
    if status is LineageStatus.COMPLETED:
        store.transition_attempt(
            job, moves.ATTEMPT_COMPLETED, model_artifacts=artifacts
        )
    from_pending = {m.target: m for m in moves.LINEAGE_MOVES if LineageStatus.PENDING in m.sources}
    store.transition_lineage(lineage_id, from_pending[status])
    return store.get_lineage(lineage_id)


@dataclass
class FakeEndpoints:
    """In-memory EndpointBackend: deploys start Creating; `set_status` moves them; `answers` are returned
    by invoke in turn. Every call is recorded as (method, name, argument)."""

    name: str = "sagemaker"
    region: str = "us-east-1"
    calls: list[tuple[str, str, Any]] = field(default_factory=list)
    statuses: dict[str, RemoteEndpoint] = field(default_factory=dict)
    answers: list[Any] = field(default_factory=list)
    deploy_error: Exception | None = None
    update_error: Exception | None = None
    configs: dict[str, str] = field(default_factory=dict)  # endpoint -> the config it serves
    pending: dict[str, str] = field(default_factory=dict)  # endpoint -> the config an update moves it to

    def deploy(self, request: DeployRequest) -> None:
        self.calls.append(("deploy", request.name, request))
        if self.deploy_error is not None:
            raise self.deploy_error
        self.configs[request.name] = request.name
        self.statuses[request.name] = RemoteEndpoint(request.name, "Creating", config_name=request.name)

    def set_status(self, name: str, status: str, reason: str = "") -> None:
        self.statuses[name] = RemoteEndpoint(name, status, reason, config_name=self.configs.get(name, name))

    def update(self, request: UpdateRequest) -> None:
        """Updating on the old config until `finish_update` (as SageMaker's blue/green would be)."""
        self.calls.append(("update", request.endpoint, request))
        if self.update_error is not None:
            raise self.update_error
        self.pending[request.endpoint] = request.config_name
        self.set_status(request.endpoint, "Updating")

    def finish_update(self, name: str, *, rolled_back: bool = False) -> None:
        """The update took (InService on the new config), or SageMaker rolled it back (on the old one)."""
        config = self.pending.pop(name)
        if not rolled_back:
            self.configs[name] = config
        self.set_status(name, "InService")

    def describe(self, name: str) -> RemoteEndpoint:
        self.calls.append(("describe", name, None))
        if name not in self.statuses:
            raise NotFound(f"no endpoint {name}")
        return self.statuses[name]

    def delete(self, name: str, *, configs: Any = ()) -> None:
        self.calls.append(("delete", name, tuple(configs)))
        self.statuses.pop(name, None)

    def invoke(self, name: str, payload: dict[str, Any]) -> Any:
        self.calls.append(("invoke", name, payload))
        return self.answers.pop(0)

    def access(self, name: str) -> EndpointAccess:
        return EndpointAccess(
            console_url=f"https://{self.region}.console.aws.amazon.com/sagemaker/home#/endpoints/{name}",
            invocation_url=f"https://runtime.sagemaker.{self.region}.amazonaws.com/endpoints/{name}/invocations",
            region=self.region,
        )

    def of(self, method: str) -> list[tuple[str, str, Any]]:
        return [call for call in self.calls if call[0] == method]

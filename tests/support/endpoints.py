"""Helpers for the endpoint tests: a completed lineage recorded in a real store, and an in-memory
EndpointBackend peer whose endpoints move when the test says so (as SageMaker's would)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jobs.endpoints.port import DeployRequest, EndpointAccess, RemoteEndpoint
from jobs.errors import NotFound
from jobs.lifecycle import state as st
from jobs.lifecycle.state import LineageStatus
from jobs.planning.grammar import parse_command
from jobs.records import Actor
from jobs.store.store import Lineage, Store

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
    store.transition_attempt(job, st.ATTEMPT_CONFIRMED)
    artifacts = model_artifacts or f"s3://bkt/{job}/output/model.tar.gz"
    if status is LineageStatus.COMPLETED:
        store.transition_attempt(
            job, st.ATTEMPT_COMPLETED, model_artifacts=artifacts
        )
    moves = {m.target: m for m in st.LINEAGE_MOVES if LineageStatus.PENDING in m.sources}
    store.transition_lineage(lineage_id, moves[status])
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

    def deploy(self, request: DeployRequest) -> None:
        self.calls.append(("deploy", request.name, request))
        if self.deploy_error is not None:
            raise self.deploy_error
        self.statuses[request.name] = RemoteEndpoint(request.name, "Creating")

    def set_status(self, name: str, status: str, reason: str = "") -> None:
        self.statuses[name] = RemoteEndpoint(name, status, reason)

    def describe(self, name: str) -> RemoteEndpoint:
        self.calls.append(("describe", name, None))
        if name not in self.statuses:
            raise NotFound(f"no endpoint {name}")
        return self.statuses[name]

    def delete(self, name: str) -> None:
        self.calls.append(("delete", name, None))
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

"""The port a remote model registry implements (SageMaker's Model Registry, test doubles), and the plain
records that cross it. The store keeps every package in any case; a remote registry is where teams that run
SageMaker look for them (Studio, pipelines, CI).

Backends translate; they decide nothing. Which group a lineage's model goes to, and who approves it, is
decided in `jobs.registry.service`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from jobs.planning.serving import Framework


class Approval(str, Enum):
    """SageMaker's ModelApprovalStatus."""

    PENDING = "PendingManualApproval"  # registered; nobody has put it into production
    APPROVED = "Approved"  # promoted into an endpoint (by a person, or a schedule that saw it was better)
    REJECTED = "Rejected"  # rolled back out of an endpoint, with who and why


@dataclass(frozen=True)
class PackageRequest:
    """One lineage's model, to be registered (once: the lineage id is the key)."""

    group: str  # the Model Package Group
    lineage_id: str
    job_name: str  # the attempt that produced the model
    model_data: str  # S3ModelArtifacts, or a local model folder
    task: str  # "" for own code without task=
    framework: Framework | None  # the inference image's versions; None on the local backend
    code: str = ""  # own code: where it came from (git+URL or s3://)
    commit: str = ""  # own code: the commit it was trained from
    metrics: dict[str, float] = field(default_factory=dict)  # the final metrics
    schedule: str = ""  # the schedule that launched it, if any
    launched_by: str = ""


@dataclass(frozen=True)
class RemotePackage:
    arn: str  # ModelPackageArn
    version: int  # ModelPackageVersion within its group
    image: str  # the inference image it names


class RegistryBackend(Protocol):
    #: "sagemaker"; the store-only registry has no backend at all.
    name: str

    def register(self, request: PackageRequest) -> RemotePackage:
        """Create the group if missing and the package in it, approval PendingManualApproval. Idempotent:
        a package of this lineage that exists already is returned, never a second one."""
        ...

    def set_approval(self, arn: str, approval: Approval, description: str, properties: dict[str, str]) -> None:
        """UpdateModelPackage: the approval, why (ApprovalDescription), and who (customer metadata)."""
        ...

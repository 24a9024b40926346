"""`/models [GROUP]`: the registry's model lines, or one line's versions with their metrics, approval and
where each is deployed now, as plain lines and as JSON (`trainbot models [GROUP] --json`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jobs.registry.store import ModelPackage
from jobs.wording import Counted

NONE = "No models are registered yet: a completed job's model is registered when the watcher sees it end."
GROUPS_HEAD = "Model lines ({count}); /models LINE lists one's versions:"
GROUP_LINE = Counted("• {name}: {count:version}")
PACKAGES_HEAD = Counted("{group}: {count:version}, newest first")
PACKAGES_HEAD_ALL = "Models, newest first ({count}):"
PACKAGE_LINE = "• {label} {lineage}: {approval}{by}{metrics}; {deployed}"
DEPLOYED = "serves {names}"
NOT_DEPLOYED = "not deployed"
APPROVAL_WORDS = {"PendingManualApproval": "pending", "Approved": "approved", "Rejected": "rejected"}


def render_groups(groups: Sequence[tuple[str, int]]) -> list[str]:
    if not groups:
        return [NONE]
    return [GROUPS_HEAD.format(count=len(groups)), *(GROUP_LINE.format(name=n, count=c) for n, c in groups)]


def render_packages(group: str | None, packages: Sequence[ModelPackage],
                    deployed: Mapping[str, list[str]]) -> list[str]:
    """``deployed``: lineage id -> the endpoints serving it now."""
    if not packages:
        return [NONE]
    head = PACKAGES_HEAD.format(group=group, count=len(packages)) if group else \
        PACKAGES_HEAD_ALL.format(count=len(packages))
    return [head, *(_line(p, deployed.get(p.lineage_id, [])) for p in packages)]


def _line(package: ModelPackage, endpoints: list[str]) -> str:
    metrics = ", ".join(f"{name} {value:g}" for name, value in sorted(package.metrics.items())[:4])
    by = f" by {package.approval_by}" if package.approval_by else ""
    return PACKAGE_LINE.format(
        label=package.label, lineage=package.lineage_id, approval=APPROVAL_WORDS[package.approval.value], by=by,
        metrics=f" · {metrics}" if metrics else "",
        deployed=DEPLOYED.format(names=", ".join(endpoints)) if endpoints else NOT_DEPLOYED)


def packages_json(packages: Sequence[ModelPackage], deployed: Mapping[str, list[str]]) -> list[dict[str, Any]]:
    return [{
        "group": p.group_name, "version": p.version, "lineage_id": p.lineage_id, "job_name": p.job_name,
        "arn": p.arn or None, "approval": p.approval.value, "approval_by": p.approval_by or None,
        "approval_reason": p.approval_reason or None, "image": p.image or None, "model_data": p.model_data,
        "task": p.task or None, "commit": p.code_commit or None, "metrics": p.metrics,
        "deployed_at": deployed.get(p.lineage_id, []), "registered_at": p.created_at.isoformat(),
    } for p in packages]

"""`/endpoint NAME`: what an endpoint served, when, and who put it there (deploys, promotions, rollbacks), as
plain lines (the CLI, the console; Slack escapes them) and as JSON (`trainbot endpoint NAME --json`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from jobs.endpoints.revisions import Action, Revision, RevisionStatus
from jobs.endpoints.store import Endpoint

HEAD = "Endpoint {name}: {status}, serving {lineage} on {where} (owner {owner}); config {config}."
UPDATING = "Being updated to {lineage} (asked by {who})."
NONE = "No history yet."
LINE = "{when}  {action} {lineage}{package} by {who}{reason}: {status}"
_ACTIONS = {Action.DEPLOY: "deployed", Action.PROMOTE: "promoted", Action.ROLLBACK: "rolled back to"}
_STATUS = {
    RevisionStatus.UPDATING: "updating now",
    RevisionStatus.SERVING: "serving now",
    RevisionStatus.REPLACED: "replaced{ended}",
    RevisionStatus.ROLLED_BACK: "rolled back{ended}",
    RevisionStatus.RESTORED: "served again by a rollback{ended}",
    RevisionStatus.FAILED: "did not take ({reason})",
    RevisionStatus.RETIRED: "ended with the endpoint{ended}",
}

PackageLabel = Callable[[str], "str | None"]


def render_history(endpoint: Endpoint, revisions: list[Revision], package: PackageLabel) -> list[str]:
    lines = [HEAD.format(name=endpoint.name, status=endpoint.status.value.replace("_", " "),
                         lineage=endpoint.lineage_id, where=endpoint.where, owner=endpoint.deployed_by,
                         config=endpoint.serving_config)]
    under_way = next((r for r in revisions if r.status is RevisionStatus.UPDATING and r.action is not Action.DEPLOY),
                     None)
    if under_way is not None:
        lines.append(UPDATING.format(lineage=under_way.lineage_id, who=under_way.requested_by))
    lines += [_line(r, package) for r in revisions] or [NONE]
    return lines


def _line(revision: Revision, package: PackageLabel) -> str:
    label = package(revision.lineage_id)
    ended = f" {_when(revision.ended_at)}" if revision.ended_at else ""
    status = _STATUS[revision.status].format(ended=ended, reason=revision.failure_reason.rstrip(".") or "no reason")
    return LINE.format(when=_when(revision.serving_since or revision.created_at), action=_ACTIONS[revision.action],
                       lineage=revision.lineage_id, package=f" ({label})" if label else "", who=revision.requested_by,
                       reason=f" ({revision.reason.rstrip('.')})" if revision.reason else "", status=status)


def history_json(endpoint: Endpoint, revisions: list[Revision], package: PackageLabel) -> dict[str, Any]:
    return {
        "endpoint": endpoint.name, "status": endpoint.status.value, "lineage_id": endpoint.lineage_id,
        "config": endpoint.serving_config, "owner": endpoint.deployed_by, "where": endpoint.where,
        "revisions": [{
            "id": r.id, "action": r.action.value, "status": r.status.value, "lineage_id": r.lineage_id,
            "job_name": r.job_name, "package": package(r.lineage_id), "config": r.config_name, "by": r.requested_by,
            "via": r.via, "reason": r.reason, "failure_reason": r.failure_reason,
            "instance_type": r.instance_type, "instance_count": r.instance_count, "serverless": r.serverless,
            "alarm": r.alarm or None, "canary_percent": r.canary_percent,
            "asked_at": _iso(r.created_at), "serving_since": _iso(r.serving_since), "ended_at": _iso(r.ended_at),
        } for r in revisions],
    }


def _when(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M UTC") if at else "-"


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None

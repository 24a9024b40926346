"""`trainbot status JOB`: one lineage's report, fresh even where nothing watches it.

A job launched with `trainbot launch` is followed by whatever watches the store (`trainbot watch`, `serve`,
`console`). Status of a job not known to have ended refreshes it itself, whether or not a watcher ran a
cycle lately (a recent watch stamp says nothing of a console that quit a moment ago, issue 35): one describe
through the watcher (what it sees is recorded and decided on as a cycle would, every move guarded, so a
watcher doing the same meanwhile is harmless), then the steps after its ending if it ended (the history
record, the report, the announcement waiting for a chat). Where nothing watched lately it says so and how to
follow the job, and why a lineage ended (the ending's own words).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobs.lifecycle.forecasts import forecast_of
from jobs.lifecycle.progress import LiveProgress, read_live
from jobs.lifecycle.watcher import watched_key
from jobs.lineage import Lineage, LineageStatus
from jobs.reporting.reports import JobReport, build_report, with_forecast

if TYPE_CHECKING:
    from bot.wiring import Runtime

#: A store whose watcher ran a cycle within this many watch periods is being followed.
FRESH_PERIODS = 3
FOLLOW = "`trainbot watch` follows it (relaunches, reports); `trainbot console` or `serve` do too"


@dataclass(frozen=True)
class JobStatus:
    report: JobReport
    live: LiveProgress | None
    last_watched_at: datetime | None  # the last full watch cycle over the lineage's backend
    refreshed: bool  # this command described the job itself
    followed: bool = False  # a watcher ran a cycle within FRESH_PERIODS watch periods

    def to_json(self) -> dict[str, Any]:
        data = self.report.to_json()
        data["progress"] = self.live.to_json() if self.live else None
        data["watch"] = {"last_watched_at": self.last_watched_at.isoformat() if self.last_watched_at else None,
                         "refreshed": self.refreshed}
        return data

    def to_text(self, now: datetime) -> str:
        lines = self.report.to_text().splitlines()
        if self.live is not None:
            lines.insert(1, f"  progress: {self.live.words()}")
        if self.refreshed and not self.followed:
            when = "never" if self.last_watched_at is None else f"last {_ago(now - self.last_watched_at)} ago"
            lines.insert(1, f"  refreshed from the backend just now; watched {when}: {FOLLOW}")
        return "\n".join(lines)


def job_status(runtime: Runtime, ref: str) -> JobStatus:
    lineage = runtime.jobs.get(ref)
    now = runtime.clock.now()
    watched = _last_watched(runtime, lineage)
    refreshed = False
    latest = lineage.latest_attempt
    followed = watched is not None and now - watched <= timedelta(seconds=FRESH_PERIODS * runtime.settings.watch_seconds)
    if not lineage.status.is_terminal() and latest is not None and lineage.backend == runtime.backend.name:
        runtime.watcher.check_now([latest.job_name])
        refreshed = True
    runtime.endings.process_due(lineage_id=lineage.id)  # what follows an ending happens without a watcher too
    lineage = runtime.jobs.get(lineage.id)
    report = build_report(lineage, runtime.backend, now=runtime.clock.now(), reason=_why(runtime, lineage))
    report = with_forecast(report, forecast_of(runtime.store, runtime.clock, lineage.id))
    live = read_live(runtime.store, runtime.backend, runtime.clock, lineage)
    return JobStatus(report, live, watched, refreshed, followed)


def job_json(lineage: Lineage) -> dict[str, Any]:
    """One job of `trainbot jobs --json` (field names fixed: scripts read them; the README lists them)."""
    attempt = lineage.latest_attempt
    spec = lineage.spec
    return {
        "id": lineage.id,
        "status": lineage.status.value,
        "ended": lineage.status.is_terminal(),
        "job_name": attempt.job_name if attempt else None,
        "attempts": len(lineage.attempts),
        "task": spec.task,
        "model": spec.model_label,
        "dataset": spec.data_label,
        "instance_type": attempt.instance_type if attempt else spec.instance_type,
        "instance_count": spec.instance_count,
        "spot": spec.spot,
        "backend": lineage.backend,
        "launched_by": lineage.launched_by,
        "schedule": lineage.schedule,
        "worst_case_usd": round(lineage.estimated_usd, 2),
        "created_at": lineage.created_at.isoformat(),
        "updated_at": lineage.updated_at.isoformat(),
    }


def _last_watched(runtime: Runtime, lineage: Lineage) -> datetime | None:
    stamp = runtime.store.get_meta(watched_key(lineage.backend))
    return datetime.fromisoformat(stamp) if stamp else None


def _why(runtime: Runtime, lineage: Lineage) -> str:
    """The ending's reason; for a lineage that ended before endings were recorded, its last attempt's."""
    if not lineage.status.is_terminal() or lineage.status is LineageStatus.COMPLETED:
        return ""
    ending = runtime.store.endings.get(lineage.id)
    if ending is not None:
        return ending.reason or lineage.status.value.replace("_", " ")
    latest = lineage.latest_attempt
    return latest.failure_reason if latest is not None else ""


def _ago(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 120:
        return f"{max(seconds, 0)} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"

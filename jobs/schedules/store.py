"""The schedule tables (created by the baseline revision), the records read from them, and the write-transaction recipe."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Row

from jobs.comparison import describe_data
from jobs.lineage import Lineage

# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class ScheduleRun:
    schedule: str
    slot: str
    scheduled_for: datetime
    outcome: str  # claimed (launch in progress), launched, skipped, queued, failed
    lineage_id: str | None
    note: str
    created_at: datetime


@dataclass(frozen=True)
class Schedule:
    name: str
    cron: str
    tz: str
    text: str
    channel: str | None
    created_by: str
    via: str
    paused: bool
    overlap: str  # skip or queue
    regression_points: float
    deploy_if_better: bool
    train_data: str | None
    dataset_revision: str | None
    queued_for: datetime | None
    created_at: datetime
    updated_at: datetime
    endpoint: str | None = None  # the endpoint its runs are promoted into
    next_run: datetime | None = None  # filled by the service (None when paused)
    last_run: ScheduleRun | None = None
    last_result: str = ""  # e.g. "completed (nightly-x): eval_f1=88.1", "skipped: ..."

    def next_run_text(self) -> str:
        if self.paused:
            return "paused"
        return _when(self.next_run) if self.next_run else "never"

    def data_text(self) -> str:
        return describe_data(self.train_data, self.dataset_revision)


@dataclass(frozen=True)
class FireResult:
    schedule: str
    outcome: str  # launched, skipped, queued, failed, duplicate, missing, paused
    lineage: Lineage | None = None
    note: str = ""


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def schedule_from_row(row: Row[Any]) -> Schedule:
    return Schedule(
        name=row.name, cron=row.cron, tz=row.tz, text=row.text, channel=row.channel, created_by=row.created_by,
        via=row.via, paused=bool(row.paused), overlap=row.overlap, regression_points=float(row.regression_points),
        deploy_if_better=bool(row.deploy_if_better), train_data=row.train_data,
        dataset_revision=row.dataset_revision, queued_for=row.queued_for, created_at=row.created_at,
        updated_at=row.updated_at, endpoint=row.endpoint,
    )


def run_from_row(row: Row[Any]) -> ScheduleRun:
    return ScheduleRun(schedule=row.schedule, slot=row.slot, scheduled_for=row.scheduled_for, outcome=row.outcome,
                       lineage_id=row.lineage_id, note=row.note, created_at=row.created_at)

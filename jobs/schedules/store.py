"""The schedule tables (created by the baseline revision), the records read from them, and the write-transaction recipe."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Row

from jobs.schedules.comparison import DEFAULT_REGRESSION_POINTS, describe_data
from jobs.store.schema import UTCDateTime, metadata
from jobs.store.store import Lineage

schedules_table = Table(
    "schedules", metadata,
    Column("name", String(64), primary_key=True),
    Column("cron", String(120), nullable=False),
    Column("tz", String(64), nullable=False),
    Column("text", Text, nullable=False),  # the /train arguments, as validated at add time
    Column("channel", String(64)),
    Column("created_by", String(64), nullable=False),
    Column("via", String(32), nullable=False),
    Column("paused", Boolean, nullable=False, default=False),
    Column("overlap", String(16), nullable=False, default="skip"),
    Column("regression_points", Float, nullable=False, default=DEFAULT_REGRESSION_POINTS),
    Column("deploy_if_better", Boolean, nullable=False, default=False),
    Column("train_data", Text),
    Column("dataset_revision", String(255)),
    Column("queued_for", UTCDateTime),  # a run that waits for the previous one to end (overlap=queue)
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
)

schedule_runs = Table(
    "schedule_runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("schedule", String(64), nullable=False),
    Column("slot", String(128), nullable=False),  # cron:<iso>, queued:<iso> or manual:<uuid>
    Column("scheduled_for", UTCDateTime, nullable=False),
    Column("outcome", String(16), nullable=False),  # claimed, launched, skipped, queued, failed
    Column("lineage_id", String(64)),
    Column("note", Text, nullable=False, default=""),
    Column("created_at", UTCDateTime, nullable=False),
    UniqueConstraint("schedule", "slot", name="uq_schedule_runs_slot"),
    Index("ix_schedule_runs_schedule", "schedule", "id"),
)

#: One row per lease name: the process holding it runs the schedules until `expires_at` (epoch seconds).
scheduler_lease = Table(
    "scheduler_lease", metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("expires_at", Float, nullable=False),
)


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
        updated_at=row.updated_at,
    )


def run_from_row(row: Row[Any]) -> ScheduleRun:
    return ScheduleRun(schedule=row.schedule, slot=row.slot, scheduled_for=row.scheduled_for, outcome=row.outcome,
                       lineage_id=row.lineage_id, note=row.note, created_at=row.created_at)

"""Baseline: the schema of the first release (hand-written steps 1, 9 and 20: core, schedules, endpoints).

A store made by that release already has these tables; each is created only where it is missing, so such a
store upgrades in place with its rows untouched, and a new store gets them all. The definitions are frozen
here on purpose: later changes to jobs/store/schema.py come as later revisions.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def _create(name: str, *items: Any) -> None:
    if not sa.inspect(op.get_bind()).has_table(name):
        op.create_table(name, *items)


def upgrade() -> None:
    _create(
        "lineages",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("checkpoint_uri", sa.Text(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("launched_by", sa.String(64), nullable=False),
        sa.Column("origin", sa.String(32), nullable=False),
        sa.Column("channel", sa.String(64)),
        sa.Column("message_ts", sa.String(64)),
        sa.Column("schedule", sa.String(128)),
        sa.Column("request_id", sa.String(255), unique=True),
        sa.Column("estimated_usd", sa.Float(), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("next_relaunch_at", sa.DateTime()),
        sa.Column("next_instance_type", sa.String(64)),
        sa.Column("next_spot", sa.Boolean()),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Index("ix_lineages_status", "status"),
        sa.Index("ix_lineages_created_at", "created_at"),
    )
    _create(
        "attempts",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("lineage_id", sa.String(64), sa.ForeignKey("lineages.id"), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("job_name", sa.String(128), nullable=False, unique=True),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("spot", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("remote_status", sa.String(32), nullable=False),
        sa.Column("secondary_status", sa.String(64), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=False),
        sa.Column("billable_seconds", sa.Integer()),
        sa.Column("training_seconds", sa.Integer()),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("model_artifacts", sa.Text()),
        sa.Column("resumed_from_step", sa.Integer()),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("ended_at", sa.DateTime()),
        sa.UniqueConstraint("lineage_id", "number", name="uq_attempts_lineage_number"),
        sa.Index("ix_attempts_status", "status"),
    )
    _create(
        "audit",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("user", sa.String(64), nullable=False),
        sa.Column("via", sa.String(32), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.String(255), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Index("ix_audit_target", "target"),
    )
    _create(
        "outbox",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("lineage_id", sa.String(64)),
        sa.Column("channel", sa.String(64)),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("dedup_key", sa.String(255), nullable=False, unique=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_try_at", sa.DateTime(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("delivered_at", sa.DateTime()),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Index("ix_outbox_due", "delivered_at", "next_try_at"),
    )
    _create(
        "meta",
        sa.Column("key", sa.String(128), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
    )
    _create(
        "schedules",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("cron", sa.String(120), nullable=False),
        sa.Column("tz", sa.String(64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("channel", sa.String(64)),
        sa.Column("created_by", sa.String(64), nullable=False),
        sa.Column("via", sa.String(32), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("overlap", sa.String(16), nullable=False),
        sa.Column("regression_points", sa.Float(), nullable=False),
        sa.Column("deploy_if_better", sa.Boolean(), nullable=False),
        sa.Column("train_data", sa.Text()),
        sa.Column("dataset_revision", sa.String(255)),
        sa.Column("queued_for", sa.DateTime()),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    )
    _create(
        "schedule_runs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("schedule", sa.String(64), nullable=False),
        sa.Column("slot", sa.String(128), nullable=False),
        sa.Column("scheduled_for", sa.DateTime(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("lineage_id", sa.String(64)),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("schedule", "slot", name="uq_schedule_runs_slot"),
        sa.Index("ix_schedule_runs_schedule", "schedule", "id"),
    )
    _create(
        "scheduler_lease",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )
    _create(
        "endpoints",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("lineage_id", sa.String(64), nullable=False),
        sa.Column("job_name", sa.String(128), nullable=False),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("remote_status", sa.String(32), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=False),
        sa.Column("model_name", sa.String(63), nullable=False),
        sa.Column("model_data", sa.Text(), nullable=False),
        sa.Column("task", sa.String(64), nullable=False),
        sa.Column("framework", sa.String(128), nullable=False),
        sa.Column("framework_note", sa.Text(), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("instance_count", sa.Integer(), nullable=False),
        sa.Column("serverless", sa.Boolean(), nullable=False),
        sa.Column("memory_mb", sa.Integer(), nullable=False),
        sa.Column("deployed_by", sa.String(64), nullable=False),
        sa.Column("channel", sa.String(64)),
        sa.Column("invocations", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("ready_at", sa.DateTime()),
        sa.Column("ended_at", sa.DateTime()),
        sa.Column("last_invoked_at", sa.DateTime()),
        sa.Index("ix_endpoints_status", "status"),
    )


def downgrade() -> None:
    for name in ("endpoints", "scheduler_lease", "schedule_runs", "schedules", "meta", "outbox", "audit",
                 "attempts", "lineages"):
        op.drop_table(name)

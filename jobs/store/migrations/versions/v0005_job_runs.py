"""job_runs: each lineage's forecast, its live progress, and what a completed run measured (the history
later forecasts learn from).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_runs",
        sa.Column("lineage_id", sa.String(64), primary_key=True),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("model", sa.String(300), nullable=False),
        sa.Column("task", sa.String(64), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("forecast", sa.JSON(), nullable=False),
        sa.Column("predicted_samples_per_second", sa.Float(), nullable=True),
        sa.Column("measured_samples_per_second", sa.Float(), nullable=True),
        sa.Column("startup_seconds", sa.Float(), nullable=True),
        sa.Column("took_seconds", sa.Float(), nullable=True),
        sa.Column("took_usd", sa.Float(), nullable=True),
        sa.Column("progress", sa.JSON(none_as_null=True), nullable=True),
        sa.Column("progress_at", sa.DateTime(), nullable=True),
        sa.Column("progress_shown_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_job_runs_history", "job_runs", ["backend", "model", "task", "instance_type", "completed_at"])


def downgrade() -> None:
    op.drop_index("ix_job_runs_history", table_name="job_runs")
    op.drop_table("job_runs")

"""The model registry (model_packages), what each endpoint served (endpoint_revisions), the config an
endpoint serves and the update under way, and the endpoint a schedule promotes its better runs into.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "endpoint_revisions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("endpoint", sa.String(63), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("lineage_id", sa.String(64), nullable=False),
        sa.Column("job_name", sa.String(128), nullable=False),
        sa.Column("model_name", sa.String(63), nullable=False),
        sa.Column("model_data", sa.Text(), nullable=False),
        sa.Column("config_name", sa.String(63), nullable=False),
        sa.Column("instance_type", sa.String(64), nullable=False),
        sa.Column("instance_count", sa.Integer(), nullable=False),
        sa.Column("serverless", sa.Boolean(), nullable=False),
        sa.Column("memory_mb", sa.Integer(), nullable=False),
        sa.Column("canary_percent", sa.Integer(), nullable=True),
        sa.Column("alarm", sa.String(255), nullable=False),
        sa.Column("requested_by", sa.String(64), nullable=False),
        sa.Column("via", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("request_id", sa.String(255), nullable=True, unique=True),
        sa.Column("replaces", sa.Integer(), nullable=True),
        sa.Column("restores", sa.Integer(), nullable=True),
        sa.Column("remote_status", sa.String(32), nullable=False),
        sa.Column("failure_reason", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("serving_since", sa.DateTime(), nullable=True),
        sa.Column("ended_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_endpoint_revisions_endpoint", "endpoint_revisions", ["endpoint", "id"])
    op.create_table(
        "model_packages",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("lineage_id", sa.String(64), nullable=False, unique=True),
        sa.Column("group_name", sa.String(63), nullable=False),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("backend", sa.String(32), nullable=False),
        sa.Column("job_name", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("arn", sa.Text(), nullable=False),
        sa.Column("approval", sa.String(32), nullable=False),
        sa.Column("approval_by", sa.String(64), nullable=False),
        sa.Column("approval_reason", sa.Text(), nullable=False),
        sa.Column("approval_at", sa.DateTime(), nullable=True),
        sa.Column("image", sa.Text(), nullable=False),
        sa.Column("model_data", sa.Text(), nullable=False),
        sa.Column("task", sa.String(64), nullable=False),
        sa.Column("code_commit", sa.String(64), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("released_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.UniqueConstraint("group_name", "version", name="uq_model_packages_version"),
    )
    op.create_index("ix_model_packages_group", "model_packages", ["group_name", "version"])
    with op.batch_alter_table("endpoints") as batch:
        # Rows from before: "" reads as the endpoint's own name (the SDK names the first config so).
        batch.add_column(sa.Column("config_name", sa.String(63), nullable=False, server_default=""))
        batch.add_column(sa.Column("updating_revision", sa.Integer(), nullable=True))
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("endpoint", sa.String(63), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("endpoint")
    with op.batch_alter_table("endpoints") as batch:
        batch.drop_column("updating_revision")
        batch.drop_column("config_name")
    op.drop_index("ix_model_packages_group", table_name="model_packages")
    op.drop_table("model_packages")
    op.drop_index("ix_endpoint_revisions_endpoint", table_name="endpoint_revisions")
    op.drop_table("endpoint_revisions")

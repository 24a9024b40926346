"""Team recipes, routed-notification subscriptions and DM preferences, and the steps a resume redid.

These arrived beside the move to Alembic as hand-written steps (16, 18, 31); a store that ran them
already has them, so each is created only where missing.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if "steps_redone" not in {c["name"] for c in inspector.get_columns("attempts")}:
        op.add_column("attempts", sa.Column("steps_redone", sa.Integer(), nullable=True))
    if not inspector.has_table("recipes"):
        op.create_table(
            "recipes",
            sa.Column("name", sa.String(64), primary_key=True),
            sa.Column("text", sa.Text(), nullable=False),
            sa.Column("created_by", sa.String(64), nullable=False),
            sa.Column("via", sa.String(32), nullable=False),
            sa.Column("created_at", sa.DateTime(), nullable=False),
            sa.Column("updated_at", sa.DateTime(), nullable=False),
        )
    if not inspector.has_table("notify_subscriptions"):
        op.create_table(
            "notify_subscriptions",
            sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
            sa.Column("channel", sa.String(64), nullable=False),
            sa.Column("events", sa.Text(), nullable=False),
            sa.Column("filter_kind", sa.String(16), nullable=False),
            sa.Column("filter_value", sa.String(128), nullable=False),
            sa.Column("created_by", sa.String(64), nullable=False),
            sa.Column("via", sa.String(32), nullable=False),
            sa.Column("created_at", sa.DateTime(), nullable=False),
            sa.Column("updated_at", sa.DateTime(), nullable=False),
            sa.UniqueConstraint("channel", "filter_kind", "filter_value", name="uq_notify_subscriptions_filter"),
        )
        op.create_index("ix_notify_subscriptions_channel", "notify_subscriptions", ["channel"])
    if not inspector.has_table("notify_preferences"):
        op.create_table(
            "notify_preferences",
            sa.Column("user_id", sa.String(64), primary_key=True),
            sa.Column("dm", sa.Boolean(), nullable=False),
            sa.Column("updated_at", sa.DateTime(), nullable=False),
        )


def downgrade() -> None:
    op.drop_table("notify_preferences")
    op.drop_index("ix_notify_subscriptions_channel", table_name="notify_subscriptions")
    op.drop_table("notify_subscriptions")
    op.drop_table("recipes")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("steps_redone")

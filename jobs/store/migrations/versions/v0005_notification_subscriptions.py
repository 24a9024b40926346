"""Notifications: channel subscriptions and per-user DM defaults.

This was hand-written step 18 on main before Alembic took over: a store that ran it already has the tables,
so each is created only where missing.

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
    present = set(sa.inspect(op.get_bind()).get_table_names())
    if "notify_subscriptions" not in present:
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
            sa.Index("ix_notify_subscriptions_channel", "channel"),
        )
    if "notify_preferences" not in present:
        op.create_table(
            "notify_preferences",
            sa.Column("user_id", sa.String(64), primary_key=True),
            sa.Column("dm", sa.Boolean(), nullable=False),
            sa.Column("updated_at", sa.DateTime(), nullable=False),
        )


def downgrade() -> None:
    op.drop_table("notify_preferences")
    op.drop_table("notify_subscriptions")

"""Lineages keep their approved, resolved launch plan (LaunchPlan.stored()); relaunches replay it.

This was hand-written step 30 on main before Alembic took over: a store that ran it already has the column,
so it is added only where missing.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    columns = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("lineages")}
    if "launch_plan" not in columns:
        op.add_column("lineages", sa.Column("launch_plan", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("lineages") as batch:
        batch.drop_column("launch_plan")

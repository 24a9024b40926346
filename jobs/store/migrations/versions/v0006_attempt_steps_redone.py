"""Attempts record the steps redone after a resume (trained past the checkpoint by the attempt before).

This was hand-written step 31 on main before Alembic took over: a store that ran it already has the column,
so it is added only where missing.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    columns = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("attempts")}
    if "steps_redone" not in columns:
        op.add_column("attempts", sa.Column("steps_redone", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("steps_redone")

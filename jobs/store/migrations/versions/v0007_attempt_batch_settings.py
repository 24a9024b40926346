"""Each attempt records the batch settings it trained with and the forecast of its instance type: a relaunch
on another accelerator count keeps the approved global batch by changing the per-device batch or the
accumulation, and says so.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("attempts", sa.Column("per_device_train_batch_size", sa.Integer(), nullable=True))
    op.add_column("attempts", sa.Column("gradient_accumulation_steps", sa.Integer(), nullable=True))
    op.add_column("attempts", sa.Column("forecast", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("forecast")
        batch.drop_column("gradient_accumulation_steps")
        batch.drop_column("per_device_train_batch_size")

"""endings: each ended lineage's facts (why it ended), written with the move that ends it, and the progress of
the steps that follow an ending (the report, the curves, the history record, the announcement).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
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
    op.create_table(
        "endings",
        sa.Column("lineage_id", sa.String(64), sa.ForeignKey("lineages.id"), primary_key=True),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("job_name", sa.String(128), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("facts", sa.JSON(), nullable=False),
        sa.Column("steps", sa.JSON(), nullable=False),
        sa.Column("next_try_at", sa.DateTime(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("settled_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_endings_due", "endings", ["settled_at", "next_try_at"])


def downgrade() -> None:
    op.drop_index("ix_endings_due", table_name="endings")
    op.drop_table("endings")

"""chat_rate_limits and card_redraws: the Slack rate-limit buckets every bot on one store shares (tiers,
channel pace, Retry-After), and the cards waiting to be redrawn once with their newest state.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision: str | None = "0009"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "chat_rate_limits",
        sa.Column("key", sa.String(160), primary_key=True),
        sa.Column("next_free", sa.Float(), nullable=False),
        sa.Column("blocked_until", sa.Float(), nullable=False),
    )
    op.create_table(
        "card_redraws",
        sa.Column("lineage_id", sa.String(64), primary_key=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("requested_at", sa.DateTime(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("not_before", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_card_redraws_order", "card_redraws", ["priority", "requested_at"])


def downgrade() -> None:
    op.drop_index("ix_card_redraws_order", table_name="card_redraws")
    op.drop_table("card_redraws")
    op.drop_table("chat_rate_limits")

"""inbound_events: the events a chat platform delivered (Slack's event_id), so that every replica drops a
redelivery of one it already received and takes one whose first delivery never arrived.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision: str | None = "0010"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "inbound_events",
        sa.Column("event_id", sa.String(128), primary_key=True),
        sa.Column("received_at", sa.DateTime(), nullable=False),
    )
    op.create_index("ix_inbound_events_received", "inbound_events", ["received_at"])


def downgrade() -> None:
    op.drop_index("ix_inbound_events_received", table_name="inbound_events")
    op.drop_table("inbound_events")

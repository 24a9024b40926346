"""Retire the hand-written migrations' bookkeeping table: Alembic's alembic_version replaces it.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("schema_version"):
        op.drop_table("schema_version")


def downgrade() -> None:
    pass  # the first release's code recreates it on its own when it starts

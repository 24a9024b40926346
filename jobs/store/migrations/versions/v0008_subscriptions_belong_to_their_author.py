"""notify_subscriptions: a subscription belongs to its author, so the unique key is (channel, filter, author):
another person's /notify on in the same channel adds their own instead of rewriting the first one's.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels: Sequence[str] | None = None
depends_on: Sequence[str] | None = None

_KEY = ["channel", "filter_kind", "filter_value"]


def upgrade() -> None:
    # A store whose table was made from a newer declaration (main's hand-written steps) may have the key already.
    names = {c["name"] for c in sa.inspect(op.get_bind()).get_unique_constraints("notify_subscriptions")}
    if "uq_notify_subscriptions_owner" in names:
        return
    with op.batch_alter_table("notify_subscriptions") as batch:
        if "uq_notify_subscriptions_filter" in names:
            batch.drop_constraint("uq_notify_subscriptions_filter", type_="unique")
        batch.create_unique_constraint("uq_notify_subscriptions_owner", [*_KEY, "created_by"])


def downgrade() -> None:
    # The older key allows one subscription per (channel, filter): keep the first one made of each.
    op.execute(sa.text(
        "DELETE FROM notify_subscriptions WHERE id NOT IN (SELECT MIN(id) FROM notify_subscriptions "
        "GROUP BY channel, filter_kind, filter_value)"
    ))
    with op.batch_alter_table("notify_subscriptions") as batch:
        batch.drop_constraint("uq_notify_subscriptions_owner", type_="unique")
        batch.create_unique_constraint("uq_notify_subscriptions_filter", _KEY)

"""Alembic's environment: runs the revisions on the connection ``jobs.store.migrate`` hands over (already
inside its locked transaction), or on the configured store when Alembic is run by hand."""

from __future__ import annotations

from alembic import context

from jobs.store.migrate import run_migrations

run_migrations(context)

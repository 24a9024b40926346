"""The store's tables, its versioned migrations, and the engine (SQLite tuned for two processes).

Migrations are a small ordered scheme: each step has a version number and a function that takes an open
connection; ``migrate`` runs every registered step that ``schema_version`` does not record yet, in version
order, each in its own transaction together with its ``schema_version`` row. Version 1 creates the core
tables. Another module adds its tables by declaring them on ``metadata`` and registering a step::

    schedules = Table("schedules", metadata, Column("name", String(64), primary_key=True), ...)
    register_migration(2, "schedules table", lambda conn: schedules.create(conn))

Register at import of the module that owns the table, and name that module in ``TABLE_MODULES`` so
every ``migrate`` knows the whole schema. ``migrate`` applies the steps that are *not recorded*, not just
those above the highest one, so a database older than a step gets it on the next ``migrate``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    DateTime,
    Dialect,
    Engine,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    create_engine,
    event,
    make_url,
)
from sqlalchemy.pool import StaticPool


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in, aware UTC datetimes out, whatever the database keeps.

    SQLite has no time zones; storing naive UTC everywhere keeps comparisons (``next_try_at <= now``)
    correct on every backend.
    """

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("the store takes aware datetimes only (use the Clock)")
        return value.astimezone(timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=timezone.utc)


metadata = MetaData()

lineages = Table(
    "lineages",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("spec", JSON, nullable=False),  # JobSpec.model_dump(mode="json")
    Column("backend", String(32), nullable=False),
    Column("checkpoint_uri", Text, nullable=False),
    Column("status", String(32), nullable=False),
    Column("launched_by", String(64), nullable=False),
    Column("origin", String(32), nullable=False),
    Column("channel", String(64)),
    Column("message_ts", String(64)),
    Column("schedule", String(128)),
    Column("request_id", String(255), unique=True),
    Column("estimated_usd", Float, nullable=False, default=0.0),
    Column("restarts", Integer, nullable=False, default=0),
    Column("next_relaunch_at", UTCDateTime),
    Column("next_instance_type", String(64)),
    Column("next_spot", Boolean),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Index("ix_lineages_status", "status"),
    Index("ix_lineages_created_at", "created_at"),
)

attempts = Table(
    "attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("lineage_id", String(64), ForeignKey("lineages.id"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("job_name", String(128), nullable=False, unique=True),
    Column("instance_type", String(64), nullable=False),
    Column("spot", Boolean, nullable=False),
    Column("status", String(32), nullable=False),
    Column("remote_status", String(32), nullable=False, default=""),
    Column("secondary_status", String(64), nullable=False, default=""),
    Column("failure_reason", Text, nullable=False, default=""),
    Column("billable_seconds", Integer),
    Column("training_seconds", Integer),
    Column("metrics", JSON, nullable=False, default=dict),
    Column("model_artifacts", Text),
    Column("resumed_from_step", Integer),
    Column("created_at", UTCDateTime, nullable=False),
    Column("updated_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime),
    UniqueConstraint("lineage_id", "number", name="uq_attempts_lineage_number"),
    Index("ix_attempts_status", "status"),
)

audit = Table(
    "audit",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", UTCDateTime, nullable=False),
    Column("user", String(64), nullable=False),
    Column("via", String(32), nullable=False),
    Column("action", String(64), nullable=False),
    Column("target", String(255), nullable=False),
    Column("detail", JSON, nullable=False, default=dict),
    Index("ix_audit_target", "target"),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(32), nullable=False),
    Column("lineage_id", String(64)),
    Column("channel", String(64)),
    Column("payload", JSON, nullable=False),
    Column("dedup_key", String(255), nullable=False, unique=True),
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_try_at", UTCDateTime, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    # Delivered rows stay, so their dedup_key keeps refusing a second copy of the same event.
    Column("delivered_at", UTCDateTime),
    Column("last_error", Text, nullable=False, default=""),
    Index("ix_outbox_due", "delivered_at", "next_try_at"),
)

meta = Table(
    "meta",
    metadata,
    Column("key", String(128), primary_key=True),
    Column("value", Text, nullable=False),
)

# Created by migrate() itself before any step runs, so it is not a step of its own.
schema_version = Table(
    "schema_version",
    metadata,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", String(128), nullable=False),
    Column("applied_at", UTCDateTime, nullable=False),
)

CORE_TABLES = (lineages, attempts, audit, outbox, meta)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    apply: Callable[[Connection], Any]


def _create_core_tables(conn: Connection) -> None:
    # Only the tables of version 1: tables that later steps add must not appear here, or a database
    # migrated from an older version would find them already present.
    metadata.create_all(conn, tables=list(CORE_TABLES))


_MIGRATIONS: dict[int, Migration] = {1: Migration(1, "core tables", _create_core_tables)}


def register_migration(version: int, name: str, apply: Callable[[Connection], Any]) -> None:
    """Add a schema step. Registering the same version and name again is a no-op (module reloads);
    a different step under a taken version is a programming error."""
    existing = _MIGRATIONS.get(version)
    if existing is not None:
        if existing.name == name:
            return
        raise ValueError(f"schema version {version} is already taken by {existing.name!r}")
    _MIGRATIONS[version] = Migration(version, name, apply)


#: Modules that declare tables of their own on `metadata` and register their migration step on
#: import. `migrations()` imports them first, so every database gets the whole schema whichever
#: modules the running command happened to import.
TABLE_MODULES = ("jobs.schedules.store", "jobs.endpoints.store", "jobs.store.runs")


def migrations() -> list[Migration]:
    """Every step of the schema, in version order."""
    for module in TABLE_MODULES:
        importlib.import_module(module)
    return [_MIGRATIONS[v] for v in sorted(_MIGRATIONS)]


# -- engine ---------------------------------------------------------------------------------------

#: How long a SQLite writer waits for another process's write lock before giving up.
SQLITE_BUSY_TIMEOUT_MS = 30_000


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    database = parsed.database or ""
    memory = database in ("", ":memory:") or "mode=memory" in url
    if not memory and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    # One shared connection for an in-memory database (each new one would be empty).
    extra: dict[str, Any] = {"poolclass": StaticPool} if memory else {}
    engine = create_engine(url, connect_args={"check_same_thread": False}, **extra)
    _sqlite_pragmas(engine, wal=not memory)
    return engine


def _sqlite_pragmas(engine: Engine, *, wal: bool) -> None:
    """WAL lets readers and one writer work at once across processes; busy_timeout makes a writer wait
    for the lock instead of failing. pysqlite's own transaction handling is switched off so that BEGIN
    is ours (SQLAlchemy's documented recipe): BEGIN IMMEDIATE for writes."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        if wal:
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql(conn.get_execution_options().get("sqlite_begin", "BEGIN"))


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A write transaction; on SQLite it takes the write lock at BEGIN, so a read inside it can never be
    invalidated by another writer (and busy_timeout applies instead of an instant error). Every table's
    owner writes through this, so all writers queue the same way."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn = conn.execution_options(sqlite_begin="BEGIN IMMEDIATE")
        with conn.begin():
            yield conn


@contextmanager
def read_transaction(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn, conn.begin():
        yield conn

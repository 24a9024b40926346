"""Applies the store's Alembic revisions, under a lock so that bots starting together migrate once.

- PostgreSQL: a transaction-scoped advisory lock is the first thing the migrating transaction takes; a second
  bot waits on it, then finds the database at head and does nothing. PostgreSQL's DDL is transactional, so
  the revisions run in that one transaction and a failure leaves the database as it was.
- SQLite: an exclusive lock on a file beside the database, then BEGIN IMMEDIATE (an in-memory database is
  private to its process and needs neither).

A database at a revision this code does not know was migrated by a newer trainbot (a rolling deploy, or a
rollback): revisions only add, so the older bot works on it, and ``upgrade`` leaves it alone with a warning.

Alembic itself is imported only when there is something to do: a bot starting on a store already at the
newest revision (read from the version table and the revision files' names) does not pay for it.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, Table, inspect, text
from sqlalchemy.exc import OperationalError

from jobs.errors import ConfigError
from jobs.file_lock import exclusive_lock
from jobs.store.schema import UTCDateTime, make_engine, metadata, write_transaction

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
#: Tables in the store's database that other code owns: APScheduler its job table, Alembic its version row.
FOREIGN_TABLES = frozenset({"apscheduler_jobs", "alembic_version"})
#: The advisory lock's key on PostgreSQL (any fixed 64-bit number no other code on the database uses).
ADVISORY_LOCK_KEY = zlib.crc32(b"trainbot schema migration")


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    # Module names must be identifiers (mypy and imports read them): v0003_add_x.py, not 0003_add_x.py.
    config.set_main_option("file_template", "v%%(rev)s_%%(slug)s")
    return config


@lru_cache(maxsize=1)
def _scripts() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def newest_on_disk() -> str:
    """The newest revision, read from the files' names alone (v<rev>_<slug>.py, revisions numbered 0001 up:
    `python -m jobs.store.migrations` names them so, and a test holds it equal to Alembic's head)."""
    return max(path.name[1:5] for path in (MIGRATIONS_DIR / "versions").glob("v[0-9][0-9][0-9][0-9]_*.py"))


def head_revision() -> str:
    head = _scripts().get_current_head()
    assert head is not None, "jobs/store/migrations/versions has no revision"
    return head


def revisions() -> list[str]:
    """Every revision id, oldest first."""
    return [script.revision for script in reversed(list(_scripts().walk_revisions()))]


def is_known(revision: str) -> bool:
    from alembic.util.exc import CommandError

    try:
        return _scripts().get_revision(revision) is not None
    except CommandError:
        return False


def current_revision(engine: Engine) -> str | None:
    """The database's revision; None for a database no revision was applied to (new, or the first release's)."""
    with reachable(engine), engine.connect() as conn:
        return _stored_revision(conn)


def _stored_revision(conn: Connection) -> str | None:
    if not inspect(conn).has_table("alembic_version"):
        return None
    found = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return None if found is None else str(found)


def upgrade(engine: Engine, target: str = "head", *, foreign: Sequence[Table] = ()) -> list[str]:
    """Bring the database to `target` (the newest revision by default); returns the revisions applied here,
    in order: empty when it was already there, or when another process did it while this one waited.
    ``foreign``: tables other code owns (APScheduler's job table, FOREIGN_TABLES), created if missing under
    the same lock, so no thread started later creates one while others write (SQLite refuses a schema
    change in a transaction whose snapshot another writer moved on: "database is locked").
    The first contact with the store at start: an unreachable one is a ConfigError naming it."""
    with reachable(engine):
        return _upgrade(engine, target, foreign)


@contextmanager
def reachable(engine: Engine) -> Iterator[None]:
    """Turns "cannot connect" into one sentence naming the store (its password hidden)."""
    try:
        yield
    except OperationalError as exc:
        where = engine.url.render_as_string(hide_password=True)
        reason = str(exc.orig or exc).strip().splitlines()[0]
        raise ConfigError(f"cannot reach the store at {where} ({reason}); check TRAINBOT_DATABASE_URL.") from exc


def _upgrade(engine: Engine, target: str, foreign: Sequence[Table]) -> list[str]:
    with migration_lock(engine) as conn:
        applied = _apply_revisions(conn, target)
        for table in foreign:
            if table.name not in FOREIGN_TABLES:
                raise ValueError(f"{table.name} is not a table other code owns; declare it in jobs/store/schema.py")
            table.create(conn, checkfirst=True)
    if applied:
        log.info("store schema upgraded: %s", " -> ".join(applied))
    return applied


def _apply_revisions(conn: Connection, target: str) -> list[str]:
    current = _stored_revision(conn)
    if target == "head" and current == newest_on_disk():
        return []  # the usual start: nothing to do, and Alembic not even imported
    from alembic import command

    if current is not None and not is_known(current):
        log.warning("the store is at schema revision %s, newer than this trainbot knows (%s); "
                    "leaving it as it is", current, head_revision())
        return []
    applied: list[str] = []
    config = alembic_config()
    config.attributes.update(connection=conn, applied=applied)
    command.upgrade(config, target)
    return applied


def schema_drift(engine: Engine) -> list[Any]:
    """What differs between the tables the code declares and the database (Alembic's autogenerate diff);
    empty when a database migrated to head is exactly what the code expects."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_object": _owned, "compare_type": True})
        return list(compare_metadata(context, metadata))


@contextmanager
def migration_lock(engine: Engine) -> Iterator[Connection]:
    """A connection in a transaction that no other migrating process shares until it ends."""
    dialect = engine.dialect.name
    if dialect == "postgresql":
        with engine.connect() as conn, conn.begin():
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
            yield conn
        return
    if dialect == "sqlite":
        with _sqlite_file_lock(engine), _foreign_keys_off(engine) as conn, conn.begin():
            yield conn
        return
    with write_transaction(engine) as conn:  # any other database: its own transaction, no lock
        yield conn


@contextmanager
def _sqlite_file_lock(engine: Engine) -> Iterator[None]:
    database = engine.url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        yield  # private to this process
        return
    with exclusive_lock(Path(database).expanduser().with_name(Path(database).name + ".migrate-lock")):
        yield


@contextmanager
def _foreign_keys_off(engine: Engine) -> Iterator[Connection]:
    """Alembic's batch mode rebuilds a SQLite table by copy and rename, which enforced foreign keys would
    refuse; the pragma only takes effect outside a transaction, so it is set on the raw connection first."""
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        raw.execute("PRAGMA foreign_keys = OFF")
        conn = conn.execution_options(sqlite_begin="BEGIN IMMEDIATE")
        try:
            yield conn
        finally:
            raw.execute("PRAGMA foreign_keys = ON")


def _owned(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    return not (type_ == "table" and name in FOREIGN_TABLES)


def _render_item(type_: str, obj: Any, autogen_context: Any) -> str | bool:
    """Generated revisions spell the store's aware-UTC column as the plain DateTime it is in the database,
    so a revision never imports the code of the day (which changes after it)."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime()"
    return False


# -- Alembic's env.py ------------------------------------------------------------------------------


def run_migrations(context: Any) -> None:
    """The body of env.py: the revisions on the connection `upgrade` passed in, or, when Alembic's own
    command line runs them, on the configured store under the same lock."""
    config = context.config
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(context, connection, config.attributes.get("applied"))
        return
    from jobs.settings import Settings

    engine = make_engine(Settings().database_url)
    try:
        with migration_lock(engine) as conn:
            _run(context, conn, None)
    finally:
        engine.dispose()


def _run(context: Any, connection: Connection, applied: list[str] | None) -> None:
    def record(*, step: Any, **_: Any) -> None:
        if applied is not None and step.is_upgrade:
            applied.append(str(step.up_revision_id))

    context.configure(
        connection=connection,
        target_metadata=metadata,
        include_object=_owned,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
        render_item=_render_item,
        on_version_apply=record,
    )
    with context.begin_transaction():
        context.run_migrations()

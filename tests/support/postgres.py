"""A real PostgreSQL server for the tests: started once per session from the machine's PostgreSQL binaries,
in a temporary data folder, on a free loopback port; each test that asks gets a database of its own.

PostgreSQL refuses to run as root, so under root the server runs as the ``postgres`` user (the Debian
package creates it). Import the fixtures into a conftest or test module::

    from tests.support.postgres import postgres_server, postgres_url  # noqa: F401

- ``postgres_server`` (session): the running server (``PostgresServer``).
- ``postgres_url`` (function): ``postgresql+psycopg://...`` of an empty database (no tables at all).
- ``postgres_store_url`` (function): a database migrated to head, with no rows in any table.

Both hand every test the same database of the session, reset before the test (connections left over from
an earlier test are closed first): creating and migrating a database per test would cost about a second.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.moto_server import free_port

#: Where Debian's postgresql-15 puts the server binaries; newer majors and PATH are tried after it.
BIN_DIRS = ("/usr/lib/postgresql/15/bin", *sorted(map(str, Path("/usr/lib/postgresql").glob("*/bin")), reverse=True))
INSTALL_HINT = (
    "PostgreSQL's server binaries (initdb, postgres) are not installed on this machine: install them with "
    "`apt-get install -y postgresql-15` (Debian/Ubuntu) and run the tests again."
)
SERVER_USER = "postgres"  # the unprivileged user the server runs as when the tests run as root
SUPERUSER = "trainbot"  # the database role the tests connect as (trust authentication on loopback)


@dataclass(frozen=True)
class PostgresServer:
    host: str
    port: int
    data_dir: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def admin(self, sql: str) -> None:
        """Run one statement outside a transaction (CREATE/DROP DATABASE) on the maintenance database."""
        import psycopg

        with psycopg.connect(host=self.host, port=self.port, user=SUPERUSER, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]

    def create_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.admin(f'CREATE DATABASE "{name}"')
        return name

    def emptied(self, database: str) -> str:
        """`database` with nothing in it (its public schema dropped and made again); returns its URL."""
        self._execute(database, "DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        return self.url(database)

    def without_rows(self, database: str) -> str:
        """`database` with every table but Alembic's emptied; returns its URL."""
        import psycopg

        with psycopg.connect(host=self.host, port=self.port, user=SUPERUSER, dbname=database) as conn:
            tables = [row[0] for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'")]
        quoted = ", ".join(f'"{table}"' for table in tables)
        self._execute(database, f"TRUNCATE {quoted} RESTART IDENTITY CASCADE")
        return self.url(database)

    def _execute(self, database: str, sql: str) -> None:
        import psycopg

        self.admin("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                   f"WHERE datname = '{database}' AND pid <> pg_backend_pid()")
        with psycopg.connect(host=self.host, port=self.port, user=SUPERUSER, dbname=database,
                             autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]


def _bin_dir() -> Path:
    for candidate in BIN_DIRS:
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "postgres").exists():
            return Path(candidate)
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(found).parent
    pytest.fail(INSTALL_HINT, pytrace=False)


def _run_as() -> dict[str, Any]:
    """subprocess options that drop root to the server user (PostgreSQL will not start as root)."""
    if os.geteuid() != 0:
        return {}
    try:
        user = pwd.getpwnam(SERVER_USER)
    except KeyError:
        pytest.fail(
            f"The tests run as root and PostgreSQL refuses root, but there is no {SERVER_USER!r} user to run "
            f"it as: `apt-get install -y postgresql-15` creates one (or `useradd --system {SERVER_USER}`).",
            pytrace=False,
        )
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": [], "env": {
        "PATH": "/usr/bin:/bin", "HOME": user.pw_dir, "LC_ALL": "C.UTF-8"}}


def _die_with_parent() -> None:
    """The server stops if the test process dies without tearing down (no stray servers)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _start(bin_dir: Path) -> tuple[PostgresServer, subprocess.Popen[bytes]]:
    # Under /tmp itself, not pytest's root-only temp folder, so the server user can reach it.
    data_dir = Path(tempfile.mkdtemp(prefix="trainbot-pg-"))
    run_as = _run_as()
    if run_as:
        os.chown(data_dir, run_as["user"], run_as["group"])
    initdb = subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(data_dir / "data"), "-U", SUPERUSER, "--auth=trust",
         "-E", "UTF8", "--no-sync"],
        capture_output=True, text=True, **run_as,
    )
    if initdb.returncode != 0:
        pytest.fail(f"initdb failed: {initdb.stderr.strip() or initdb.stdout.strip()}", pytrace=False)
    port = free_port()
    # fsync and friends off: a test database need not survive a power cut, and the suite runs faster. The
    # write-ahead log is recycled at 128 MB, not PostgreSQL's 1 GB: each test's CREATE DATABASE logs the whole
    # template, and a CI disk may hold only a few GB for everything.
    options = ["-c", "listen_addresses=127.0.0.1", "-c", f"port={port}", "-c", "unix_socket_directories=",
               "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
               "-c", "max_connections=200", "-c", "max_wal_size=128MB", "-c", "min_wal_size=32MB"]
    log = (data_dir / "server.log").open("wb")
    process = subprocess.Popen([str(bin_dir / "postgres"), "-D", str(data_dir / "data"), *options],
                               stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent, **run_as)
    server = PostgresServer("127.0.0.1", port, data_dir)
    _wait_ready(server, process, data_dir / "server.log")
    return server, process


def _wait_ready(server: PostgresServer, process: subprocess.Popen[bytes], log: Path) -> None:
    import psycopg

    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            pytest.fail(f"PostgreSQL exited at start: {log.read_text(errors='replace')[-2000:]}", pytrace=False)
        try:
            psycopg.connect(host=server.host, port=server.port, user=SUPERUSER, dbname="postgres",
                            connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                pytest.fail(f"PostgreSQL did not accept connections within 60 s: "
                            f"{log.read_text(errors='replace')[-2000:]}", pytrace=False)
            time.sleep(0.1)


EMPTY_DATABASE = "trainbot_empty"
STORE_DATABASE = "trainbot_store"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server, process = _start(_bin_dir())
    try:
        server.admin(f'CREATE DATABASE "{EMPTY_DATABASE}"')
        server.admin(f'CREATE DATABASE "{STORE_DATABASE}"')
        _migrate(server.url(STORE_DATABASE))
        yield server
    finally:
        process.send_signal(signal.SIGINT)  # PostgreSQL's "fast" shutdown
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(server.data_dir, ignore_errors=True)


def _migrate(url: str) -> None:
    from jobs.clock import SystemClock
    from jobs.store.store import Store

    store = Store(url, clock=SystemClock())
    store.migrate()
    store.dispose()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    return postgres_server.emptied(EMPTY_DATABASE)


@pytest.fixture
def postgres_store_url(postgres_server: PostgresServer) -> str:
    return postgres_server.without_rows(STORE_DATABASE)

"""Shared fixtures of the core's tests: a fake clock and a migrated store, once on a fresh SQLite file and once
on a fresh database of a real PostgreSQL server (tests/conftest.py's `database_url`)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import pytest

from jobs.store.store import Store
from tests.support.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc))


@pytest.fixture
def store(database_url: str, clock: FakeClock) -> Iterator[Store]:
    s = Store(database_url, clock=clock)
    s.migrate()
    yield s
    s.dispose()  # PostgreSQL drops the test's database only once nothing is connected

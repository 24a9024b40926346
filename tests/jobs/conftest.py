"""Shared fixtures of the core's tests: a fake clock and a migrated store on a fresh SQLite file."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from jobs.clock import FakeClock
from jobs.store.store import Store


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc))


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Store:
    s = Store(f"sqlite:///{tmp_path / 'trainbot.db'}", clock=clock)
    s.migrate()
    return s

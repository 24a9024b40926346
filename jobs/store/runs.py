"""The job_runs table (Alembic revision 0005): per lineage, its forecast, its latest live progress and, once
it completed, what it measured. Completed rows are the history later forecasts learn from.

Every /train plan reads that history, on the command's ack path: the process remembers what it read per
database (``jobs.recent.RecentReads``) for HISTORY_MEMORY_SECONDS, and forgets it whenever a completion is
recorded through it, so a completed run changes the next plan in the same process at once and in another replica
within that time.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, case, insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from jobs.clock import Clock
from jobs.planning.forecast import HISTORY_RUNS, Forecast, PastRun
from jobs.planning.spec import JobSpec
from jobs.recent import RecentReads
from jobs.store.schema import job_runs, read_transaction, write_transaction
from jobs.store.store import Store

HISTORY_MEMORY_SECONDS = 60.0
HistoryKey = tuple[str, str, str, str, int]  # backend, model, task, instance type, how many


HistoryMemory = RecentReads[HistoryKey, list[PastRun]]
_MEMORIES: weakref.WeakKeyDictionary[Engine, HistoryMemory] = weakref.WeakKeyDictionary()
_MEMORIES_LOCK = threading.Lock()


def _memory_of(engine: Engine) -> HistoryMemory:
    """What this process read of one database's history, for a while; forgotten on every completion."""
    with _MEMORIES_LOCK:
        memory = _MEMORIES.get(engine)
        if memory is None:
            memory = _MEMORIES[engine] = RecentReads(HISTORY_MEMORY_SECONDS)
        return memory


def history_task(spec: JobSpec) -> str:
    """The task part of the history key; a team's own script (no task) is known by its entry point."""
    return spec.task or f"own:{spec.entry}"[:64]


class RunHistory:
    """Reads and writes job_runs on the store's database."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._engine = store.engine
        self._clock = clock

    def record_launch(self, lineage_id: str, backend: str, spec: JobSpec, forecast: Forecast) -> None:
        """The forecast a lineage was launched with (once; a second call keeps the first)."""
        values = {
            "lineage_id": lineage_id,
            "backend": backend,
            "model": spec.model_label,
            "task": history_task(spec),
            "instance_type": spec.instance.name,
            "forecast": forecast.to_json(),
            "predicted_samples_per_second": forecast.physics_samples_per_second,
            "created_at": self._clock.now(),
        }
        try:
            with write_transaction(self._engine) as conn:
                conn.execute(insert(job_runs).values(**values))
        except IntegrityError:
            return

    def forecast_of(self, lineage_id: str) -> Forecast | None:
        row = self._row(lineage_id)
        return None if row is None else Forecast.from_json(dict(row.forecast or {}))

    def took_of(self, lineage_id: str) -> tuple[float | None, float | None]:
        """(seconds, usd) the completed lineage took; Nones before it completed."""
        row = self._row(lineage_id)
        return (None, None) if row is None else (row.took_seconds, row.took_usd)

    def record_completed(
        self, lineage_id: str, *, samples_per_second: float | None, startup_seconds: float | None,
        took_seconds: float | None, took_usd: float | None,
    ) -> bool:
        """What the completed lineage measured; False when it has no row (launched before forecasts)."""
        stmt = (
            update(job_runs)
            .where(job_runs.c.lineage_id == lineage_id)
            .values(
                measured_samples_per_second=samples_per_second, startup_seconds=startup_seconds,
                took_seconds=took_seconds, took_usd=took_usd, completed_at=self._clock.now(), progress=None,
            )
        )
        with write_transaction(self._engine) as conn:
            recorded = conn.execute(stmt).rowcount == 1
        _memory_of(self._engine).forget()
        return recorded

    def past_runs(self, backend: str, spec: JobSpec, *, limit: int = HISTORY_RUNS) -> list[PastRun]:
        """The newest completed runs of the same backend, model, task and instance type that measured a
        throughput, newest first (as this process read them in the last minute; see the module)."""
        key = (backend, spec.model_label, history_task(spec), spec.instance.name, limit)
        return list(_memory_of(self._engine).get(key, lambda: self._read_past_runs(backend, spec, limit)))

    def _read_past_runs(self, backend: str, spec: JobSpec, limit: int) -> list[PastRun]:
        c = job_runs.c
        query = (
            select(c.predicted_samples_per_second, c.measured_samples_per_second, c.startup_seconds)
            .where(
                c.backend == backend, c.model == spec.model_label, c.task == history_task(spec),
                c.instance_type == spec.instance.name, c.completed_at.is_not(None),
                c.measured_samples_per_second > 0, c.predicted_samples_per_second > 0,
                c.startup_seconds.is_not(None),
            )
            .order_by(c.completed_at.desc(), c.lineage_id.desc())
            .limit(limit)
        )
        with read_transaction(self._engine) as conn:
            return [PastRun(float(p), float(m), float(s)) for p, m, s in conn.execute(query)]

    # -- live progress ------------------------------------------------------------------------------

    def set_progress(self, progress: Mapping[str, dict[str, Any]]) -> None:
        """The latest progress of each lineage, in one transaction (a whole update's worth at once)."""
        now = self._clock.now()
        with write_transaction(self._engine) as conn:
            for lineage_id, data in progress.items():
                stmt = update(job_runs).where(job_runs.c.lineage_id == lineage_id)
                conn.execute(stmt.values(progress=data, progress_at=now))

    def progress_of(self, lineage_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        ids = list(lineage_ids)
        if not ids:
            return {}
        query = select(job_runs.c.lineage_id, job_runs.c.progress).where(
            job_runs.c.lineage_id.in_(ids), job_runs.c.progress.is_not(None)
        )
        with read_transaction(self._engine) as conn:
            return {lid: dict(data) for lid, data in conn.execute(query) if data}

    def unshown_progress(self, *, limit: int = 20) -> list[tuple[str, datetime]]:
        """(lineage, progress_at) of progress newer than its card shows, the card showing the oldest first
        (never shown before all): with more cards than redraws, each card's turn comes round in order."""
        c = job_runs.c
        query = (
            select(c.lineage_id, c.progress_at)
            .where(c.progress_at.is_not(None), or_(c.progress_shown_at.is_(None), c.progress_shown_at < c.progress_at))
            .order_by(case((c.progress_shown_at.is_(None), 0), else_=1), c.progress_shown_at, c.progress_at,
                      c.lineage_id)
            .limit(limit)
        )
        with read_transaction(self._engine) as conn:
            return [(lid, at) for lid, at in conn.execute(query)]

    def mark_progress_shown(self, lineage_id: str, progress_at: datetime) -> None:
        stmt = update(job_runs).where(job_runs.c.lineage_id == lineage_id).values(progress_shown_at=progress_at)
        with write_transaction(self._engine) as conn:
            conn.execute(stmt)

    def mark_current_progress_shown(self, lineage_id: str) -> None:
        """The card is about to be drawn with the progress stored now (call it before reading that)."""
        stmt = update(job_runs).where(job_runs.c.lineage_id == lineage_id, job_runs.c.progress_at.is_not(None))
        with write_transaction(self._engine) as conn:
            conn.execute(stmt.values(progress_shown_at=job_runs.c.progress_at))

    def forecasts_of(self, lineage_ids: Iterable[str]) -> dict[str, Forecast]:
        ids = list(lineage_ids)
        if not ids:
            return {}
        query = select(job_runs.c.lineage_id, job_runs.c.forecast).where(job_runs.c.lineage_id.in_(ids))
        with read_transaction(self._engine) as conn:
            return {lid: Forecast.from_json(dict(data or {})) for lid, data in conn.execute(query)}

    def _row(self, lineage_id: str) -> Any:
        with read_transaction(self._engine) as conn:
            return conn.execute(select(job_runs).where(job_runs.c.lineage_id == lineage_id)).first()

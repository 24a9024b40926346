"""What the console watches on its own, besides the watcher: live progress of local jobs and the
simulated spot reclaims, through the backend's SimulatedSpot port (jobs/backend.py).

Progress: every tick, the newest `[progress]` line of each running local job (step, loss, ETA) is shown
under its card when it moved on. Reclaims: a spot job launched from the console loses its capacity once,
as a real spot job may (`SimulatedSpot.take_capacity`), as soon as it has saved its first periodic
checkpoint; `/capacity JOB` asks for another. The watcher then sees the interruption and relaunches the
lineage from its checkpoints, exactly as it would on SageMaker. A backend that simulates nothing (a
SageMaker console) shows no progress lines and takes no capacity.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from bot import console_render as render
from jobs.backend import SimulatedSpot
from jobs.errors import TrainbotError
from jobs.lineage import Lineage
from jobs.records import Actor
from jobs.store.store import Store

log = logging.getLogger(__name__)

TICK_SECONDS = 0.4
#: At most one progress line a job this often (the last step always shows).
PROGRESS_EVERY_SECONDS = 2.0
#: A reclaim that found no checkpoint yet fires anyway past this share of the steps (or the job would end first).
RECLAIM_FALLBACK_SHARE = 0.5


@dataclass
class _Seen:
    step: int = -1
    shown_at: float = 0.0


@dataclass
class JobTicker:
    """Progress lines and armed reclaims, one pass per `tick()`; `run()` ticks until the event is set."""

    store: Store
    spot: SimulatedSpot | None  # the backend's simulation; None: the backend simulates nothing
    say: Callable[..., None]
    session: Callable[[], list[Lineage]]  # the lineages this console launched, oldest first
    auto_reclaim: bool = True
    _seen: dict[str, _Seen] = field(default_factory=dict)
    _armed: set[str] = field(default_factory=set)  # job names waiting for their first checkpoint
    _auto_done: set[str] = field(default_factory=set)  # lineages whose one automatic reclaim is armed
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # a bad tick is logged; the console keeps going
                log.exception("console tick failed")
            stop.wait(TICK_SECONDS)

    def tick(self) -> None:
        if self.auto_reclaim:
            self._arm_new_spot_jobs()
        for lineage in self.store.list_lineages(active_only=True, limit=100):
            attempt = lineage.latest_attempt
            if attempt is None or attempt.status.is_terminal():
                continue
            progress = self._progress(attempt.job_name)
            if progress is not None:
                self._show(lineage.id, attempt.job_name, progress)
            self._maybe_reclaim(attempt.job_name, progress)

    def arm(self, job_name: str) -> None:
        """Take the job's spot capacity once it has a checkpoint (at once if it has one)."""
        with self._lock:
            self._armed.add(job_name)

    def armed(self) -> set[str]:
        with self._lock:
            return set(self._armed)

    # -- progress ------------------------------------------------------------------------------

    def _progress(self, job_name: str) -> dict[str, float | int] | None:
        if self.spot is None:
            return None
        try:
            return self.spot.job_progress(job_name)
        except TrainbotError:  # the job folder is not there yet (launching)
            return None

    def _show(self, lineage_id: str, job_name: str, progress: dict[str, float | int]) -> None:
        seen = self._seen.setdefault(job_name, _Seen())
        step = int(progress.get("step", -1))
        now = time.monotonic()
        last = step >= int(progress.get("max_steps") or step + 1)
        if step <= seen.step or (now - seen.shown_at < PROGRESS_EVERY_SECONDS and not last):
            return
        seen.step, seen.shown_at = step, now
        self.say(*render.thread_reply(lineage_id, [f"{job_name} {render.progress_line(progress)}"]))

    # -- reclaims ------------------------------------------------------------------------------

    def _arm_new_spot_jobs(self) -> None:
        for lineage in self.session():
            first = lineage.attempts[0] if lineage.attempts else None
            if lineage.id in self._auto_done or first is None or not lineage.spec.spot:
                continue
            self._auto_done.add(lineage.id)
            if not first.status.is_terminal():
                self.arm(first.job_name)
                self.say(f"console: spot capacity will be taken from {first.job_name} once it has saved a "
                         "checkpoint (a simulated reclaim; the watcher recovers it)")

    def _maybe_reclaim(self, job_name: str, progress: dict[str, float | int] | None) -> None:
        if self.spot is None or job_name not in self.armed() or not self._ready(self.spot, job_name, progress):
            return
        with self._lock:
            self._armed.discard(job_name)
        try:
            self.spot.take_capacity(job_name)
        except TrainbotError as exc:
            self.say(f"console: could not take capacity from {job_name}: {exc.user_message()}")
            return
        step = f" at step {progress['step']}" if progress else ""
        self.say(f"⚡ console: spot capacity taken from {job_name}{step} (simulated reclaim: its processes are "
                 "killed without a signal, as SageMaker's image never passes SIGTERM on to the script)")

    def _ready(self, spot: SimulatedSpot, job_name: str, progress: dict[str, float | int] | None) -> bool:
        try:
            if spot.saved_checkpoint(job_name):
                return True
        except TrainbotError:
            return False
        if not progress:
            return False
        total = float(progress.get("max_steps") or 0)
        return bool(total) and float(progress.get("step", 0)) >= RECLAIM_FALLBACK_SHARE * total


def session_lineages(store: Store, actor: Actor, since: datetime) -> list[Lineage]:
    """The lineages ``actor`` launched since ``since``, oldest first."""
    found = [
        lineage for lineage in store.list_lineages(limit=200)
        if lineage.launched_by == actor.user_id and lineage.created_at >= since
    ]
    return sorted(found, key=lambda lineage: lineage.created_at)

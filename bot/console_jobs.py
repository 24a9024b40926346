"""What the console watches on its own, besides the watcher: live progress of local jobs and the
simulated spot reclaims.

Progress: every tick, the newest `[progress]` line of each running local job (step, loss, ETA) is shown
under its card when it moved on. Reclaims: a spot job launched from the console loses its capacity once,
as a real spot job may (`LocalBackend.take_capacity`), as soon as it has saved its first periodic
checkpoint; `/capacity JOB` asks for another. The watcher then sees the interruption and relaunches the
lineage from its checkpoints, exactly as it would on SageMaker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bot import console_render as render
from jobs.errors import TrainbotError
from jobs.records import Actor
from jobs.store.store import Lineage, Store

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
    backend: Any  # LocalBackend (job_progress, take_capacity, console_links); other backends show nothing
    say: Callable[..., None]
    session: Callable[[], list[Lineage]]  # the lineages this console launched, oldest first
    auto_reclaim: bool = True
    _seen: dict[str, _Seen] = field(default_factory=dict)
    _armed: set[str] = field(default_factory=set)  # job names waiting for their first checkpoint
    _auto_done: set[str] = field(default_factory=set)  # lineages whose one automatic reclaim is armed
    _resume_told: set[str] = field(default_factory=set)  # job names whose resume was said in the thread
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
                self._tell_resume(lineage.id, attempt.job_name)
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
        progress = getattr(self.backend, "job_progress", None)
        if progress is None:
            return None
        try:
            result: dict[str, float | int] | None = progress(job_name)
        except TrainbotError:  # the job folder is not there yet (launching)
            return None
        return result

    def _tell_resume(self, lineage_id: str, job_name: str) -> None:
        """Once per job: the checkpoint it resumed from and how many steps the reclaim cost."""
        if job_name in self._resume_told or not hasattr(self.backend, "steps_redone"):
            return
        try:
            step, redone = self.backend.resumed_from_step(job_name), self.backend.steps_redone(job_name)
        except TrainbotError:
            return
        self._resume_told.add(job_name)  # training has logged: any resume line is in the log already
        if step is None:
            return
        lost = f"{redone} steps trained after it were lost with the reclaim and are redone" if redone is not None \
            else "the steps after it are redone"
        self.say(*render.thread_reply(lineage_id, [f"{job_name} resumed from the checkpoint at step {step}: {lost}"]))

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
        if job_name not in self.armed() or not self._ready(job_name, progress):
            return
        with self._lock:
            self._armed.discard(job_name)
        try:
            self.backend.take_capacity(job_name)
        except TrainbotError as exc:
            self.say(f"console: could not take capacity from {job_name}: {exc.user_message()}")
            return
        step = f" at step {progress['step']}" if progress else ""
        self.say(f"⚡ console: spot capacity taken from {job_name}{step} (simulated reclaim: its processes are "
                 "killed without a signal, as SageMaker's image never passes SIGTERM on to the script)")

    def _ready(self, job_name: str, progress: dict[str, float | int] | None) -> bool:
        if _has_checkpoint(self.backend, job_name):
            return True
        if not progress:
            return False
        total = float(progress.get("max_steps") or 0)
        return bool(total) and float(progress.get("step", 0)) >= RECLAIM_FALLBACK_SHARE * total


def _has_checkpoint(backend: Any, job_name: str) -> bool:
    try:
        where = backend.console_links(job_name).get("checkpoints", "")
    except TrainbotError:
        return False
    folder = Path(where)
    # trainer_state.json is written last into a checkpoint folder: its presence means a whole one.
    return bool(where) and folder.is_dir() and any(folder.glob("checkpoint-*/trainer_state.json"))


def session_lineages(store: Store, actor: Actor, since: datetime) -> list[Lineage]:
    """The lineages ``actor`` launched since ``since``, oldest first."""
    found = [
        lineage for lineage in store.list_lineages(limit=200)
        if lineage.launched_by == actor.user_id and lineage.created_at >= since
    ]
    return sorted(found, key=lambda lineage: lineage.created_at)

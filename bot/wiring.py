"""Builds the object graph once from the settings: store, backend, services, watcher, scheduler.

Everything below is constructed here and passed down; nothing else reads the environment.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from bot.scheduler import SchedulerRunner, build_schedule_service
from jobs.backend import TrainingBackend
from jobs.clock import Clock, SystemClock
from jobs.errors import ConfigError
from jobs.lifecycle.progress import ProgressTracker
from jobs.lifecycle.service import JobService
from jobs.lifecycle.state import LineageStatus
from jobs.lifecycle.watcher import Watcher
from jobs.planning.reader import CommandReader
from jobs.recipes.service import RecipeBook
from jobs.settings import Settings
from jobs.store.store import Store

if TYPE_CHECKING:
    from handlers.chat import Chat
    from handlers.context import Services
    from jobs.endpoints.port import EndpointBackend
    from jobs.endpoints.service import EndpointService

log = logging.getLogger(__name__)

#: Launches, deploys and uploads run here, never on Bolt's listener threads (the 3 s ack path).
BACKGROUND_WORKERS = 4


@dataclass
class Runtime:
    settings: Settings
    clock: Clock
    store: Store
    backend: TrainingBackend
    jobs: JobService
    watcher: Watcher
    schedules: Any = None
    endpoints: Any = None
    recipes: Any = None
    events: Any = None  # jobs.backends.sagemaker_events.EventQueue when TRAINBOT_EVENTS_QUEUE is set
    progress: ProgressTracker | None = None  # live progress on the cards, at most every TRAINBOT_PROGRESS_SECONDS
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(BACKGROUND_WORKERS, thread_name_prefix="trainbot-work")
    )
    stop_event: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _scheduler: Any = None
    _services: Services | None = None

    def services(self) -> Services:
        """One Services per process: its launch guard must see every click on every surface."""
        from handlers.context import Services

        if self._services is None:
            self._services = Services(
                jobs=self.jobs,
                store=self.store,
                settings=self.settings,
                clock=self.clock,
                schedules=self.schedules,
                endpoints=self.endpoints,
                run_later=self.run_later,
                backend=self.backend,
                recipes=self.recipes,
            )
        return self._services

    def run_later(self, work: Callable[[], None]) -> None:
        def guarded() -> None:
            try:
                work()
            except Exception:  # a background failure is logged; the handler already replied
                log.exception("background work failed")

        self.executor.submit(guarded)

    def require_endpoints(self) -> Any:
        if self.endpoints is None:
            raise ConfigError("endpoints are not available on this backend.")
        return self.endpoints

    def require_schedules(self) -> Any:
        if self.schedules is None:
            raise ConfigError("schedules are not available in this installation.")
        return self.schedules

    def start_background(self, chat: Chat) -> None:
        """The watcher loop, outbox delivery to `chat`, and the scheduler, in this process."""
        from handlers.notify import deliver_due

        services = self.services()
        self._spawn("watcher", self.watch_until_stopped)
        self._spawn("outbox", lambda: self._deliver_loop(lambda: deliver_due(services, chat)))
        self._start_scheduler()

    def run_watcher_until_signalled(self) -> None:
        self._install_signal_handlers()
        self.watch_until_stopped()

    def watch_cycle(self) -> str:
        """One cycle of everything that is followed: training jobs, their live progress (when due), then
        endpoints and their idle note.
        Returns what `trainbot watch --once` prints."""
        lines = [self.watcher.poll_once().summary()]
        if self.progress is not None:
            lines.append(self.progress.poll_once().summary())
        if self.endpoints is not None:
            followed = self.endpoints.poll_once()
            idle = self.endpoints.idle_report()
            lines.append(f"endpoints: {followed.summary()}; {len(idle)} idle")
        return "\n".join(lines)

    def watch_until_stopped(self) -> None:
        """A cycle every TRAINBOT_POLL_SECONDS until `stop_event` is set; a failed cycle is logged, not fatal.
        With an events queue, changes are acted on as they arrive and the cycle only reconciles."""
        if self.events is not None:
            self._watch_events_until_stopped()
            return
        while not self.stop_event.is_set():
            self._logged(self.watch_cycle)
            self.stop_event.wait(self.settings.trainbot_poll_seconds)

    def handle_events(self, wait_seconds: float) -> int:
        """Receive what the events queue holds (waiting up to `wait_seconds` for it), look at each job it
        names now, and delete each message once its change is recorded; a job whose check failed keeps its
        message, which comes back after the queue's visibility timeout. Returns the messages deleted."""
        notices = self.events.receive(wait_seconds)
        done = [n.receipt for n in notices if n.kind == "other"]
        by_job: dict[str, list[str]] = {}
        for notice in notices:
            if notice.kind == "training":
                by_job.setdefault(notice.name, []).append(notice.receipt)
        for job_name, receipts in by_job.items():
            result = self.watcher.check_now([job_name])
            if result.errors:
                log.warning("event for %s not handled yet: %s", job_name, "; ".join(result.errors))
            else:
                done += receipts
        endpoint_receipts = [n.receipt for n in notices if n.kind == "endpoint"]
        if endpoint_receipts:
            if self.endpoints is not None:
                self.endpoints.poll_once()  # follows every endpoint still creating, one describe each
            done += endpoint_receipts
        if done:
            self.events.delete(done)
        return len(done)

    def _watch_events_until_stopped(self) -> None:
        next_cycle = 0.0  # time.monotonic() of the next full cycle; the first runs at once
        while not self.stop_event.is_set():
            if time.monotonic() >= next_cycle:
                self._logged(self.watch_cycle)
                next_cycle = time.monotonic() + self.settings.watch_seconds
            wait = max(0.0, min(next_cycle - time.monotonic(), self._relaunch_due(), self._progress_due()))
            if not self._logged(partial(self.handle_events, wait)):
                self.stop_event.wait(1.0)  # the queue is unreachable: do not spin

    def _progress_due(self) -> float:
        """Update live progress (it keeps its own TRAINBOT_PROGRESS_SECONDS pace, which no event marks) and
        return the longest wait that keeps that pace."""
        if self.progress is None:
            return float("inf")
        self._logged(self.progress.poll_once)
        return self.settings.trainbot_progress_seconds

    def _relaunch_due(self) -> float:
        """Start the relaunches whose back-off ran out now, not at the next (long) reconciliation cycle;
        returns the seconds until the next one falls due."""
        now, due, waits = self.clock.now(), [], []
        try:
            for lineage in self.store.list_lineages(limit=100_000, backend=self.backend.name,
                                                    status=LineageStatus.RELAUNCHING):
                if lineage.latest_attempt is None:
                    continue
                if lineage.next_relaunch_at is None or lineage.next_relaunch_at <= now:
                    due.append(lineage.latest_attempt.job_name)
                else:
                    waits.append((lineage.next_relaunch_at - now).total_seconds())
            if due:
                self.watcher.check_now(due)
        except Exception:
            log.exception("relaunching failed; the next cycle retries")
        return min(waits, default=float("inf"))

    def _logged(self, step: Callable[[], object]) -> bool:
        try:
            log.debug("%s", step())
            return True
        except Exception:
            log.exception("watching failed; retrying")
            return False

    def shutdown(self) -> None:
        self.stop_event.set()
        if self._scheduler is not None:
            self._scheduler.shutdown()
        for thread in self._threads:
            thread.join(timeout=10)
        self.executor.shutdown(wait=True, cancel_futures=False)

    def _spawn(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=f"trainbot-{name}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _deliver_loop(self, deliver: Callable[[], object]) -> None:
        while not self.stop_event.is_set():
            try:
                deliver()
            except Exception:
                log.exception("outbox delivery failed; will retry")
            self.stop_event.wait(1.0)

    def _start_scheduler(self) -> None:
        if self.schedules is None:
            return
        self._scheduler = SchedulerRunner(self.settings, self.schedules, self.clock)
        self._scheduler.start()

    def _install_signal_handlers(self) -> None:
        def stop(signum: int, frame: object) -> None:
            self.stop_event.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)


def build_runtime(
    settings: Settings,
    *,
    clock: Clock | None = None,
    backend: TrainingBackend | None = None,
    with_backend: bool = True,
    force_local: bool = False,
) -> Runtime:
    clock = clock or SystemClock()
    store = Store(settings.database_url, clock=clock)
    store.migrate()
    backend = backend or _build_backend(settings, clock, force_local=force_local)
    recipes = RecipeBook(store=store, settings=settings, clock=clock)
    jobs = JobService(store=store, backend=backend, settings=settings, clock=clock, reader=command_reader(settings, recipes))
    watcher = Watcher(store=store, backend=backend, clock=clock, settings=settings)
    runtime = Runtime(settings=settings, clock=clock, store=store, backend=backend, jobs=jobs, watcher=watcher)
    runtime.recipes = recipes
    runtime.progress = ProgressTracker(store, backend, clock, settings)
    runtime.schedules = _build_schedules(runtime)
    runtime.endpoints = _build_endpoints(runtime)
    runtime.events = _build_events(runtime)
    return runtime


def command_reader(settings: Settings, recipes: RecipeBook | None) -> CommandReader:
    """How /train text becomes a spec here: the team's recipes, then own code allowed and pinned with git."""
    from jobs.backends.code_sources import GitCodeSources

    return CommandReader.of(
        max_instances=settings.trainbot_max_instances,
        code_sources=settings.trainbot_code_sources,
        resolver=GitCodeSources(settings.trainbot_home),
        recipes=recipes.lookup if recipes is not None else None,
    )


def recipe_book(settings: Settings, clock: Clock | None = None) -> RecipeBook:
    """The recipes alone (``trainbot parse``, ``trainbot recipe ...``): no backend is built."""
    clock = clock or SystemClock()
    store = Store(settings.database_url, clock=clock)
    store.migrate()
    return RecipeBook(store=store, settings=settings, clock=clock)


def _build_backend(settings: Settings, clock: Clock, *, force_local: bool) -> TrainingBackend:
    if force_local or settings.backend == "local":
        from jobs.backends.local import LocalBackend

        return LocalBackend(settings.trainbot_home, clock=clock, offline=not settings.local_uses_hub)
    from jobs.backends.sagemaker import SageMakerBackend

    if not settings.trainbot_role_arn or not settings.trainbot_bucket:
        raise ConfigError(
            "the SageMaker backend needs TRAINBOT_ROLE_ARN and TRAINBOT_BUCKET; "
            "set them, or TRAINBOT_BACKEND=local to train on this machine."
        )
    return SageMakerBackend.from_settings(settings, clock=clock)


def _build_schedules(runtime: Runtime) -> Any:
    return build_schedule_service(runtime.store, runtime.jobs, runtime.settings, runtime.clock)


def _build_events(runtime: Runtime) -> Any:
    """The events queue, when TRAINBOT_EVENTS_QUEUE is set and the jobs run on SageMaker (which sends them)."""
    if not runtime.settings.uses_events or runtime.backend.name != "sagemaker":
        return None
    from jobs.backends.sagemaker_events import EventQueue

    return EventQueue.from_settings(runtime.settings)


def _build_endpoints(runtime: Runtime) -> EndpointService | None:
    """Endpoints live where the models were trained: local processes for local jobs, SageMaker for
    SageMaker jobs; a backend of any other kind (a test double) has none."""
    from jobs.endpoints.service import EndpointService

    backend: EndpointBackend
    if runtime.backend.name == "local":
        from jobs.backends.local_endpoints import LocalEndpoints

        backend = LocalEndpoints(runtime.settings.trainbot_home, runtime.clock)
    elif runtime.backend.name == "sagemaker":
        from jobs.backends.sagemaker_endpoints import from_settings

        backend = from_settings(runtime.settings)
    else:
        return None
    return EndpointService(store=runtime.store, backend=backend, settings=runtime.settings, clock=runtime.clock)

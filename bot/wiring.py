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

from bot.code_hosts import CodeHostPool
from bot.scheduler import SchedulerRunner, build_schedule_service, scheduler_tables
from jobs.backend import OwnCodeGate, SimulatedSpot, TrainingBackend
from jobs.clock import Clock, SystemClock
from jobs.endings.stage import EndingStage, Step
from jobs.endings.steps import TrainbotSteps
from jobs.errors import ConfigError
from jobs.home import secure_home
from jobs.lifecycle.controller import Controller
from jobs.lifecycle.cycle import CountedBackend
from jobs.lifecycle.progress import ProgressTracker
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
from jobs.lineage import LineageStatus
from jobs.planning.reader import CommandReader
from jobs.recipes.service import RecipeBook
from jobs.settings import Settings
from jobs.store.store import Store

if TYPE_CHECKING:
    from handlers.chat import Chat
    from handlers.context import Services
    from jobs.endpoints.port import EndpointBackend
    from jobs.releases.steps import ReleaseSteps

log = logging.getLogger(__name__)

#: Launches, deploys and uploads run here, never on Bolt's listener threads (the 3 s ack path).
BACKGROUND_WORKERS = 4


@dataclass
class Runtime:
    settings: Settings
    clock: Clock
    store: Store
    backend: TrainingBackend  # as built (the services count its calls through a CountedBackend)
    jobs: JobService
    watcher: Watcher
    endings: EndingStage  # what follows each ending (reports, curves, history, announcements)
    schedules: Any = None
    endpoints: Any = None
    registry: Any = None  # jobs.registry.service.RegistryService: the model packages
    releases: ReleaseSteps | None = None  # register and promote what completed (steps of the ending stage)
    recipes: Any = None
    events: Any = None  # jobs.backends.sagemaker.events.EventQueue when TRAINBOT_EVENTS_QUEUE is set
    progress: ProgressTracker | None = None  # live progress on the cards, at most every TRAINBOT_PROGRESS_SECONDS
    simulation: SimulatedSpot | None = None  # the backend's spot simulation (local), for the console's reclaims
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(BACKGROUND_WORKERS, thread_name_prefix="trainbot-work")
    )
    code_hosts: CodeHostPool = field(default_factory=CodeHostPool)  # git and code tarballs: never the executor
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
                registry=self.registry,
                run_later=self.run_later,
                backend=self.backend,
                recipes=self.recipes,
                run_on_code_host=self.code_hosts.submit,
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
        lines = [self.watcher.poll_once().summary(), self.endings.process_due().summary()]
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
        names now, and delete each message once its change is recorded. A job whose check failed (or
        raised) keeps its messages, which come back after the queue's visibility timeout; a message that
        could not be read is kept too, so SQS sets it aside in the dead-letter queue after a few receives.
        Nothing one message holds stops the others. Returns the messages deleted."""
        notices = self.events.receive(wait_seconds)
        done = [n.receipt for n in notices if n.kind == "other"]
        by_job: dict[str, list[str]] = {}
        for notice in notices:
            if notice.kind == "training":
                by_job.setdefault(notice.name, []).append(notice.receipt)
        for job_name, receipts in by_job.items():
            if self._checked(job_name):
                done += receipts
        if by_job:
            self.endings.process_due()  # an ending an event brought is reported now, not at the next cycle
        endpoint_receipts = [n.receipt for n in notices if n.kind == "endpoint"]
        if endpoint_receipts and self._logged(self._follow_endpoints):
            done += endpoint_receipts
        if done:
            self.events.delete(done)
        return len(done)

    def _checked(self, job_name: str) -> bool:
        try:
            result = self.watcher.check_now([job_name])
        except Exception:
            log.exception("event for %s not handled yet; its message comes back", job_name)
            return False
        if result.errors:
            log.warning("event for %s not handled yet: %s", job_name, "; ".join(result.errors))
            return False
        return True

    def _follow_endpoints(self) -> None:
        if self.endpoints is not None:
            self.endpoints.poll_once()  # follows every endpoint still creating, one describe each

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
                self.endings.process_due()
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
        self.code_hosts.shutdown()
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
    trusted_terminal: bool = False,
    aws_session: Any = None,
) -> Runtime:
    """``trusted_terminal``: the console or demo, one person on their own machine, who may run own code on the
    local backend without its sandbox (serve and the CLI refuse it there). ``aws_session``: the boto3 session
    SageMaker hosting and the registry use (default: built from the settings, as the training backend's is)."""
    clock = clock or SystemClock()
    store = open_store(settings, clock)
    backend = backend or _build_backend(settings, clock, force_local=force_local, trusted_terminal=trusted_terminal)
    counted = CountedBackend(backend)  # every backend call of a watch cycle is counted, on its own thread
    recipes = RecipeBook(store=store, settings=settings, clock=clock)
    gate = backend.own_code_refusal if isinstance(backend, OwnCodeGate) else None
    reader = command_reader(settings, recipes, code_refusal=gate)
    simulation = backend if isinstance(backend, SimulatedSpot) else None
    jobs = JobService(store=store, backend=counted, settings=settings, clock=clock, reader=reader,
                      simulation=simulation)
    runtime = Runtime(settings=settings, clock=clock, store=store, backend=backend, jobs=jobs,
                      watcher=build_watcher(store, counted, clock, settings),
                      endings=build_endings(store, counted, clock, settings))
    runtime.recipes = recipes
    runtime.simulation = simulation
    runtime.progress = ProgressTracker(store, backend, clock, settings)
    runtime.schedules = _build_schedules(runtime)
    _build_endpoints_and_registry(runtime, aws_session)
    # The stage was built before the rooms its release steps need: built again, now with them.
    runtime.endings = build_endings(store, counted, clock, settings, runtime.releases)
    runtime.events = _build_events(runtime)
    return runtime


def build_watcher(store: Store, backend: TrainingBackend, clock: Clock, settings: Settings) -> Watcher:
    """The watcher and the controller it hands what it sees to, on the backend counted (a CountedBackend
    given is used as is, so every caller of one runtime shares one count)."""
    counted = backend if isinstance(backend, CountedBackend) else CountedBackend(backend)
    controller = Controller.from_settings(store, counted, clock, settings)
    return Watcher(store=store, backend=counted, clock=clock, settings=settings, controller=controller, meter=counted)


def build_endings(
    store: Store, backend: TrainingBackend, clock: Clock, settings: Settings, releases: ReleaseSteps | None = None
) -> EndingStage:
    return EndingStage(store, clock, ending_steps(store, backend, clock, settings, releases))


def ending_steps(
    store: Store, backend: TrainingBackend, clock: Clock, settings: Settings, releases: ReleaseSteps | None = None
) -> list[Step]:
    """What follows each ending, in order: the report and what it draws and keeps, then what a completion
    releases (its model package registered, promoted when its schedule says so). A step of another room is
    one more line here (jobs/endings/stage.py)."""
    return [
        *TrainbotSteps(store, backend, clock, settings.trainbot_home / "plots").all(),
        *(releases.all() if releases is not None else []),
    ]


def command_reader(
    settings: Settings, recipes: RecipeBook | None, *, code_refusal: Callable[[], str | None] | None = None
) -> CommandReader:
    """How /train text becomes a spec here: the team's recipes, then own code allowed (by the allowlist and by
    the backend: ``code_refusal``) and pinned with git."""
    from jobs.backends.archives import ArchiveLimits
    from jobs.backends.code_sources import GitCodeSources

    # The plan reads the pinned entry from the checkout the launch then uses: the same caps apply to both.
    git = GitCodeSources(settings.trainbot_home, limits=ArchiveLimits(max_bytes=settings.trainbot_code_max_bytes))
    return CommandReader.of(
        max_instances=settings.trainbot_max_instances,
        code_sources=settings.trainbot_code_sources,
        resolver=git,
        recipes=recipes.lookup if recipes is not None else None,
        entries=git,
        code_refusal=code_refusal,
    )


def recipe_book(settings: Settings, clock: Clock | None = None) -> RecipeBook:
    """The recipes alone (``trainbot parse``, ``trainbot recipe ...``): no backend is built."""
    clock = clock or SystemClock()
    return RecipeBook(store=open_store(settings, clock), settings=settings, clock=clock)


def open_store(settings: Settings, clock: Clock) -> Store:
    """The store at the newest schema with every table, APScheduler's included: created here, once, under
    the migration lock, before any thread of this process starts (a thread creating a table while another
    writes is refused on SQLite)."""
    secure_home(settings.trainbot_home)  # the store, the code cache and every job's files: the bot's alone
    store = Store(settings.database_url, clock=clock)
    store.migrate(foreign=scheduler_tables(store.engine))
    return store


def _build_backend(settings: Settings, clock: Clock, *, force_local: bool, trusted_terminal: bool) -> TrainingBackend:
    if force_local or settings.backend == "local":
        from jobs.backends.archives import ArchiveLimits
        from jobs.backends.local.limits import JobLimits
        from jobs.backends.local.sandbox import Sandbox
        from jobs.backends.local.training_jobs import LocalBackend

        return LocalBackend(
            settings.trainbot_home, clock=clock, offline=not settings.local_uses_hub,
            sandbox=Sandbox(settings.trainbot_local_sandbox, job_uid=settings.trainbot_local_job_uid),
            own_code_unsandboxed=trusted_terminal,
            code_limits=ArchiveLimits(max_bytes=settings.trainbot_code_max_bytes),
            data_roots=settings.local_data_roots, hub_token_arn=settings.trainbot_hf_token_secret_arn,
            job_limits=JobLimits.from_settings(settings),
        )
    from jobs.backends.sagemaker.training_jobs import SageMakerBackend

    if not settings.trainbot_role_arn or not settings.trainbot_bucket:
        raise ConfigError(
            "the SageMaker backend needs TRAINBOT_ROLE_ARN and TRAINBOT_BUCKET; "
            "set them, or TRAINBOT_BACKEND=local to train on this machine."
        )
    return SageMakerBackend.from_settings(settings, clock=clock)


def _build_schedules(runtime: Runtime) -> Any:
    service = build_schedule_service(runtime.store, runtime.jobs, runtime.settings, runtime.clock)

    def endpoint_tasks() -> dict[str, str]:  # read when a schedule is added: the endpoints are built after this
        return {e.name: e.task for e in runtime.endpoints.list()} if runtime.endpoints is not None else {}

    service.endpoint_tasks = endpoint_tasks
    return service


def _build_events(runtime: Runtime) -> Any:
    """The events queue, when TRAINBOT_EVENTS_QUEUE is set and the jobs run on SageMaker (which sends them)."""
    if not runtime.settings.uses_events or runtime.backend.name != "sagemaker":
        return None
    from jobs.backends.sagemaker.events import EventQueue

    return EventQueue.from_settings(runtime.settings)


def _build_endpoints_and_registry(runtime: Runtime, aws_session: Any) -> None:
    """Endpoints live where the models were trained: local processes for local jobs, SageMaker for
    SageMaker jobs; a backend of any other kind (a test double) has none. The registry keeps every model
    package in the store, and on SageMaker (TRAINBOT_REGISTRY=on) in its Model Registry too."""
    from jobs.endpoints.service import EndpointService
    from jobs.registry.service import RegistryService
    from jobs.releases.steps import ReleaseSteps

    settings, remote = runtime.settings, None
    backend: EndpointBackend | None = None
    if runtime.backend.name == "local":
        from jobs.backends.local.endpoints import LocalEndpoints
        from jobs.backends.local.sandbox import Sandbox

        # The model server runs in the jobs' sandbox (a model folder is other people's data), a team's inference
        # handler too, and that unsandboxed only where the backend's own code may run so (the console).
        sandbox = getattr(runtime.backend, "sandbox", None) or Sandbox(
            settings.trainbot_local_sandbox, job_uid=settings.trainbot_local_job_uid)
        backend = LocalEndpoints(settings.trainbot_home, runtime.clock, sandbox=sandbox,
                                 handler_unsandboxed=bool(getattr(runtime.backend, "own_code_unsandboxed", False)))
    elif runtime.backend.name == "sagemaker":
        from jobs.backends.sagemaker.endpoints import SageMakerEndpoints, from_settings
        from jobs.backends.sagemaker.registry import SageMakerRegistry

        sagemaker = from_settings(settings) if aws_session is None else SageMakerEndpoints(
            aws_session, role_arn=settings.trainbot_role_arn, bucket=settings.trainbot_bucket,
            region=settings.aws_region or None)
        backend, remote = sagemaker, SageMakerRegistry(sagemaker)
    registry = RegistryService(store=runtime.store, remote=remote, settings=settings, clock=runtime.clock)
    runtime.registry = registry
    if backend is not None:
        runtime.endpoints = EndpointService(store=runtime.store, backend=backend, settings=settings,
                                            clock=runtime.clock, registry=registry)
    runtime.releases = ReleaseSteps(store=runtime.store, registry=registry, schedules=runtime.schedules,
                                    endpoints=runtime.endpoints)

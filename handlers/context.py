"""What a handler gets: who asked, where, the services (built by bot/wiring.py) and the chat."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from handlers.chat import Chat
from jobs.clock import Clock
from jobs.records import Actor
from jobs.settings import Settings

if TYPE_CHECKING:
    from jobs.backend import TrainingBackend
    from jobs.endpoints.service import EndpointService
    from jobs.lifecycle.service import JobService
    from jobs.recipes.service import RecipeBook
    from jobs.schedules.service import ScheduleService
    from jobs.store.store import Store


class RequestGuard:
    """Claims a request id once per process: a double click or a retry that reaches the same process
    while the first one is still running does nothing. The store's request_id is the durable guard."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._claimed: set[str] = set()

    def claim(self, request_id: str) -> bool:
        with self._lock:
            if request_id in self._claimed:
                return False
            self._claimed.add(request_id)
            return True

    def release(self, request_id: str) -> None:
        with self._lock:
            self._claimed.discard(request_id)


def run_inline(work: Callable[[], None]) -> None:
    """A `run_later` for tests and the console: the work runs at once, in the caller's thread."""
    work()


@dataclass(frozen=True, kw_only=True)
class Services:
    """Built by bot/wiring.py; handlers reach the core only through these."""

    jobs: JobService
    store: Store
    settings: Settings
    clock: Clock
    schedules: ScheduleService | None = None
    endpoints: EndpointService | None = None
    run_later: Callable[[Callable[[], None]], None] = run_inline  # a bounded executor: work off the ack path
    backend: TrainingBackend | None = None  # for its scaling_note and console links
    launch_guard: RequestGuard = field(default_factory=RequestGuard)
    recipes: RecipeBook | None = None


@dataclass(frozen=True)
class CommandContext:
    actor: Actor
    channel_id: str
    services: Services
    chat: Chat
    trigger_id: str | None = None  # Slack's, for opening a modal; None on surfaces without modals

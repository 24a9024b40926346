"""What a handler gets: who asked, where, the services (built by bot/wiring.py) and the chat."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from handlers.blocks import MAX_TEXT, escape, truncate
from handlers.chat import Chat, ChatUnavailable, Reply
from handlers.texts import UNEXPECTED_ERROR
from jobs.clock import Clock
from jobs.errors import TrainbotError
from jobs.records import Actor
from jobs.settings import Settings

if TYPE_CHECKING:
    from jobs.backend import TrainingBackend
    from jobs.endpoints.service import EndpointService
    from jobs.lifecycle.service import JobService
    from jobs.recipes.service import RecipeBook
    from jobs.registry.service import RegistryService
    from jobs.schedules.service import ScheduleService
    from jobs.store.store import Store

log = logging.getLogger(__name__)


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
    # (user id, work) for work that waits on a git host or a code tarball: a pool of its own with a per-user
    # cap (bot/code_hosts.py), so such a host never holds cards, buttons, /logs or the home tab; raises BadInput
    # when that person has too much waiting. None: run_later.
    run_on_code_host: Callable[[str, Callable[[], None]], None] | None = None
    registry: RegistryService | None = None  # the model packages (/models)


def run_waiting_on_code(services: Services, user: str, work: Callable[[], None]) -> None:
    """``work`` (which waits on a code host) on the code-host pool, or on run_later where there is none."""
    if services.run_on_code_host is None:
        services.run_later(work)
    else:
        services.run_on_code_host(user, work)


#: Slack's channel_name of a slash command typed in a DM (between people, or with the bot).
DIRECT = "directmessage"
#: Slack's channel_name of a slash command typed in a private channel the bot is not a member of.
NOT_A_MEMBER = "privategroup"


@dataclass(frozen=True)
class CommandContext:
    actor: Actor
    channel_id: str
    services: Services
    chat: Chat
    trigger_id: str | None = None  # Slack's, for opening a modal; None on surfaces without modals
    # The surface's way to answer the person after the ack where the conversation itself may take nothing
    # from the bot (Slack: the action's response_url); None: an ephemeral post in the channel.
    answer: Callable[[Reply], None] | None = None
    # What kind of conversation the command came from, where the surface says (Slack's channel_name: DIRECT for a
    # DM, NOT_A_MEMBER for a private channel the bot is not in); "" where it does not.
    conversation: str = ""

    def tell(self, text: str) -> None:
        """Tell the person after the ack: through the surface's answer where it has one (it reaches them
        where the bot cannot post), else ephemerally; a chat that is down leaves a log line."""
        text = truncate(text, MAX_TEXT)
        if self.answer is not None:
            self.answer(Reply(text=text))
            return
        try:
            self.chat.post_ephemeral(self.channel_id, self.actor.user_id, text)
        except ChatUnavailable:
            log.warning("could not tell %s: %s", self.actor.user_id, text[:200])


def run_telling_failures(ctx: CommandContext, work: Callable[[], object], failed: str, name: str) -> None:
    """Run ``work`` (off the ack path); a failure is told to the person who asked in one sentence: ``failed``
    with ``{name}`` and ``{reason}``, both escaped (a name is typed, a reason may quote the cloud)."""
    try:
        work()
    except TrainbotError as exc:
        ctx.tell(failed.format(name=escape(name), reason=escape(exc.user_message())))
    except Exception:
        log.exception("work on %s failed", name)
        ctx.tell(failed.format(name=escape(name), reason=UNEXPECTED_ERROR))

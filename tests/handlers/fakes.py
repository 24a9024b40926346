"""Handler test peers: a recording Chat, and Services on a real store with the scripted backend."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from handlers.chat import ChatUnavailable
from handlers.context import CommandContext, Services
from jobs.lifecycle.service import JobService
from jobs.planning.hyperparameters import KNOWN_HYPERPARAMETERS, RESERVED_HYPERPARAMETERS, script_arguments
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import Store
from tests.jobs.fakes import ScriptedBackend
from tests.support.block_kit import blocks_problems
from tests.support.clock import FakeClock

CHANNEL = "C_ML"
ALICE = Actor("U_ALICE", channel_id=CHANNEL, via="slack")
BOB = Actor("U_BOB", channel_id=CHANNEL, via="slack")


def free_text_arguments() -> list[str]:
    """Argument names of the QA script that take any text (for cards with many long hyperparameters)."""
    typed_or_set = set(KNOWN_HYPERPARAMETERS) | set(RESERVED_HYPERPARAMETERS) | {"report_to"}
    return sorted(script_arguments("question-answering") - typed_or_set)


@dataclass(frozen=True)
class Said:
    method: str  # post, update, ephemeral, dm, upload, modal
    channel: str
    text: str
    blocks: list[dict] | None = None
    thread_ts: str | None = None
    ts: str | None = None
    user: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class RecordingChat:
    """The Chat port (and ModalChat when modals=True), keeping everything said; can fail on demand."""

    def __init__(self) -> None:
        self.said: list[Said] = []
        self.failing: set[str] = set()  # methods that raise ChatUnavailable
        self._n = 0
        self._lock = threading.Lock()

    def _check(self, method: str) -> None:
        if method in self.failing:
            raise ChatUnavailable(f"{method} is down")

    def _add(self, said: Said) -> None:
        with self._lock:
            self.said.append(said)

    def of(self, method: str) -> list[Said]:
        return [s for s in self.said if s.method == method]

    def post(self, channel: str, text: str, *, blocks: list[dict] | None = None,
             thread_ts: str | None = None) -> str:
        self._check("post")
        with self._lock:
            self._n += 1
            ts = f"100.{self._n:04d}"
        self._add(Said("post", channel, text, blocks, thread_ts, ts))
        return ts

    def update(self, channel: str, ts: str, text: str, *, blocks: list[dict] | None = None) -> None:
        self._check("update")
        self._add(Said("update", channel, text, blocks, ts=ts))

    def post_ephemeral(self, channel: str, user: str, text: str, *, blocks: list[dict] | None = None) -> None:
        self._check("ephemeral")
        self._add(Said("ephemeral", channel, text, blocks, user=user))

    def dm(self, user: str, text: str, *, blocks: list[dict] | None = None) -> None:
        self._check("dm")
        self._add(Said("dm", "D" + user, text, blocks, user=user))

    def upload_file(self, channel: str, path: Path, *, title: str, thread_ts: str | None = None) -> None:
        self._check("upload")
        self._add(Said("upload", channel, title, thread_ts=thread_ts, extra={"path": path}))


class ModalRecordingChat(RecordingChat):
    def open_modal(self, trigger_id: str, view: dict[str, Any]) -> None:
        self._check("modal")
        self._add(Said("modal", "", view.get("callback_id", ""), view.get("blocks"), extra={"view": view,
                                                                                             "trigger": trigger_id}))


class Deferred:
    """A run_later that holds the work until run() (to interleave clicks with launches)."""

    def __init__(self) -> None:
        self.work: list[Callable[[], None]] = []

    def __call__(self, work: Callable[[], None]) -> None:
        self.work.append(work)

    def run(self) -> None:
        while self.work:
            self.work.pop(0)()


@dataclass
class World:
    clock: FakeClock
    settings: Settings
    store: Store
    backend: ScriptedBackend
    jobs: JobService
    services: Services
    chat: RecordingChat

    def ctx(self, actor: Actor = ALICE, *, trigger_id: str | None = None) -> CommandContext:
        return CommandContext(actor=actor, channel_id=actor.channel_id or CHANNEL, services=self.services,
                              chat=self.chat, trigger_id=trigger_id)


def make_world(tmp_path: Path, *, chat: RecordingChat | None = None,
               run_later: Callable[[Callable[[], None]], None] | None = None, **settings: Any) -> World:
    clock = FakeClock()
    config = Settings(trainbot_home=tmp_path, trainbot_bucket="bkt", **settings)
    store = Store(f"sqlite:///{tmp_path / 'bot.db'}", clock=clock)
    store.migrate()
    backend = ScriptedBackend(clock=clock)
    jobs = JobService(store=store, backend=backend, settings=config, clock=clock)
    extra: dict[str, Any] = {} if run_later is None else {"run_later": run_later}
    services = Services(jobs=jobs, store=store, settings=config, clock=clock, backend=backend, **extra)
    return World(clock, config, store, backend, jobs, services, chat or RecordingChat())


def walk_limits(blocks: list[dict], *, max_blocks: int = 50) -> None:
    """Assert Slack's Block Kit limits on a message's (or, with max_blocks=100, a view's) blocks, as the
    loopback Slack checks them (tests/support/block_kit.py)."""
    assert len(blocks) <= max_blocks, f"{len(blocks)} blocks"
    problems = blocks_problems(blocks)
    assert not problems, problems

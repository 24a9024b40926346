"""The real bot as `trainbot serve --http` builds it (bot.wiring.build_runtime on the local backend, the Bolt
app behind uvicorn), against the loopback Slack API. Requests are signed as Slack signs them."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.serve import SlackParts
from bot.wiring import Runtime, build_runtime
from handlers.notify import deliver_due
from jobs.backends.local.runner import SubprocessRunner
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.lineage import Lineage
from jobs.settings import Settings
from tests.support.slack_api import BOT_TOKEN, SlackApiServer
from tests.support.slack_bot import BackgroundWork, HttpBot, served_runtime, slash_command

SECRET = "security-signing-secret"


@dataclass
class RealBot:
    slack: SlackApiServer
    runtime: Runtime
    parts: SlackParts
    bot: HttpBot
    work: BackgroundWork

    def command(self, command: str, text: str, *, user: str = "U_ALICE", channel: str = "C_ML") -> dict[str, Any]:
        """A signed slash command; the acknowledgement's JSON (or {"text": ""} for an empty ack)."""
        status, body = self.bot.post(slash_command(command, text, user=user, channel=channel,
                                                   response_url=self.slack.response_url()))
        assert status == 200, body
        return json.loads(body) if body else {"text": ""}

    def deliver(self) -> int:
        """The outbox delivered to the loopback Slack (what the outbox thread does every second)."""
        return deliver_due(self.parts.services, self.parts.chat)

    def settle(self, timeout: float = 180) -> None:
        """Background work done (a first local launch builds the tiny offline model: seconds, more when busy)."""
        self.work.settle(timeout)

    def watch_until(self, lineage_id: str, done: Callable[[Lineage], bool], *, timeout: float = 120) -> Lineage:
        """Watcher cycles, the steps after each ending and outbox deliveries until ``done`` holds for the
        lineage (a generous cap)."""
        deadline = time.monotonic() + timeout
        while True:
            self.runtime.watcher.poll_once()
            self.runtime.endings.process_due()
            self.deliver()
            lineage = self.runtime.store.get_lineage(lineage_id)
            if done(lineage):
                return lineage
            if time.monotonic() > deadline:
                raise AssertionError(f"{lineage_id} is still {lineage.status.value}")
            time.sleep(0.2)


class ScriptRunner(SubprocessRunner):
    """The real runner and the real wrapper (which records the exit code), running ``script`` as the job's
    training process: a job whose output is whatever an attacker's script prints."""

    def __init__(self, script: str) -> None:
        super().__init__()
        self.script = script

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log_path: Path) -> int:
        at = next(i for i, word in enumerate(argv) if word.endswith("wrapper.py"))
        cut = list(argv).index("--", at)  # wrapper.py EXIT_FILE [its options] --
        command = [*argv[: cut + 1], sys.executable, "-c", self.script]
        return super().spawn(command, env=env, cwd=cwd, log_path=log_path)


@contextmanager
def real_bot(tmp_path: Path, *, job_script: str | None = None, limits: Any = None,
             **settings: Any) -> Iterator[RealBot]:
    """``job_script``: what a launched local job runs (see ScriptRunner); without it, real training.
    ``limits``: the HTTP server's bot.request_guard.RequestLimits (default: what `serve --http` uses)."""
    slack = SlackApiServer().start()
    config = Settings(slack_bot_token=BOT_TOKEN, slack_signing_secret=SECRET, slack_api_url=slack.base_url,
                      trainbot_home=tmp_path / "home", trainbot_backend="local", **settings)
    backend = None
    if job_script is not None:
        backend = LocalBackend(config.trainbot_home, clock=SystemClock(), runner=ScriptRunner(job_script),
                               use_toolkit=False)
    runtime = build_runtime(config, backend=backend)
    try:
        with served_runtime(runtime, secret=SECRET, limits=limits) as (parts, bot, work):
            yield RealBot(slack, runtime, parts, bot, work)
    finally:
        slack.stop()

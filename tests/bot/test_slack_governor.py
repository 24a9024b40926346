"""The governor against a loopback Slack that enforces Slack's documented limits (tests/support/slack_api.py
SLACK_LIMITS: Tier 3 for chat.update, about one post a second a channel, ...) on a simulated clock, with
the real WebClient, SlackChat and outbox delivery loop (handlers.notify.deliver_due):

- twenty jobs changing state in one channel, with live progress, stay inside every limit with no 429, each
  card ends showing its newest state, endings are reported within seconds; the same load unpaced is refused;
- a 429 whose retries ran out holds back the next call to that method from any caller (SlackChat, Bolt's
  direct client calls, files_upload_v2's inner calls) and from a second bot on the same store (SQLite and
  a real PostgreSQL server), and an outbox post held back is deferred to its Retry-After, then made once;
- two bots on one store share the workspace's budget (each alone would take all of it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from bot.slack_chat import SlackChat, make_web_client
from bot.slack_governor import GovernedWebClient, RateLimitedError, SlackGovernor
from handlers.chat import ChatBusy
from handlers.notify import deliver_due
from jobs.clock import Clock
from jobs.lifecycle import events
from jobs.lifecycle.progress import ProgressTracker
from jobs.lineage import Lineage
from jobs.rate_limits import MemoryLedger, Priority, RateLedger, prioritised
from jobs.records import Progress
from jobs.store.card_redraws import CardRedraws
from jobs.store.rate_ledger import StoreRateLedger
from jobs.store.store import Store
from tests.handlers.fakes import ALICE, CHANNEL, World, make_world
from tests.support.clock import FakeClock
from tests.support.slack_api import BOT_TOKEN, SLACK_LIMITS, SlackApiServer

SECONDARY = ("Starting", "Downloading", "Training")


@dataclass
class Bot:
    world: World
    chat: SlackChat
    client: GovernedWebClient

    def deliver_for(self, seconds: float, every: float = 1.0, each: Callable[[float], None] | None = None) -> None:
        """The outbox thread for ``seconds`` of simulated time: a pass, then its one-second wait."""
        clock = self.world.clock
        start = clock.now()
        while (elapsed := (clock.now() - start).total_seconds()) < seconds:
            if each is not None:
                each(elapsed)
            deliver_due(self.world.services, self.chat)
            clock.advance(every)


@contextmanager
def loopback_slack(clock: FakeClock, *, limits: bool = True) -> Iterator[SlackApiServer]:
    with SlackApiServer(limits=SLACK_LIMITS if limits else (), clock=lambda: clock.now().timestamp()) as slack:
        yield slack


def bot(world: World, slack: SlackApiServer, *, ledger: RateLedger | None = None, paced: bool = True,
        clock: Clock | None = None) -> Bot:
    settings = world.settings.model_copy(update={"slack_api_url": slack.base_url})
    clock = clock or world.clock
    ledger = ledger or MemoryLedger()
    governor = SlackGovernor(ledger, clock) if paced else SlackGovernor.unpaced(clock, ledger)
    client = make_web_client(settings, governor=governor)
    return Bot(world, SlackChat(client), client)


def cards_in_one_channel(slack_bot: Bot, count: int) -> list[Lineage]:
    world = slack_bot.world
    lineages = []
    for _ in range(count):
        lineage = world.jobs.launch("distilbert-spot", actor=ALICE)
        with prioritised(Priority.ENDING):  # patient enough for an unpaced bot's Retry-After too
            ts = slack_bot.chat.post(CHANNEL, f"card of {lineage.id}")
        world.jobs.attach_message(lineage.id, CHANNEL, ts)
        lineages.append(world.jobs.get(lineage.id))
    return lineages


def change_state(world: World, lineage: Lineage, secondary: str) -> None:
    """What the watcher records and announces when a job's secondary status moves."""
    job = f"{lineage.id}-1"
    world.store.update_attempt(job, remote_status="InProgress", secondary_status=secondary)
    payload = events.state_line(lineage.id, job, "InProgress", secondary)
    world.store.outbox.enqueue(kind=payload["kind"], payload=payload, dedup_key=f"{job}:{secondary}",
                               lineage_id=lineage.id, channel=CHANNEL)


def fail(world: World, lineage: Lineage) -> None:
    job = f"{lineage.id}-1"
    payload = events.failed(lineage.id, job, "AlgorithmError: boom", ["Traceback", "ValueError: boom"])
    world.store.outbox.enqueue(kind=payload["kind"], payload=payload, dedup_key=f"{job}:failed",
                               lineage_id=lineage.id, channel=CHANNEL)


def twenty_jobs_changing(slack_bot: Bot, slack: SlackApiServer) -> tuple[list[Lineage], dict[str, float]]:
    """Twenty cards in one channel; each job goes Starting, Downloading, Training in its first half minute,
    every job's progress moves each minute, and at minute five two jobs fail and three are interrupted.
    Returns the lineages and, per failed job, when its failure was queued (on the server's clock)."""
    world = slack_bot.world
    lineages = cards_in_one_channel(slack_bot, 20)
    tracker = ProgressTracker(world.store, world.backend, world.clock, world.settings)
    failed_at: dict[str, float] = {}
    done: set[str] = set()

    def happenings(elapsed: float) -> None:
        for index, lineage in enumerate(lineages):
            for step, secondary in enumerate(SECONDARY):
                key = f"{lineage.id}:{secondary}"
                if elapsed >= index * 0.5 + step * 10 and key not in done:
                    done.add(key)
                    change_state(world, lineage, secondary)
        minute = int(elapsed // 60)
        if f"progress:{minute}" not in done:
            done.add(f"progress:{minute}")
            for n, lineage in enumerate(lineages):
                world.backend.set_progress(f"{lineage.id}-1", Progress(step=10 * minute + n % 3, loss=1 / (1 + minute)))
            tracker.poll_once(force=True)
        if elapsed >= 300 and "minute five" not in done:
            done.add("minute five")
            for lineage in lineages[:2]:
                fail(world, lineage)
                failed_at[lineage.id] = world.clock.now().timestamp()
            for lineage in lineages[2:5]:
                change_state(world, lineage, "Interrupted")

    slack_bot.deliver_for(8 * 60, each=happenings)
    return lineages, failed_at


def test_twenty_jobs_changing_in_one_channel_stay_inside_every_limit(tmp_path: Path) -> None:
    world = make_world(tmp_path, slack_bot_token=BOT_TOKEN)
    with loopback_slack(world.clock) as slack:
        slack_bot = bot(world, slack)
        lineages, failed_at = twenty_jobs_changing(slack_bot, slack)
        assert slack.rate_limited() == []
        assert slack.most_in_window("chat.update", 60) <= 50  # Tier 3, shared by every card
        assert slack.most_in_window("chat.postMessage", 10, channel=CHANNEL) <= 10
        assert slack.most_in_window("chat.postMessage", 60, channel=CHANNEL) <= 60
        assert world.store.outbox.due_notifications() == []  # everything was delivered
        assert CardRedraws(world.store, world.clock).waiting() == []
        last = last_card_of(slack)
        for index, lineage in enumerate(lineages):  # each card shows its newest state and its newest progress
            newest = "Interrupted" if 2 <= index < 5 else "Training"
            card = last[lineage.id]
            assert newest in card and f"step {70 + index % 3}/" in card and "as of <!date^" in card
        for lineage_id, queued in failed_at.items():
            report, = [c for c in slack.calls_to("chat.postMessage") if c.params["channel"] == CHANNEL
                       and "AlgorithmError" in c.params.get("text", "") and lineage_id in c.params.get("text", "")]
            assert report.at - queued <= 5  # the ending jumped the queue of state lines and progress
        updates = slack.calls_to("chat.update")
        assert len(updates) < 20 * (3 + 8) + 3  # coalesced: fewer redraws than changes and progress moves


def test_the_same_load_unpaced_is_refused_by_slack(tmp_path: Path) -> None:
    """The control: the loopback's limits are real, and the changes above would break them without pacing."""
    world = make_world(tmp_path, slack_bot_token=BOT_TOKEN)
    with loopback_slack(world.clock) as slack:
        twenty_jobs_changing(bot(world, slack, paced=False), slack)
        refused = {call.method for call in slack.rate_limited()}
        assert "chat.postMessage" in refused or "chat.update" in refused
        assert world.store.outbox.due_notifications() == []  # Retry-After honoured: still all delivered


def last_card_of(slack: SlackApiServer) -> dict[str, str]:
    """Each lineage's card as its last accepted chat.update drew it (JSON of its blocks)."""
    cards: dict[str, str] = {}
    for call in slack.calls_to("chat.update"):
        if call.status == 200:
            match = re.search(r"(distilbert-spot-[0-9a-f]+)", call.params.get("text", ""))
            assert match, call.params.get("text")
            cards[match.group(1)] = json.dumps(call.params.get("blocks"))
    return cards


def test_a_429_past_its_retries_holds_back_every_caller_until_retry_after(tmp_path: Path) -> None:
    world = make_world(tmp_path, slack_bot_token=BOT_TOKEN)
    with loopback_slack(world.clock, limits=False) as slack:
        slack_bot = bot(world, slack)
        start = world.clock.now().timestamp()
        slack.rate_limit("chat.update", times=1, retry_after=30)
        with pytest.raises(ChatBusy) as busy:  # a person's click: it will not wait 30 s
            slack_bot.chat.update(CHANNEL, "1.1", "card")
        assert busy.value.retry_after == pytest.approx(30)
        world.clock.advance(5)
        another = SlackChat(slack_bot.client)
        with pytest.raises(ChatBusy):
            another.update(CHANNEL, "1.2", "another card")
        with pytest.raises(RateLimitedError):  # Bolt's own calls go through the same client
            slack_bot.client.chat_update(channel=CHANNEL, ts="1.3", text="bolt")
        with prioritised(Priority.ENDING), pytest.raises(ChatBusy):  # 25 s left: past an ending's patience
            another.update(CHANNEL, "1.4", "ending")
        assert len(slack.calls_to("chat.update")) == 1  # none of them reached Slack
        home = {"type": "home", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "hi"}}]}
        slack_bot.chat.publish_home("U_ALICE", home)  # other methods are not held
        world.clock.advance(20)
        with prioritised(Priority.ENDING):  # 5 s left: an ending waits them out
            another.update(CHANNEL, "1.4", "ending")
        first, second = slack.calls_to("chat.update")
        assert (first.status, second.status) == (429, 200) and second.at - start >= 30
        assert slack_bot.client.governor.rate_limited["chat.update"] == 1


def test_short_retry_afters_are_waited_out_and_the_call_sent_again(tmp_path: Path) -> None:
    world = make_world(tmp_path, slack_bot_token=BOT_TOKEN)
    with loopback_slack(world.clock, limits=False) as slack:
        slack_bot = bot(world, slack)
        slack.rate_limit("chat.postMessage", times=2, retry_after=2)
        with prioritised(Priority.CHANGE):
            slack_bot.chat.post(CHANNEL, "hello")
        calls = slack.calls_to("chat.postMessage")
        assert [c.status for c in calls] == [429, 429, 200]
        assert calls[1].at - calls[0].at >= 2 and calls[2].at - calls[1].at >= 2
        assert len(slack.messages[CHANNEL]) == 1


def test_an_outbox_post_held_back_is_deferred_to_its_retry_after_then_made_once(tmp_path: Path) -> None:
    world = make_world(tmp_path, slack_bot_token=BOT_TOKEN)
    with loopback_slack(world.clock, limits=False) as slack:
        slack_bot = bot(world, slack)
        lineage, = cards_in_one_channel(slack_bot, 1)
        fail(world, lineage)
        slack.rate_limit("chat.postMessage", times=1, retry_after=120)
        assert deliver_due(world.services, slack_bot.chat) == 0
        assert world.store.outbox.due_notifications() == []
        world.clock.advance(119)
        assert world.store.outbox.due_notifications() == []  # not before Slack allows it ...
        world.clock.advance(1)
        assert deliver_due(world.services, slack_bot.chat) == 1  # ... and then at once, not after a backoff
        reports = [m for m in slack.thread_of(CHANNEL, str(lineage.message_ts)) if "AlgorithmError" in m["text"]]
        assert len(reports) == 1


def test_files_upload_v2_goes_through_the_governor_too(tmp_path: Path) -> None:
    world = make_world(tmp_path, slack_bot_token=BOT_TOKEN)
    with loopback_slack(world.clock, limits=False) as slack:
        ledger = MemoryLedger()
        slack_bot = bot(world, slack, ledger=ledger)
        ledger.block("files.getUploadURLExternal", world.clock.now().timestamp() + 60)
        png = tmp_path / "curve.png"
        png.write_bytes(b"\x89PNG")
        with pytest.raises(ChatBusy):
            slack_bot.chat.upload_file(CHANNEL, png, title="Loss", thread_ts="1.1")
        assert slack.calls_to("files.getUploadURLExternal") == []
        world.clock.advance(60)
        slack_bot.chat.upload_file(CHANNEL, png, title="Loss", thread_ts="1.1")
        assert len(slack.calls_to("files.completeUploadExternal")) == 1


@pytest.fixture
def two_stores(database_url: str, tmp_path: Path) -> Iterator[tuple[Store, Store, FakeClock]]:
    clock = FakeClock()
    first, second = Store(database_url, clock=clock), Store(database_url, clock=clock)
    first.migrate()
    yield first, second, clock
    first.dispose()
    second.dispose()


def test_a_second_bot_on_the_same_store_honours_the_first_ones_retry_after(
    tmp_path: Path, two_stores: tuple[Store, Store, FakeClock]
) -> None:
    first_store, second_store, clock = two_stores
    world = make_world(tmp_path, slack_bot_token=BOT_TOKEN)
    with loopback_slack(clock, limits=False) as slack:
        first = bot(world, slack, ledger=StoreRateLedger(first_store.engine), clock=clock)
        second = bot(world, slack, ledger=StoreRateLedger(second_store.engine), clock=clock)
        slack.rate_limit("chat.update", times=1, retry_after=30)
        with pytest.raises(ChatBusy):
            first.chat.update(CHANNEL, "1.1", "card")
        clock.advance(1)
        with pytest.raises(ChatBusy) as busy:
            second.chat.update(CHANNEL, "1.2", "card")
        assert busy.value.retry_after == pytest.approx(29)
        assert len(slack.calls_to("chat.update")) == 1
        clock.advance(29)
        second.chat.update(CHANNEL, "1.2", "card")
        assert [c.status for c in slack.calls_to("chat.update")] == [429, 200]


def test_two_bots_on_one_store_share_the_workspace_budget(
    tmp_path: Path, two_stores: tuple[Store, Store, FakeClock]
) -> None:
    first_store, second_store, clock = two_stores
    world = make_world(tmp_path, slack_bot_token=BOT_TOKEN)
    with loopback_slack(clock) as slack:
        bots = [bot(world, slack, ledger=StoreRateLedger(s.engine), clock=clock) for s in (first_store, second_store)]
        redrawn = [0, 0]
        end = clock.now() + timedelta(minutes=3)
        tick = 0
        while clock.now() < end:  # both redraw progress as fast as they are let, every half second
            tick += 1
            for index in (0, 1) if tick % 2 else (1, 0):  # whoever asks first gets the slot: take turns
                each = bots[index]
                try:
                    with prioritised(Priority.PROGRESS):
                        each.chat.update(CHANNEL, f"1.{index}", "progress")
                    redrawn[index] += 1
                except ChatBusy:
                    pass
            clock.advance(0.5)
        assert slack.rate_limited() == []
        assert slack.most_in_window("chat.update", 60) <= 50
        assert min(redrawn) > 20 and sum(redrawn) >= 3 * 45 - 5  # shared, and the tier used

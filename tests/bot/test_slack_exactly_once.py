"""Issue 12, item 6: the outbox posts each message once toward Slack, even when Slack is slow.

The real SlackChat (a WebClient with a 1 s timeout) delivers the outbox to the loopback Slack, which keeps
what was posted. Slack is made to store a post and answer after the client gave up, or to drop the
connection once it stored it, or to fail before storing: the thread ends with one copy of the message.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.slack_chat import OUTBOX_EVENT, SlackChat
from handlers.notify import deliver_due
from jobs.lifecycle import events
from jobs.lineage import Lineage
from jobs.records import Actor
from jobs.store.card_redraws import CardRedraws
from tests.handlers.fakes import ALICE, CHANNEL, World, make_world
from tests.handlers.test_notify import report
from tests.support.slack_api import BOT_TOKEN, SlackApiServer
from tests.support.slack_bot import unpaced_web_client

TIMEOUT = 1  # the client's, in seconds
LATE = 2.5  # Slack's answer to a slow post, well after the client gave up


@dataclass
class Rig:
    slack: SlackApiServer
    world: World
    chat: SlackChat

    def deliver(self) -> int:
        """One outbox pass, then the clock moved past any backoff, as the outbox thread would wait."""
        delivered = deliver_due(self.world.services, self.chat)
        self.world.clock.advance(3600)
        return delivered


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with SlackApiServer() as slack:
        world = make_world(tmp_path, slack_bot_token=BOT_TOKEN, slack_api_url=slack.base_url)
        chat = SlackChat(unpaced_web_client(world.settings, timeout=TIMEOUT))
        yield Rig(slack, world, chat)


def with_card(rig: Rig) -> Lineage:
    """A lineage whose card is in the channel (posted through Slack, so its thread exists there)."""
    lineage = rig.world.jobs.launch("distilbert-spot", actor=ALICE)
    ts = rig.chat.post(CHANNEL, "card")
    rig.world.jobs.attach_message(lineage.id, CHANNEL, ts)
    return rig.world.jobs.get(lineage.id)


def enqueue_report(rig: Rig, lineage: Lineage) -> None:
    payload = events.completed(lineage.id, f"{lineage.id}-1", report(lineage), None)
    rig.world.store.outbox.enqueue(kind=payload["kind"], payload=payload, dedup_key=f"report:{lineage.id}",
                            lineage_id=lineage.id, channel=lineage.channel)


def reports_in_thread(rig: Rig, lineage: Lineage) -> list[dict]:
    assert lineage.message_ts is not None
    return [m for m in rig.slack.thread_of(CHANNEL, lineage.message_ts) if "Final report" in str(m["blocks"])]


def posts(rig: Rig) -> int:
    return len(rig.slack.calls_to("chat.postMessage"))


def test_a_post_answered_after_the_timeout_is_not_posted_again(rig: Rig) -> None:
    lineage = with_card(rig)
    enqueue_report(rig, lineage)
    rig.slack.answer_late("chat.postMessage", seconds=LATE)
    assert rig.deliver() == 0  # timed out: deferred
    assert len(reports_in_thread(rig, lineage)) == 1  # ... but Slack has it
    assert rig.deliver() == 1
    report_message, = reports_in_thread(rig, lineage)
    assert report_message["metadata"]["event_type"] == OUTBOX_EVENT
    assert posts(rig) == 2  # the card and the one report
    assert rig.slack.calls_to("conversations.replies")[0].params["ts"] == lineage.message_ts
    assert rig.world.store.outbox.due_notifications() == []


def test_still_one_message_however_often_the_delivery_is_retried(rig: Rig) -> None:
    lineage = with_card(rig)
    enqueue_report(rig, lineage)
    rig.slack.answer_late("chat.postMessage", seconds=LATE)
    rig.slack.fail("conversations.replies", times=2)  # looking fails twice: it must not post meanwhile
    rig.slack.fail("chat.update", times=2)  # then redrawing the card fails twice: the redraw pass retries it
    delivered = [rig.deliver() for _ in range(7)]
    assert delivered == [0, 0, 0, 1, 0, 0, 0]
    assert len(reports_in_thread(rig, lineage)) == 1 and posts(rig) == 2
    assert rig.world.store.outbox.due_notifications() == []
    assert len(rig.slack.calls_to("chat.update")) == 3  # failed, failed, drawn: then nothing is left to draw
    assert CardRedraws(rig.world.store, rig.world.clock).waiting() == []


def test_a_dropped_connection_after_the_post_is_not_posted_again(rig: Rig) -> None:
    """The client library would send the post again on its own after a dropped connection; it must not."""
    lineage = with_card(rig)
    enqueue_report(rig, lineage)
    rig.slack.drop_after("chat.postMessage")
    assert rig.deliver() == 0
    assert rig.deliver() == 1
    assert len(reports_in_thread(rig, lineage)) == 1 and posts(rig) == 2


def test_a_post_that_failed_before_it_was_stored_is_posted_once_more(rig: Rig) -> None:
    lineage = with_card(rig)
    enqueue_report(rig, lineage)
    rig.slack.fail_http("chat.postMessage", status=500)
    assert rig.deliver() == 0
    assert reports_in_thread(rig, lineage) == []
    assert rig.deliver() == 1
    assert len(reports_in_thread(rig, lineage)) == 1
    assert posts(rig) == 3  # the card, the failed post, the one re-post


def test_the_launcher_dm_and_a_late_card_are_posted_once_too(rig: Rig) -> None:
    """A lineage launched outside Slack gets its card from the outbox; a failure DMs the launcher. Each of
    the three posts (card, thread reply, DM) is answered late, and each is made once."""
    lineage = rig.world.jobs.launch("distilbert-spot", actor=Actor("cli:ops", channel_id=None, via="cli"))
    payload = events.failed(lineage.id, f"{lineage.id}-1", "AlgorithmError: boom", ["line"])
    rig.world.store.outbox.enqueue(kind=payload["kind"], payload=payload, dedup_key=f"failed:{lineage.id}",
                            lineage_id=lineage.id, channel=CHANNEL)
    rig.slack.answer_late("chat.postMessage", seconds=LATE, times=3)
    assert [rig.deliver() for _ in range(4)] == [0, 0, 0, 1]
    cards = [m for m in rig.slack.messages[CHANNEL] if m.get("thread_ts") is None]
    card_ts = rig.world.jobs.get(lineage.id).message_ts
    assert len(cards) == 1 and cards[0]["ts"] == card_ts
    assert len(rig.slack.thread_of(CHANNEL, str(card_ts))) == 1
    assert len(rig.slack.messages["Dcli:ops"]) == 1 and posts(rig) == 3


def test_without_the_history_scope_it_posts_again_and_says_which_scope(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Looking needs channels:history (or groups:/im:history); without it the post is made again, as before."""
    lineage = with_card(rig)
    enqueue_report(rig, lineage)
    rig.slack.answer_late("chat.postMessage", seconds=LATE)
    rig.slack.fail("conversations.replies", error="missing_scope")
    caplog.set_level(logging.WARNING)
    rig.deliver()
    assert rig.deliver() == 1
    assert len(reports_in_thread(rig, lineage)) == 2
    assert any("channels:history" in r.getMessage() for r in caplog.records)


def test_a_fresh_delivery_does_not_look_first(rig: Rig) -> None:
    lineage = with_card(rig)
    enqueue_report(rig, lineage)
    assert rig.deliver() == 1
    assert rig.slack.calls_to("conversations.replies") == [] and len(reports_in_thread(rig, lineage)) == 1

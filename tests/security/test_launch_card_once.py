"""Issue 34, item 7: a dropped connection neither doubles a job's launch card nor delays its report.

The real bot (`serve --http` on the local backend) against the loopback Slack API, which is told to store the
launch card's chat.postMessage and then drop the connection unanswered. Launch (a signed block action) still
ends with one card in the channel, attached to the lineage at once (found by its mark with one
conversations.history call, the method Slack allows a distributed app once a minute), and the job's report goes
into that card's thread without any outbox delivery counted as failed. When the lookup fails too, the job is
launched without its card and the outbox finds the card on its first delivery, without waiting out the grace
for a card that is not coming. A notice that waits for a card being posted is not counted as a failed attempt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from handlers import cards
from handlers.blocks import buttons_in
from jobs.lifecycle import events
from jobs.lineage import Lineage, LineageStatus
from jobs.records import Actor
from jobs.store.schema import outbox, read_transaction
from tests.security.bot_rig import RealBot, real_bot
from tests.support.slack_bot import block_action, slash_command

pytestmark = pytest.mark.timeout(300)

SCRIPT = "print('[trainbot-test] trained'); raise SystemExit(0)"


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[RealBot]:
    with real_bot(tmp_path, job_script=SCRIPT, trainbot_local_data_dirs=(tmp_path,)) as rig:
        yield rig


def launch(bot: RealBot) -> Lineage:
    """/train and its Launch button, as Slack sends them; the lineage once the launch has run."""
    status, body = bot.bot.post(slash_command("/train", "distilbert-spot", response_url=bot.slack.response_url()))
    assert status == 200, body
    value = next(b["value"] for b in buttons_in(json.loads(body)["blocks"]) if b["action_id"] == cards.ACTION_LAUNCH)
    status, body = bot.bot.post(block_action(cards.ACTION_LAUNCH, value, response_url=bot.slack.response_url()))
    assert status == 200, body
    bot.settle()
    [lineage] = bot.runtime.jobs.list()
    return lineage


def cards_in_channel(bot: RealBot) -> list[dict[str, Any]]:
    return [m for m in bot.slack.messages.get("C_ML", []) if m.get("thread_ts") in (None, m["ts"])]


def outbox_rows(bot: RealBot, lineage_id: str) -> list[Any]:
    with read_transaction(bot.runtime.store.engine) as conn:
        return list(conn.execute(select(outbox).where(outbox.c.lineage_id == lineage_id)))


def reported(bot: RealBot, lineage: Lineage) -> Lineage:
    """The job run to its end and its report delivered."""
    ended = bot.watch_until(lineage.id, lambda lin: lin.status is LineageStatus.COMPLETED)
    for _ in range(3):
        bot.runtime.endings.process_due()
        bot.deliver()
    return bot.runtime.store.get_lineage(ended.id)


def test_a_card_stored_before_the_connection_dropped_is_found_not_posted_again(bot: RealBot) -> None:
    bot.slack.drop_after("chat.postMessage")
    lineage = launch(bot)
    [card] = cards_in_channel(bot)
    assert lineage.message_ts == card["ts"]  # attached at once: nothing waits for a card
    assert len(bot.slack.calls_to("conversations.history")) == 1

    ended = reported(bot, lineage)
    assert len(cards_in_channel(bot)) == 1
    thread = bot.slack.thread_of("C_ML", str(ended.message_ts))
    assert any("Final report" in json.dumps(m.get("blocks")) for m in thread), thread
    assert [row.attempts for row in outbox_rows(bot, lineage.id)] == [0] * len(outbox_rows(bot, lineage.id))
    assert len(bot.slack.calls_to("conversations.history")) == 1


def test_when_the_lookup_fails_too_the_outbox_finds_the_card_without_waiting(bot: RealBot) -> None:
    bot.slack.drop_after("chat.postMessage")
    bot.slack.fail("conversations.history")  # Slack is having a moment: the launch goes ahead without its card
    lineage = launch(bot)
    assert lineage.message_ts is None and len(cards_in_channel(bot)) == 1

    ended = reported(bot, lineage)
    [card] = cards_in_channel(bot)
    assert ended.message_ts == card["ts"]
    assert all(row.attempts == 0 for row in outbox_rows(bot, lineage.id))
    assert any("Final report" in json.dumps(m.get("blocks")) for m in bot.slack.thread_of("C_ML", card["ts"]))
    assert len(bot.slack.calls_to("conversations.history")) == 2  # the failed one, and the outbox's


def test_waiting_for_a_card_being_posted_is_no_failed_attempt(bot: RealBot) -> None:
    runtime = bot.runtime
    lineage = runtime.jobs.launch("distilbert-spot", actor=Actor("U_ALICE", channel_id="C_ML", via="slack"),
                                  request_id="launch-being-posted")
    notice = events.state_line(lineage.id, f"{lineage.id}-1", "InProgress", "Starting")
    runtime.store.outbox.enqueue(kind=notice["kind"], payload=notice, dedup_key=f"test:{lineage.id}",
                                 lineage_id=lineage.id, channel="C_ML")
    assert bot.deliver() == 0  # its card is being posted (the launch path attaches it)
    [row] = [r for r in outbox_rows(bot, lineage.id) if r.dedup_key == f"test:{lineage.id}"]
    assert row.delivered_at is None and row.attempts == 0 and row.last_error == "card not posted yet"
    assert cards_in_channel(bot) == []

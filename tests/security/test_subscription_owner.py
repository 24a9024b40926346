"""Issue 22, item 8: a /notify subscription belongs to its author. Signed requests into the real bot: Bob's
``/notify on`` in Alice's channel adds his own subscription and leaves hers as it was; only the author or
an admin removes one; the channel still gets each event once. A store made before (revision 0005) keeps its
subscriptions through the upgrade."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import insert, select

from jobs.clock import SystemClock
from jobs.notifications.service import NotificationService
from jobs.permissions import AccessPolicy
from jobs.store.migrate import upgrade
from jobs.store.schema import subscriptions_table, write_transaction
from jobs.store.store import Store
from tests.security.bot_rig import RealBot, real_bot


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[RealBot]:
    with real_bot(tmp_path, trainbot_admins=("U_ADMIN",)) as rig:
        yield rig


def subscriptions(bot: RealBot) -> dict[str, tuple[str, ...]]:
    """The channel C_ML's subscriptions: author -> events."""
    rows = NotificationService(bot.runtime.store, clock=bot.runtime.clock, policy=AccessPolicy()).list("C_ML")
    return {row.created_by: row.events for row in rows}


def test_another_persons_notify_on_adds_their_own_and_leaves_the_authors(bot: RealBot) -> None:
    bot.command("/notify", "on failed gave-up", user="U_ALICE")
    said = bot.command("/notify", "on endpoint-idle", user="U_BOB")["text"]
    assert subscriptions(bot) == {"U_ALICE": ("failed", "gave-up"), "U_BOB": ("endpoint-idle",)}
    assert "it had" not in said and "<@U_ALICE>" in said and "stay as they are" in said, said
    listed = bot.command("/notify", "list", user="U_BOB")["text"]
    assert "failed, gave-up for every job (added by <@U_ALICE>)" in listed, listed


def test_the_author_changes_only_their_own(bot: RealBot) -> None:
    bot.command("/notify", "on failed", user="U_ALICE")
    bot.command("/notify", "on completed", user="U_BOB")
    said = bot.command("/notify", "on failed completed", user="U_ALICE")["text"]
    assert "it had failed" in said
    assert subscriptions(bot) == {"U_ALICE": ("failed", "completed"), "U_BOB": ("completed",)}


def test_only_the_author_or_an_admin_removes_one(bot: RealBot) -> None:
    bot.command("/notify", "on failed", user="U_ALICE")
    bot.command("/notify", "on failed", user="U_BOB")
    said = bot.command("/notify", "off", user="U_BOB")["text"]
    assert "Removed 1" in said and "<@U_ALICE>" in said
    assert subscriptions(bot) == {"U_ALICE": ("failed",)}
    bot.command("/notify", "off", user="U_ADMIN")
    assert subscriptions(bot) == {}


def test_a_channel_two_people_subscribed_gets_each_event_once(bot: RealBot) -> None:
    bot.command("/notify", "on failed", user="U_ALICE")
    bot.command("/notify", "on failed completed", user="U_BOB")
    service = NotificationService(bot.runtime.store, clock=bot.runtime.clock, policy=AccessPolicy())
    assert service.channels_for("failed", None) == ["C_ML"]


def test_subscriptions_made_before_the_upgrade_are_kept(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'trainbot.db'}"
    store = Store(url, clock=SystemClock())
    upgrade(store.engine, "0007")  # the revision before subscriptions changed hands
    now = SystemClock().now()
    with write_transaction(store.engine) as conn:
        conn.execute(insert(subscriptions_table).values(
            channel="C_ML", events="failed,gave-up", filter_kind="", filter_value="", created_by="U_ALICE",
            via="slack", created_at=now, updated_at=now))
    store.migrate()
    service = NotificationService(store, clock=SystemClock(), policy=AccessPolicy())
    from jobs.records import Actor

    service.subscribe(Actor("U_BOB", channel_id="C_ML", via="slack"), "C_ML", ("endpoint-idle",),
                      service.list("C_ML")[0].filter)
    with store.engine.connect() as conn:
        rows = conn.execute(select(subscriptions_table.c.created_by, subscriptions_table.c.events)).all()
    assert sorted(map(tuple, rows)) == [("U_ALICE", "failed,gave-up"), ("U_BOB", "endpoint-idle")]
    store.dispose()

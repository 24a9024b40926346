"""/schedule through the chat-agnostic handler, on the real services and a recording chat."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from handlers.context import CommandContext, Services
from handlers.schedule import HELP, handle_schedule
from jobs.records import Actor
from tests.jobs.test_schedules import TRAIN, World, make_world

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")


class RecordingChat:
    """The Chat port, keeping what was said."""

    def __init__(self) -> None:
        self.ephemeral: list[tuple[str, str, str]] = []

    def post(self, channel: str, text: str, *, blocks: Any = None, thread_ts: str | None = None) -> str:
        return "1.0"

    def update(self, channel: str, ts: str, text: str, *, blocks: Any = None) -> None: ...

    def post_ephemeral(self, channel: str, user: str, text: str, *, blocks: Any = None) -> None:
        self.ephemeral.append((channel, user, text))

    def dm(self, user: str, text: str, *, blocks: Any = None) -> None: ...

    def upload_file(self, channel: str, path: Path, *, title: str, thread_ts: str | None = None) -> None: ...


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path / "t.db")


def context(world: World, chat: RecordingChat, *, with_schedules: bool = True) -> CommandContext:
    services = Services(jobs=world.jobs, store=world.store, settings=world.jobs._settings,  # noqa: SLF001
                        clock=world.clock, schedules=world.schedules if with_schedules else None)
    return CommandContext(actor=ALICE, channel_id="C_ML", services=services, chat=chat)  # type: ignore[arg-type]


def test_add_list_pause_resume_remove(world: World) -> None:
    ctx = context(world, RecordingChat())
    reply = handle_schedule(ctx, f'add nightly cron="0 2 * * *" tz=Europe/Berlin {TRAIN} data=s3://bkt/fresh/')
    assert not reply.ephemeral and "nightly added" in reply.text and "s3://bkt/fresh/" in reply.text
    assert "2026-03-02 01:00 UTC" in reply.text
    assert world.schedules.get("nightly").channel == "C_ML"
    listing = handle_schedule(ctx, "list")
    assert "nightly" in listing.text and "Europe/Berlin" in listing.text and listing.blocks
    assert handle_schedule(ctx, "pause nightly").text == "Schedule nightly paused."
    assert "next run" in handle_schedule(ctx, "resume nightly").text
    assert handle_schedule(ctx, "remove nightly").text == "Schedule nightly removed."
    assert world.schedules.list() == []


@pytest.mark.parametrize(("text", "words"), [
    (f'add nightly cron="0 99 * * *" {TRAIN}', "not a cron expression"),
    (f'add nightly cron="0 2 * * *" tz=Nowhere/Land {TRAIN}', "not a time zone"),
    ('add nightly cron="0 2 * * *" distilbert-spot instances=lots', "instance"),
    ("pause ghost", "no schedule named 'ghost'"),
    ("run ghost", "no schedule named 'ghost'"),
    ("launch nightly", "Unknown /schedule command"),
    ("pause", "Usage: /schedule pause NAME"),
])
def test_errors_are_one_ephemeral_sentence(world: World, text: str, words: str) -> None:
    reply = handle_schedule(context(world, RecordingChat()), text)
    assert reply.ephemeral and words in reply.text and "\n" not in reply.text
    assert world.schedules.list() == []


def test_run_launches_now_and_tells_the_person(world: World) -> None:
    chat = RecordingChat()
    ctx = context(world, chat)
    handle_schedule(ctx, f'add nightly cron="0 2 * * *" {TRAIN}')
    reply = handle_schedule(ctx, "run nightly")
    assert "Starting schedule nightly" in reply.text
    (lineage,) = world.store.list_lineages(schedule="nightly")
    assert chat.ephemeral == [("C_ML", "U_ALICE", f"Schedule nightly started {lineage.id}.")]
    handle_schedule(ctx, "run nightly")  # the first is still running: refused, said in one sentence
    assert "still running" in chat.ephemeral[-1][2] and len(world.store.list_lineages(schedule="nightly")) == 1


def test_help_and_a_bot_without_schedules(world: World) -> None:
    assert handle_schedule(context(world, RecordingChat()), "help").text == HELP
    assert "not set up" in handle_schedule(context(world, RecordingChat(), with_schedules=False), "list").text

"""Outbox delivery: every event kind rendered into the lineage's thread, the card redrawn, DMs on failure,
the report PNG uploaded; a chat outage defers (never drops) and a retry does not repeat what went out."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from handlers.notify import deliver_due
from jobs.lifecycle import events
from jobs.lineage import Lineage
from tests.handlers.fakes import ALICE, CHANNEL, World, make_world, walk_limits

CARD_TS = "77.0001"


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def launched(world: World, *, card: bool = True) -> Lineage:
    lineage = world.jobs.launch("distilbert-spot", actor=ALICE)
    if card:
        world.jobs.attach_message(lineage.id, CHANNEL, CARD_TS)
    return world.jobs.get(lineage.id)


def enqueue(world: World, lineage: Lineage, payload: dict, key: str | None = None) -> None:
    world.store.outbox.enqueue(kind=payload["kind"], payload=payload, dedup_key=key or payload["kind"],
                        lineage_id=lineage.id, channel=lineage.channel)


def report(lineage: Lineage) -> dict:
    return {"lineage_id": lineage.id, "status": "completed", "metrics": {"eval_accuracy": 0.91, "train_loss": 0.2},
            "headline": {"accuracy": 0.91}, "cost_usd": 1.23, "on_demand_usd": 4.1, "spot_savings": "70%",
            "training_seconds": 3600, "attempts": [{}, {}],
            "links": {"job": "https://console.example/job", "logs": "https://console.example/logs",
                      "model": "s3://bkt/model.tar.gz"}}


def all_kinds(lineage: Lineage, png: Path) -> list[dict]:
    job = f"{lineage.id}-1"
    return [
        events.state_line(lineage.id, job, "InProgress", "Training"),
        events.interrupted(lineage.id, job, "ml.p3.2xlarge"),
        events.relaunched(lineage.id, f"{lineage.id}-2", attempt=2, instance_type="ml.p3.2xlarge", spot=True,
                          backoff_seconds=30, checkpoint_uri="s3://bkt/ck", resumed_from_step=40),
        events.failed(lineage.id, job, "AlgorithmError: boom", [f"line {i}" for i in range(60)]),
        events.gave_up(lineage.id, job, "no capacity", 5),
        events.completed(lineage.id, job, report(lineage), str(png)),
        events.stopped(lineage.id, job, "by U_ALICE"),
    ]


def test_each_kind_goes_into_the_thread_in_order_and_the_card_is_redrawn_once(world: World, tmp_path: Path) -> None:
    lineage = launched(world)
    png = tmp_path / "curve.png"
    png.write_bytes(b"\x89PNG fake")
    for index, payload in enumerate(all_kinds(lineage, png)):
        enqueue(world, lineage, payload, key=str(index))
    assert deliver_due(world.services, world.chat) == 7
    posts = world.chat.of("post")
    assert len(posts) == 7 and all(p.thread_ts == CARD_TS and p.channel == CHANNEL for p in posts)
    for post in posts:
        walk_limits(post.blocks or [])
    failed = json.dumps(posts[3].blocks)  # one lineage's thread reads in the order things happened
    assert "line 59" in failed and "AlgorithmError" in failed and "fake://logs" not in failed
    completed = json.dumps(posts[5].blocks)
    assert "Final report" in completed and "70%" in completed and "$1.23" in completed
    assert "https://console.example/logs" in completed and "0.91" in completed
    update, = world.chat.of("update")  # seven changes to one card: one redraw, with its newest state
    assert update.ts == CARD_TS and update.channel == CHANNEL and lineage.id in update.text
    dms = world.chat.of("dm")
    assert [d.user for d in dms] == ["U_ALICE", "U_ALICE"] and "failed" in dms[0].text
    upload, = world.chat.of("upload")
    assert upload.thread_ts == CARD_TS and upload.extra["path"] == png
    assert world.store.outbox.due_notifications() == []


def test_endings_go_before_other_jobs_changes_and_bring_their_own_thread_along(world: World) -> None:
    quiet, ending, other = launched(world), launched(world), launched(world)
    enqueue(world, quiet, events.state_line(quiet.id, f"{quiet.id}-1", "InProgress", "Training"), key="q1")
    enqueue(world, ending, events.state_line(ending.id, f"{ending.id}-1", "InProgress", "Uploading"), key="e1")
    enqueue(world, other, events.interrupted(other.id, f"{other.id}-1", "ml.p3.2xlarge"), key="o1")
    enqueue(world, ending, events.failed(ending.id, f"{ending.id}-1", "AlgorithmError: boom", ["x"]), key="e2")
    enqueue(world, quiet, events.state_line(quiet.id, f"{quiet.id}-1", "InProgress", "Uploading"), key="q2")
    assert deliver_due(world.services, world.chat) == 5
    said = [(p.text.split()[0].rstrip(":"), "failed" if "AlgorithmError" in p.text else "") for p in world.chat.of("post")]
    assert said == [(f"{ending.id}-1", ""), (f"{ending.id}-1", "failed"),  # the ending, with its state line
                    (f"{quiet.id}-1", ""), (f"{other.id}-1", ""), (f"{quiet.id}-1", "")]


def test_a_chat_outage_defers_and_never_drops(world: World) -> None:
    lineage = launched(world)
    enqueue(world, lineage, events.stopped(lineage.id, f"{lineage.id}-1"))
    world.chat.failing.add("post")
    assert deliver_due(world.services, world.chat) == 0
    assert world.store.outbox.due_notifications() == []  # deferred into the future
    world.chat.failing.clear()
    world.clock.advance(3600)
    assert deliver_due(world.services, world.chat) == 1
    assert len(world.chat.of("post")) == 1


def upload_fails_once(world: World, tmp_path: Path) -> None:
    """A completed job's report whose post went out and whose plot upload failed: deferred, half done."""
    lineage = launched(world)
    png = tmp_path / "curve.png"
    png.write_bytes(b"png")
    enqueue(world, lineage, events.completed(lineage.id, f"{lineage.id}-1", report(lineage), str(png)))
    world.chat.failing.add("upload")
    assert deliver_due(world.services, world.chat) == 0
    world.chat.failing.clear()


def test_a_retry_does_not_repeat_what_already_went_out(world: World, tmp_path: Path) -> None:
    upload_fails_once(world, tmp_path)
    world.clock.advance(3600)
    assert deliver_due(world.services, world.chat) == 1
    assert len(world.chat.of("post")) == 1 and len(world.chat.of("upload")) == 1


def test_updates_wait_for_a_card_being_posted_then_make_one(world: World) -> None:
    lineage = launched(world, card=False)
    enqueue(world, lineage, events.state_line(lineage.id, f"{lineage.id}-1", "InProgress", "Training"))
    assert deliver_due(world.services, world.chat) == 0 and world.chat.said == []
    world.clock.advance(600)
    assert deliver_due(world.services, world.chat) == 1
    card, reply = world.chat.of("post")
    assert card.thread_ts is None and lineage.id in card.text and reply.thread_ts == card.ts
    assert world.jobs.get(lineage.id).message_ts == card.ts


def test_a_job_launched_outside_chat_is_not_posted(world: World) -> None:
    from jobs.records import Actor

    lineage = world.jobs.launch("distilbert-spot", actor=Actor("cli-user", via="cli"))
    enqueue(world, lineage, events.stopped(lineage.id, f"{lineage.id}-1"))
    assert deliver_due(world.services, world.chat) == 1 and world.chat.said == []


def test_huge_log_tail_is_cut_with_a_link(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.backend.console_links = lambda job: {"logs": "https://console.example/logs/x"}  # type: ignore[method-assign]
    lineage = launched(world)
    enqueue(world, lineage, events.failed(lineage.id, f"{lineage.id}-1", "x" * 5000, ["y" * 900] * 40))
    deliver_due(world.services, world.chat)
    post = world.chat.of("post")[0]
    walk_limits(post.blocks or [])
    flat = json.dumps(post.blocks)
    assert "earlier lines cut" in flat and "https://console.example/logs/x" in flat
    assert len(world.chat.of("dm")[0].text) <= 3000


def test_a_deferred_notification_leaves_no_progress_behind_once_delivered(world: World, tmp_path: Path) -> None:
    # Issue 31: a deferral keeps which steps went out (meta "notify:<id>"); delivered, that row is removed, so
    # the meta table does not grow with every chat outage the bot has ever seen.
    upload_fails_once(world, tmp_path)
    progress = [key for key in meta_keys(tmp_path) if key.startswith("notify:")]
    assert len(progress) == 1  # the post went out before the upload failed

    world.clock.advance(3600)
    assert deliver_due(world.services, world.chat) == 1
    assert [key for key in meta_keys(tmp_path) if key.startswith("notify:")] == []


def meta_keys(tmp_path: Path) -> list[str]:
    with sqlite3.connect(tmp_path / "bot.db") as db:  # the world's store (make_world in tests/handlers/fakes.py)
        return [row[0] for row in db.execute("SELECT key FROM meta")]

"""The App Home's content and its refresher, and /logs with the Logs button, on a real store and the scripted
backend (the Slack and console surfaces are driven in tests/bot)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from handlers import cards, router, texts
from handlers.blocks import buttons_in
from handlers.home import HomeRefresher, home_blocks
from jobs import lineage as moves
from jobs.budget import SpendLedger
from jobs.errors import CapacityError
from jobs.lifecycle.progress import LiveProgress
from jobs.lineage import LineageStatus
from jobs.planning.prices import usd
from jobs.store.runs import RunHistory
from tests.handlers.fakes import ALICE, BOB, CHANNEL, World, make_world, walk_limits
from tests.jobs.fakes import ScriptedBackend


class PublishingChat:
    """A HomeChat that keeps what it published, per user."""

    def __init__(self) -> None:
        self.published: list[tuple[str, dict[str, Any]]] = []

    def publish_home(self, user: str, view: dict[str, Any]) -> None:
        self.published.append((user, view))


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path, trainbot_daily_budget_usd=20_000.0, trainbot_admins=("U_ADMIN",))


def flat(blocks: list[dict]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def end(world: World, lineage_id: str, status: LineageStatus, *, billable: int = 3600) -> None:
    """What the watcher records when the backend says the job completed or failed."""
    job = world.jobs.get(lineage_id).attempts[-1].job_name
    completed = status is LineageStatus.COMPLETED
    world.store.transition_attempt(job, moves.ATTEMPT_COMPLETED if completed else moves.ATTEMPT_FAILED,
                                   billable_seconds=billable, training_seconds=billable)
    assert world.store.transition_lineage(lineage_id, moves.COMPLETE if completed else moves.FAIL)


# ---------------------------------------------------------------- the home


def test_the_home_names_the_persons_jobs_and_nobody_elses(world: World) -> None:
    running = world.jobs.launch("distilbert-spot", actor=ALICE)
    done = world.jobs.launch("bert-squad instances=1", actor=ALICE)
    end(world, done.id, LineageStatus.COMPLETED)
    bobs = world.jobs.launch("roberta-mnli instances=2", actor=BOB)
    world.clock.advance(1800)
    blocks = home_blocks(world.services, ALICE)
    walk_limits(blocks, max_blocks=100)
    text = flat(blocks)
    assert running.id in text and done.id in text and bobs.id not in text
    assert "Your running jobs" in text and "Your recent jobs" in text
    stop, = [b for b in cards_buttons(blocks) if b["action_id"] == cards.ACTION_STOP]
    assert stop["value"] == running.id
    # distilbert-spot: half an hour of 1 x ml.p3.2xlarge at the spot price ($1.15/h); bert-squad: one billed
    # hour of 1 x ml.p3.16xlarge; Bob's roberta-mnli: half an hour of 2 x ml.p3.16xlarge, in the team's figure.
    assert "$0.57 so far" in text and "$28.15 \u00b7 ended" in text
    assert "Today $56.88 \u00b7 this week $56.88" in text
    committed = SpendLedger.from_settings(world.store, world.clock, world.settings).spent_today(world.clock.now())
    assert f"could cost up to {usd(committed)} of the $20,000.00 daily budget ({committed / 200:.0f}%)" in text
    assert "No endpoints are up." in text and "No schedules." in text
    assert bobs.id in flat(home_blocks(world.services, BOB)) and running.id not in flat(home_blocks(world.services, BOB))


def test_a_running_jobs_step_is_the_live_progress_the_watcher_kept(world: World) -> None:
    running = world.jobs.launch("distilbert-spot", actor=ALICE)
    before = flat(home_blocks(world.services, ALICE))
    assert running.id in before and "step " not in before  # no progress read yet: no step shown
    live = LiveProgress(f"{running.id}-1", step=120, total=400, loss=0.5, eta_seconds=60, cost_so_far_usd=0.1)
    RunHistory(world.store, world.clock).set_progress({running.id: live.to_json()})
    calls = len(world.backend.calls)
    assert "· step 120/400" in flat(home_blocks(world.services, ALICE))
    assert len(world.backend.calls) == calls  # drawn from the store: no backend call per job


def cards_buttons(blocks: list[dict]) -> list[dict]:
    return buttons_in(blocks)


def test_home_command_answers_with_the_same_blocks(world: World) -> None:
    world.jobs.launch("distilbert-spot", actor=ALICE)
    reply = router.run_command(world.ctx(), "home", "")
    assert reply.blocks == home_blocks(world.services, ALICE)


def test_the_refresher_publishes_on_open_then_only_when_the_persons_jobs_change(world: World) -> None:
    chat = PublishingChat()
    now = [0.0]
    refresher = HomeRefresher(world.services, chat, min_interval=10.0, monotonic=lambda: now[0])
    lineage = world.jobs.launch("distilbert-spot", actor=ALICE)
    assert refresher.opened(ALICE)
    assert [user for user, _ in chat.published] == ["U_ALICE"]
    assert refresher.tick() == []  # nothing changed
    world.jobs.launch("distilbert-spot", actor=BOB)  # someone else's job: not a reason
    now[0] = 20.0
    assert refresher.tick() == []
    end(world, lineage.id, LineageStatus.FAILED)
    now[0] = 25.0  # a state change, 25 s after the last publish: due
    assert refresher.tick() == ["U_ALICE"]
    world.jobs.stop(world.jobs.launch("distilbert-spot", actor=ALICE).id, actor=ALICE)
    now[0] = 30.0  # changed again, but within 10 s of the last publish: debounced
    assert refresher.tick() == []
    now[0] = 36.0
    assert refresher.tick() == ["U_ALICE"] and len(chat.published) == 3
    assert chat.published[-1][1]["type"] == "home"


# ---------------------------------------------------------------- /logs


def failed_job(world: World, lines: list[str]) -> str:
    lineage = world.jobs.launch("distilbert-spot", actor=ALICE)
    world.jobs.attach_message(lineage.id, CHANNEL, "77.0001")
    world.backend.set_logs(f"{lineage.id}-1", lines)
    end(world, lineage.id, LineageStatus.FAILED)
    return lineage.id


def test_logs_answers_at_once_and_sends_the_lines_to_the_asker(world: World) -> None:
    lineage_id = failed_job(world, [f"line {i}" for i in range(100)])
    reply = router.run_command(world.ctx(), "logs", f"{lineage_id} 5")
    assert reply.text == f"Reading the last 5 lines of {lineage_id}-1's log…"
    told, = world.chat.of("ephemeral")
    assert told.user == "U_ALICE" and "line 95" in flat(told.blocks or []) and "line 94" not in flat(told.blocks or [])
    assert f"{lineage_id}-1" in flat(told.blocks or [])


def test_long_logs_go_up_as_a_snippet_into_the_jobs_thread(world: World) -> None:
    lineage_id = failed_job(world, [f"{i:04d} " + "x" * 120 for i in range(400)])
    router.run_command(world.ctx(BOB), "logs", lineage_id)
    upload, = world.chat.of("upload")
    assert upload.thread_ts == "77.0001" and upload.channel == CHANNEL
    content = upload.extra["path"].read_text()
    assert "0360 " in content and "0359 " not in content  # the last 40 lines
    told, = world.chat.of("ephemeral")
    assert "in the file posted in the job's thread" in told.text


def test_the_logs_button_is_on_a_failed_card_and_bad_requests_are_one_sentence(world: World) -> None:
    lineage_id = failed_job(world, ["Traceback", "ValueError: bad label 7"])
    _, card = cards.launch_card(world.jobs.get(lineage_id))
    logs_button, = [b for b in cards_buttons(card) if b["action_id"] == cards.ACTION_LOGS]
    assert router.run_action(world.ctx(), cards.ACTION_LOGS, logs_button["value"]) is not None
    assert "ValueError: bad label 7" in flat(world.chat.of("ephemeral")[0].blocks or [])
    assert router.run_command(world.ctx(), "logs", "").text.startswith("Usage: /logs JOB [N]")
    assert "from 1 to 500" in router.run_command(world.ctx(), "logs", f"{lineage_id} 9999").text
    assert "There is no job" in router.run_command(world.ctx(), "logs", "nope-1").text
    stranger = make_world(world.settings.trainbot_home / "x", trainbot_allowed_users=("U_ALICE",))
    assert "not allowed" in router.run_command(stranger.ctx(BOB), "logs", "anything").text


def test_a_job_of_another_backend_or_never_started_is_named_back(world: World) -> None:
    world.backend.fail_launch(CapacityError("no ml.p3.2xlarge capacity"))
    with pytest.raises(CapacityError):
        world.jobs.launch("distilbert-spot", actor=ALICE)
    refused = world.jobs.list()[0]
    assert "never started (no ml.p3.2xlarge capacity)" in router.run_command(world.ctx(), "logs", refused.id).text
    lineage = world.jobs.launch("distilbert-spot", actor=ALICE)
    elsewhere = dataclasses.replace(world.services, backend=ScriptedBackend(name="sagemaker"))
    ctx = dataclasses.replace(world.ctx(), services=elsewhere)
    assert "TRAINBOT_BACKEND=fake" in router.run_command(ctx, "logs", lineage.id).text
    assert world.chat.of("ephemeral") == []


def test_a_local_jobs_card_prices_it_as_sagemaker_would_bill_it(world: World) -> None:
    from dataclasses import replace

    lineage_id = world.jobs.launch("distilbert-spot", actor=ALICE).id
    end(world, lineage_id, LineageStatus.COMPLETED, billable=600)
    ran_here = replace(world.jobs.get(lineage_id), backend="local")
    _, card = cards.launch_card(ran_here)
    # Said once, in the card's context line; the cost itself is a plain amount (issue 35.11).
    assert flat(card).count("free here") == 1 and texts.LOCAL_PRICES_NOTE in flat(card)
    assert "on SageMaker (free here)" not in flat(card)
    _, card = cards.launch_card(world.jobs.get(lineage_id))
    assert "free here" not in flat(card)

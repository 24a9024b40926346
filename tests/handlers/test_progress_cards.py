"""Cards that say where a job is: the forecast on the launch card, live progress redrawn in place when it
moves, and a final report that reads like a summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from handlers import cards
from handlers.chat import ChatBusy
from handlers.notify import deliver_due
from handlers.pacing import redraw_progress, request_card
from jobs.lifecycle import events
from jobs.lifecycle.progress import ProgressTracker
from jobs.records import Progress
from tests.handlers.fakes import ALICE, CHANNEL, RecordingChat, World, make_world, walk_limits

CARD_TS = "77.0001"


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path, trainbot_progress_seconds=60)


def card_text(blocks: list[dict] | None) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def running(world: World, text: str = "bert-squad") -> str:
    lineage = world.jobs.launch(text, actor=ALICE)
    world.jobs.attach_message(lineage.id, CHANNEL, CARD_TS)
    return lineage.id


def test_the_launch_card_shows_the_forecast(world: World) -> None:
    lineage_id = running(world)
    deliver_due(world.services, world.chat)  # nothing to deliver, no progress yet: nothing redrawn
    assert world.chat.of("update") == []
    from handlers.live import job_card

    _, blocks = job_card(world.services, world.jobs.get(lineage_id))
    walk_limits(blocks)
    flat = card_text(blocks)
    assert "Forecast" in flat and "about 9 min, about $5.89" in flat and "Worst case" in flat


def test_progress_redraws_the_card_once_per_move(world: World) -> None:
    lineage_id = running(world)
    job = f"{lineage_id}-1"
    tracker = ProgressTracker(world.store, world.backend, world.clock, world.settings)
    world.backend.set_progress(job, Progress(step=40, loss=0.75, steps_per_second=2.0))
    tracker.poll_once()
    deliver_due(world.services, world.chat)
    [update] = world.chat.of("update")
    assert (update.channel, update.ts) == (CHANNEL, CARD_TS)
    walk_limits(update.blocks or [])
    flat = card_text(update.blocks)
    assert "Progress" in flat and "step 40/100 · loss 0.7500 · ETA 30 s" in flat
    deliver_due(world.services, world.chat)
    assert len(world.chat.of("update")) == 1  # shown already: not redrawn again
    world.clock.advance(60)
    world.backend.set_progress(job, Progress(step=80, loss=0.5, steps_per_second=2.0))
    tracker.poll_once()
    deliver_due(world.services, world.chat)
    assert "step 80/100" in card_text(world.chat.of("update")[-1].blocks)


def test_a_chat_outage_leaves_the_redraw_for_the_next_pass(world: World) -> None:
    lineage_id = running(world)
    tracker = ProgressTracker(world.store, world.backend, world.clock, world.settings)
    world.backend.set_progress(f"{lineage_id}-1", Progress(step=10, loss=1.0))
    tracker.poll_once()
    world.chat.failing.add("update")
    deliver_due(world.services, world.chat)
    world.chat.failing.clear()
    deliver_due(world.services, world.chat)
    assert "step 10/100" in card_text(world.chat.of("update")[-1].blocks)


def test_the_final_report_leads_with_the_task_and_folds_the_trainer() -> None:
    report = {
        "lineage_id": "qa-1", "status": "completed",
        "metrics": {"eval_exact_match": 80.1, "eval_f1": 87.9, "eval_loss": 1.02, "total_flos": 1.2e17,
                    "train_steps_per_second": 2.1, "epoch": 2.0, "learning_rate": 3e-5},
        "headline": {"exact_match": 80.1, "f1": 87.9, "loss": 1.02},
        "details": {"total_flos": 1.2e17, "train_steps_per_second": 2.1, "epoch": 2.0, "learning_rate": 3e-5},
        "forecast_vs_actual": "forecast 28 min / $24, took 31 min / $29",
        "cost_usd": 29.1, "on_demand_usd": 29.1, "spot_savings": None, "training_seconds": 1700, "attempts": [{}],
        "links": {},
    }
    blocks = cards.report_blocks("qa-1", report, "qa-1 completed, cost $29.10.")
    walk_limits(blocks)
    sections = [json.dumps(b, ensure_ascii=False) for b in blocks]
    metrics_at = next(i for i, b in enumerate(sections) if "exact_match" in b)
    forecast_at = next(i for i, b in enumerate(sections) if "forecast 28 min / $24, took 31 min / $29" in b)
    folded_at = next(i for i, b in enumerate(sections) if "total_flos" in b)
    assert metrics_at < forecast_at < folded_at == len(blocks) - 1
    assert blocks[folded_at]["type"] == "context"  # small print, last
    assert "total_flos" not in "".join(sections[:folded_at])


def test_an_own_scripts_report_leads_with_its_own_metrics() -> None:
    report = {
        "lineage_id": "own-1", "status": "completed", "task": None,
        "metrics": {"bleu": 31.5, "eval_loss": 0.82}, "headline": {}, "details": {},
        "cost_usd": 3.1, "on_demand_usd": 3.1, "spot_savings": None, "training_seconds": 600, "attempts": [{}],
        "links": {}, "code": "https://git.example/team/mt@0123456 (main)",
    }
    blocks = cards.report_blocks("own-1", report, "own-1 completed, cost $3.10.")
    walk_limits(blocks)
    text = json.dumps(blocks, ensure_ascii=False)
    assert "bleu" in text and "31.5" in text and "eval_loss" in text


class RationedChat(RecordingChat):
    """A chat whose rate limits allow ``per_pass`` redraws, then answer busy until ``refill()``."""

    def __init__(self, per_pass: int) -> None:
        super().__init__()
        self.per_pass = per_pass
        self.left = per_pass

    def refill(self) -> None:
        self.left = self.per_pass

    def update(self, channel: str, ts: str, text: str, *, blocks: list[dict] | None = None) -> None:
        if self.left <= 0:
            raise ChatBusy("chat.update is rate limited", retry_after=1.2)
        self.left -= 1
        super().update(channel, ts, text, blocks=blocks)


def test_under_load_each_cards_progress_comes_round_in_turn_and_says_how_fresh_it_is(tmp_path: Path) -> None:
    chat = RationedChat(per_pass=2)
    world = make_world(tmp_path, chat=chat, trainbot_progress_seconds=60)
    ids = [running(world) for _ in range(6)]
    tracker = ProgressTracker(world.store, world.backend, world.clock, world.settings)
    shown: list[str] = []
    for minute in range(2):
        for n, lineage_id in enumerate(ids):
            world.backend.set_progress(f"{lineage_id}-1", Progress(step=10 * (minute + 1) + n, loss=0.5))
        tracker.poll_once(force=True)
        polled_at = int(world.clock.now().timestamp())
        for _ in range(3):  # three passes of two redraws: every card once, none twice
            chat.refill()
            redraw_progress(world.services, world.chat)
            world.clock.advance(20)
        drawn = chat.of("update")[len(shown):]
        shown += [next(i for i in ids if i in u.text) for u in drawn]
        assert all(f"as of <!date^{polled_at}^" in card_text(u.blocks) for u in drawn)
    assert sorted(shown[:6]) == sorted(ids) and shown[6:] == shown[:6]  # the same turns, round again


def test_a_card_redrawn_for_a_change_shows_its_progress_so_it_is_not_redrawn_again_for_it(world: World) -> None:
    lineage_id = running(world)
    tracker = ProgressTracker(world.store, world.backend, world.clock, world.settings)
    world.backend.set_progress(f"{lineage_id}-1", Progress(step=40, loss=0.75))
    tracker.poll_once()
    request_card(world.services, lineage_id, events.STATE)
    deliver_due(world.services, world.chat)
    update, = world.chat.of("update")
    assert "step 40/100" in card_text(update.blocks)

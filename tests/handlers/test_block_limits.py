"""Issue 26, item 2: every message and view the bot draws, built at its largest, fits its surface.

Each builder is fed the most it can be given (70 jobs, 40 attempts with long reasons, 30 endpoints and
schedules, a report of 500 metrics, huge hyperparameters and log tails) and what it returns is checked the
way Slack checks it (tests/support/block_kit.py: slack_sdk's models plus the limits they do not enforce).
A list that does not fit says how many more there are and where to see them, instead of being cut.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from handlers import blocks as bk
from handlers import cards, notify, router, texts, train
from handlers.home import handle_home, home_blocks, home_view
from handlers.logs import log_blocks
from jobs.endpoints.port import EndpointStatus
from jobs.endpoints.store import Endpoint
from jobs.lifecycle import events
from jobs.lifecycle.progress import LiveProgress
from jobs.lineage import LineageStatus
from jobs.planning.grammar import parse_command
from jobs.planning.pricing import estimate
from jobs.records import Actor
from jobs.reporting.logs import HostLog, JobLogs
from jobs.schedules.store import Schedule
from tests.handlers.fakes import ALICE, World, free_text_arguments, make_world
from tests.support.block_kit import assert_message_fits, assert_view_fits, message_problems

HUGE = "é<&>" * 2500


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path, trainbot_admins=("U_ALICE",))


def endpoint(world: World, name: str, lineage_id: str) -> Endpoint:
    now = world.clock.now()
    return Endpoint(
        name=name, lineage_id=lineage_id, job_name=f"{lineage_id}-1", backend="sagemaker",
        status=EndpointStatus.IN_SERVICE, remote_status="InService", failure_reason="", model_name=name,
        model_data="s3://bkt/model.tar.gz", task="question-answering", framework="", framework_note="",
        instance_type="ml.g5.xlarge", instance_count=1, serverless=False, memory_mb=0, deployed_by="U_ALICE",
        channel="C_ML", invocations=0, created_at=now, updated_at=now, ready_at=now, ended_at=None,
        last_invoked_at=None)


def schedule(world: World, index: int) -> Schedule:
    now = world.clock.now()
    return Schedule(
        name=f"nightly-{index:02d}-" + "n" * 50, cron="0 2 * * *", tz="Europe/Berlin", text="bert-squad",
        channel="C_ML", created_by="U_ALICE", via="slack", paused=False, overlap="skip", regression_points=1.0,
        deploy_if_better=False, train_data=None, dataset_revision=None, queued_for=None, created_at=now,
        updated_at=now, next_run=now + timedelta(hours=index))


@dataclasses.dataclass
class Listing:
    items: list[Any]

    def list(self) -> list[Any]:
        return self.items


def crowded(world: World, *, running: int, ended: int, endpoints: int, schedules: int) -> World:
    """Alice's home with this many running and ended jobs, live endpoints (of her jobs) and schedules."""
    launched = [world.jobs.launch("distilbert-spot", actor=ALICE) for _ in range(running + ended)]
    for lineage in launched[running:]:
        world.store.transition_lineage(lineage.id, cards_move(LineageStatus.FAILED))
    live = [endpoint(world, f"endpoint-{i:02d}", launched[i % len(launched)].id) for i in range(endpoints)]
    services = dataclasses.replace(world.services, endpoints=Listing(live),
                                   schedules=Listing([schedule(world, i) for i in range(schedules)]))
    return dataclasses.replace(world, services=services)


def cards_move(status: LineageStatus) -> Any:
    from jobs import lineage as moves

    return {LineageStatus.FAILED: moves.FAIL, LineageStatus.COMPLETED: moves.COMPLETE}[status]


# ---------------------------------------------------------------- /home: a message is not a Home tab


def test_home_as_a_message_with_ten_jobs_and_ten_endpoints_summarises_within_50_blocks(world: World) -> None:
    """The issue's case: /home reused the tab's 100-block builder and posted 56 blocks."""
    full = crowded(world, running=10, ended=6, endpoints=10, schedules=20)
    reply = handle_home(full.ctx(), "")
    assert_message_fits(reply.blocks, reply.text)
    flat = json.dumps(reply.blocks, ensure_ascii=False)
    assert "more cut" not in flat  # summarised, never cut
    assert "and 2 more running: `/jobs active` lists them all." in flat
    assert "and 2 more endpoints: the trainbot Home tab shows up to 10." in flat
    stops = [b for b in bk.buttons_in(reply.blocks) if b["action_id"] == cards.ACTION_STOP]
    assert len(stops) == 8


def test_the_home_tab_shows_ten_of_each_and_fits_a_view(world: World) -> None:
    full = crowded(world, running=30, ended=30, endpoints=30, schedules=30)
    view = home_view(full.services, ALICE)
    assert_view_fits(view)
    flat = json.dumps(view, ensure_ascii=False)
    assert "and 20 more running" in flat and "and 20 more endpoints." in flat and "more cut" not in flat
    assert len([b for b in bk.buttons_in(view["blocks"]) if b["action_id"] == cards.ACTION_STOP]) == 10


@pytest.mark.parametrize(("running", "endpoints"), [(0, 30), (30, 0), (30, 30), (1, 1), (9, 9)])
def test_home_at_any_mix_fits_both_surfaces(world: World, running: int, endpoints: int) -> None:
    full = crowded(world, running=running, ended=5, endpoints=endpoints, schedules=30)
    for surface in (bk.MESSAGE, bk.HOME):
        blocks = home_blocks(full.services, ALICE, surface=surface)
        problems = message_problems(blocks) if surface is bk.MESSAGE else []
        assert not problems and len(blocks) <= surface.max_blocks
        assert "more cut" not in json.dumps(blocks)
    assert_view_fits(home_view(full.services, ALICE))


# ---------------------------------------------------------------- every other message, at its largest


def test_the_plan_card_at_its_largest(world: World) -> None:
    text = "bert-squad spot=yes checkpoint_minutes=0.5 " + " ".join(
        f"hp.{name}={'v' * 2400}" for name in free_text_arguments()[:80])
    spec = parse_command(text)
    for in_dm in (False, True):
        card = cards.plan_card(spec, estimate(spec), command="/train " + text + HUGE, value='{"r":"x"}',
                               scaling_note=HUGE, max_job_usd=10.0, spot_pct_if_on=70.0, in_dm=in_dm)
        assert_message_fits(card, cards.plan_fallback(spec, estimate(spec)))


def test_the_plan_reply_with_a_command_too_long_for_a_button(world: World) -> None:
    text = "bert-squad " + " ".join(f"hp.{name}={'v' * 2400}" for name in free_text_arguments()[:20])
    reply = train.plan_reply(world.ctx(), text)
    assert_message_fits(reply.blocks, reply.text)


def test_launch_cards_lists_details_and_refusals_at_their_largest(world: World) -> None:
    actor = Actor("U" + "x" * 300, channel_id="C1", via="slack")
    lineages = [world.jobs.launch("distilbert-spot", actor=actor) for _ in range(70)]
    first = lineages[0]
    for number in range(2, 42):
        world.store.add_attempt(first.id, number=number, instance_type="ml.p3.2xlarge", spot=True)
    first = world.store.get_lineage(first.id)
    live = LiveProgress(job_name="j" * 300, step=10**9, total=10**9, loss=1e300, eta_seconds=1e12,
                        cost_so_far_usd=1e12)
    for built in (cards.launch_card(first, live=live), cards.job_detail(first, live=live),
                  cards.jobs_list(world.jobs.list(limit=100)), cards.refused_card(HUGE, HUGE),
                  cards.launching_card(HUGE)):
        fallback, blocks = built
        assert_message_fits(blocks, fallback)


def test_reports_and_notifications_at_their_largest(world: World) -> None:
    report = {"metrics": {f"metric_{i}" * 20: 1.0 / (i + 1) for i in range(500)}, "cost_usd": 1e9,
              "headline": {f"head_{i}" * 30: i for i in range(40)}, "details": {f"d{i}" * 50: i for i in range(500)},
              "links": {f"l{i}": "https://x.example/" + "p" * 3000 for i in range(60)}, "spot_savings": "9" * 5000,
              "forecast_vs_actual": HUGE, "code": HUGE, "attempts": [{}] * 30, "training_seconds": 10**9}
    assert_message_fits(cards.report_blocks("x" * 500, report, HUGE))
    for kind in events.KINDS:
        text, blocks = notify.render(world.services, kind, {"lineage_id": "x" * 300, "text": HUGE,
                                                           "job_name": "j" * 300, "report": report,
                                                           "log_tail": [HUGE] * 500})
        assert_message_fits(blocks, text)


def test_log_tails_and_the_edit_modal_at_their_largest(world: World) -> None:
    for hosts, lines in ((60, 300), (60, 1), (1, 1), (49, 2)):
        logs = JobLogs(lineage_id="x", job_name="j" * 300, lines=lines, hosts=tuple(
            HostLog(label=f"algo-{i}" * 40, lines=("l" * 30,) * lines) for i in range(hosts)))
        blocks = log_blocks(logs)
        assert blocks is None or not message_problems(blocks)
    spec = parse_command("bert-squad spot=yes " + " ".join(f"hp.{n}={'v' * 2400}" for n in free_text_arguments()[:30]))
    assert_view_fits(train.edit_modal(spec, "bert-squad " + HUGE, "C" * 2000))


def test_every_error_answer_fits_a_message(world: World) -> None:
    for command, text in (("train", HUGE), ("job", HUGE), ("stop", HUGE), ("deploy", HUGE), ("logs", HUGE),
                          ("recipe", "show " + HUGE), ("schedule", "add " + HUGE), ("notify", "on " + HUGE),
                          ("nope" + HUGE, "")):
        reply = router.run_command(world.ctx(), command, text)
        assert_message_fits(reply.blocks or None, reply.text)
        assert len(reply.text) <= bk.MAX_FALLBACK_TEXT, command[:20]
    assert texts.BLOCKS_CUT

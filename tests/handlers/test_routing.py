"""Routed notifications and DMs through the real outbox: a subscribed channel gets one short line per
subscribed event (and none for the others), exactly once however often delivery runs, with the link to the
job's thread; the launcher gets a DM when the job ends if they asked for one."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pytest

from bot.scheduler import ApsCronCalendar
from handlers import router
from handlers.notify import deliver_due
from jobs import lineage as moves
from jobs.endpoints import texts as endpoint_texts
from jobs.lifecycle import events
from jobs.lineage import Lineage
from jobs.records import Actor
from jobs.schedules.service import ScheduleService
from tests.handlers.fakes import ALICE, BOB, CHANNEL, RecordingChat, Said, World, make_world

CARD_TS = "77.0001"
ALERTS = "C_ALERTS"


class LinkingChat(RecordingChat):
    """The recording chat with permalinks, as Slack's chat.getPermalink gives them."""

    def permalink(self, channel: str, ts: str) -> str | None:
        return f"https://test.slack.com/archives/{channel}/p{ts.replace('.', '')}"


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path, chat=LinkingChat(), trainbot_admins=("U_ADMIN",))


def notify(world: World, text: str, actor: Actor = ALICE, channel: str = ALERTS) -> str:
    actor = dataclasses.replace(actor, channel_id=channel)
    return router.run_command(world.ctx(actor), "notify", text).text


def launched(world: World, text: str = "distilbert-spot", actor: Actor = ALICE) -> Lineage:
    lineage = world.jobs.launch(text, actor=actor)
    world.jobs.attach_message(lineage.id, CHANNEL, CARD_TS)
    return world.jobs.get(lineage.id)


def enqueue(world: World, lineage: Lineage, payload: dict, key: str) -> None:
    world.store.outbox.enqueue(kind=payload["kind"], payload=payload, dedup_key=key, lineage_id=lineage.id,
                        channel=lineage.channel)


def report(lineage: Lineage) -> dict:
    return {"lineage_id": lineage.id, "headline": {"accuracy": 0.91}, "metrics": {"eval_accuracy": 0.91},
            "cost_usd": 1.23, "spot_savings": "70%"}


def every_event(world: World, lineage: Lineage) -> None:
    """What the watcher queues over a lineage's life, every kind once (and a second state line)."""
    job = f"{lineage.id}-1"
    payloads = [
        events.state_line(lineage.id, job, "InProgress", "Starting"),
        events.state_line(lineage.id, job, "InProgress", "Training"),
        events.interrupted(lineage.id, job, "ml.p3.2xlarge"),
        events.relaunched(lineage.id, f"{lineage.id}-2", attempt=2, instance_type="ml.p3.8xlarge", spot=True,
                          backoff_seconds=2, checkpoint_uri="s3://bkt/ck", resumed_from_step=40),
        events.failed(lineage.id, job, "AlgorithmError: ValueError: bad label", ["boom"]),
        events.gave_up(lineage.id, job, "no spot capacity", 6),
        events.completed(lineage.id, job, report(lineage), None),
        events.stopped(lineage.id, job, ""),
    ]
    for index, payload in enumerate(payloads):
        enqueue(world, lineage, payload, key=f"{lineage.id}:{index}")


def deliver_all(world: World, rounds: int = 3) -> None:
    for _ in range(rounds):
        deliver_due(world.services, world.chat)


def lines_in(world: World, channel: str) -> list[Said]:
    return [s for s in world.chat.of("post") if s.channel == channel]


def test_a_subscribed_channel_gets_its_events_once_and_none_of_the_others(world: World) -> None:
    assert "failed, completed" in notify(world, "on failed completed")
    lineage = launched(world)
    every_event(world, lineage)
    deliver_all(world)
    alerts = lines_in(world, ALERTS)
    assert len(alerts) == 2, [s.text for s in alerts]
    failed, completed = (s.text for s in alerts)
    link = f"<https://test.slack.com/archives/{CHANNEL}/p{CARD_TS.replace('.', '')}|Thread>"
    assert failed == f":x: *{lineage.id}* failed: AlgorithmError: ValueError: bad label (<@U_ALICE>). {link}"
    assert completed.startswith(f":white_check_mark: *{lineage.id}* completed: accuracy 0.91, cost $1.23")
    assert all(s.thread_ts is None for s in alerts)  # a line in the channel, not in the job's thread
    assert len(lines_in(world, CHANNEL)) == 8  # the thread still gets the whole story
    deliver_all(world)
    assert len(lines_in(world, ALERTS)) == 2 and world.store.outbox.due_notifications() == []


def test_all_events_give_one_line_each_and_launched_only_once(world: World) -> None:
    notify(world, "on all")
    lineage = launched(world, "distilbert-spot")
    every_event(world, lineage)
    deliver_all(world)
    texts = [s.text for s in lines_in(world, ALERTS)]
    assert [t.split()[0] for t in texts] == [":rocket:", ":pause_button:", ":recycle:", ":x:", ":warning:",
                                            ":white_check_mark:"]
    assert texts[0].startswith(f":rocket: *{lineage.id}* launched by <@U_ALICE>: distilbert-base-uncased on "
                               "1 x ml.p3.2xlarge (spot).")
    assert f"relaunched as {lineage.id}-2 (attempt 2, ml.p3.8xlarge, spot)" in texts[2]
    assert "gave up after 6 attempts: no spot capacity" in texts[4]


def test_filters_pick_the_jobs_of_a_person_or_a_preset(world: World) -> None:
    notify(world, "on failed user=<@U_BOB|bob>", channel="C_BOB")
    notify(world, "on failed preset=bert-squad", channel="C_SQUAD")
    alice_spot = launched(world, "distilbert-spot", ALICE)
    bob_squad = launched(world, "bert-squad", BOB)
    for lineage in (alice_spot, bob_squad):
        enqueue(world, lineage, events.failed(lineage.id, f"{lineage.id}-1", "AlgorithmError: x", []), lineage.id)
    deliver_all(world)
    assert [bob_squad.id in s.text for s in lines_in(world, "C_BOB")] == [True]
    assert [bob_squad.id in s.text for s in lines_in(world, "C_SQUAD")] == [True]


def test_a_channel_outage_defers_its_line_and_drops_nothing(world: World) -> None:
    notify(world, "on failed")
    lineage = launched(world)
    enqueue(world, lineage, events.failed(lineage.id, f"{lineage.id}-1", "AlgorithmError: x", []), "f")
    deliver_due(world.services, world.chat)  # the thread reply, then the fan-out queues the line
    world.chat.failing.add("post")
    deliver_due(world.services, world.chat)
    assert lines_in(world, ALERTS) == []
    world.chat.failing.clear()
    world.clock.advance(60)
    deliver_all(world)
    assert len(lines_in(world, ALERTS)) == 1


def test_off_list_and_the_refusals_of_notify(world: World) -> None:
    notify(world, "on failed")
    notify(world, "on completed user=me", actor=BOB)
    listing = notify(world, "list")
    assert "failed for every job (added by <@U_ALICE>)" in listing and "jobs launched by <@U_BOB>" in listing
    assert "failures and give-ups only" in listing
    answer = notify(world, "off", actor=BOB)
    assert answer.startswith("Removed 1 subscription from this channel. 1 added by someone else stays (") and "<@U_ALICE>" in answer
    assert "Unknown event 'explode'" in notify(world, "on explode")
    strict = make_world(world.settings.trainbot_home / "strict", trainbot_allowed_users=("U_ALICE",))
    refused = router.run_command(strict.ctx(dataclasses.replace(BOB, channel_id=ALERTS)), "notify", "on")
    assert "not allowed" in refused.text
    assert [e.action for e in strict.store.audit_log()] == ["notify.refused"]


def test_the_launcher_gets_a_dm_when_the_job_ends_if_asked(world: World) -> None:
    asked = launched(world, "distilbert-spot notify=dm")
    plain = launched(world, "distilbert-spot")
    for lineage in (asked, plain):
        enqueue(world, lineage, events.completed(lineage.id, f"{lineage.id}-1", report(lineage), None), lineage.id)
    deliver_all(world)
    dm, = world.chat.of("dm")
    assert dm.user == "U_ALICE" and dm.text.startswith(f"Your job *{asked.id}* completed: accuracy 0.91. Cost $1.23")
    assert "spot savings 70%" in dm.text and "/p770001|Thread>" in dm.text


def test_dm_default_on_and_off(world: World) -> None:
    assert "DM when each of your jobs ends" in notify(world, "dm on", actor=BOB)
    bobs = launched(world, "distilbert-spot", BOB)
    enqueue(world, bobs, events.stopped(bobs.id, f"{bobs.id}-1", "by U_ADMIN"), "stopped")
    notify(world, "dm off")
    alices = launched(world, "distilbert-spot")
    enqueue(world, alices, events.failed(alices.id, f"{alices.id}-1", "AlgorithmError: x", []), "failed")
    deliver_all(world)
    dm, = world.chat.of("dm")
    assert dm.user == "U_BOB" and f"Your job *{bobs.id}* was stopped: by U_ADMIN. Cost $0.00." in dm.text


def test_a_scheduled_run_that_regressed_is_routed_as_regression(world: World) -> None:
    schedules = ScheduleService(store=world.store, jobs=world.jobs, calendar=ApsCronCalendar(),
                                settings=world.settings, clock=world.clock)
    world.services = dataclasses.replace(world.services, schedules=schedules)
    schedules.add_from_text("nightly", 'cron="0 2 * * *" distilbert-spot', actor=ALICE, channel=CHANNEL)
    notify(world, "on regression schedule=nightly")
    runs = []
    for accuracy in (0.91, 0.85):
        world.clock.advance(86400)
        lineage = schedules.run_now("nightly", actor=ALICE)
        world.jobs.attach_message(lineage.id, CHANNEL, CARD_TS)
        job = lineage.attempts[-1].job_name
        world.store.transition_attempt(job, moves.ATTEMPT_COMPLETED, metrics={"eval_accuracy": accuracy})
        world.store.transition_lineage(lineage.id, moves.COMPLETE)
        enqueue(world, lineage, events.completed(lineage.id, job, report(lineage), None), lineage.id)
        runs.append(lineage)
    deliver_all(world)
    line, = lines_in(world, ALERTS)
    assert line.text.startswith(f":chart_with_downwards_trend: *{runs[1].id}* (schedule nightly) regressed "
                                f"against {runs[0].id}: eval_accuracy 0.91 → 0.85 (-6.00 points)")


def test_idle_endpoints_are_routed_to_unfiltered_subscriptions(world: World) -> None:
    notify(world, "on endpoint-idle")
    payload = {"kind": endpoint_texts.ENDPOINTS_IDLE, "text": "idle", "endpoints": ["ep-a", "ep-b"],
               "running_usd": 42.5}
    world.store.outbox.enqueue(kind=endpoint_texts.ENDPOINTS_IDLE, payload=payload, dedup_key="idle", channel=CHANNEL)
    world.clock.advance(timedelta(seconds=1).total_seconds())
    deliver_all(world)
    line, = lines_in(world, ALERTS)
    assert line.text == (":money_with_wings: 2 endpoints idle for more than 24 h: ep-a, ep-b; $42.50 so far. "
                         "`/undeploy NAME` stops the cost.")

"""ScheduleService on a real store (a SQLite file, then a real PostgreSQL database), the real JobService and the scripted backend, with a FakeClock."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from bot.scheduler import ApsCronCalendar
from jobs import lineage as moves
from jobs.backends.code_sources import GitCodeSources
from jobs.errors import InvalidState, NotFound, PermissionDenied, ScheduleError, SpecError
from jobs.lifecycle.service import JobService
from jobs.lineage import Lineage, LineageStatus
from jobs.planning.reader import CommandReader
from jobs.records import Actor
from jobs.schedules.service import ScheduleService, parse_add_text
from jobs.settings import Settings
from jobs.store.store import Store
from tests.jobs.fakes import ScriptedBackend
from tests.support.clock import FakeClock
from tests.support.git_repos import make_repo

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
BOB = Actor("U_BOB", channel_id="C_ML", via="slack")
TRAIN = "distilbert-spot"
NIGHTLY = datetime(2026, 3, 2, 2, 0, tzinfo=timezone.utc)


@dataclass
class World:
    clock: FakeClock
    store: Store
    backend: ScriptedBackend
    jobs: JobService
    schedules: ScheduleService


def make_world(db: Path | str, clock: FakeClock | None = None, **settings: Any) -> World:
    """Everything a schedule needs, on one database: a SQLite file's path or any URL (two worlds on one
    database = two processes)."""
    clock = clock or FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc))
    store = Store(db if isinstance(db, str) else f"sqlite:///{db}", clock=clock)
    store.migrate()
    backend = ScriptedBackend(clock=clock)
    counter = iter(range(1, 10_000))
    tag = uuid.uuid4().hex[:4]  # two worlds on one file are two processes: their ids must not collide
    jobs = JobService(store=store, backend=backend, clock=clock,
                      settings=Settings(trainbot_bucket="bkt", **settings),
                      new_lineage_id=lambda spec: f"{spec.preset or 'job'}-{tag}-{next(counter):06d}")
    schedules = ScheduleService(store=store, jobs=jobs, calendar=ApsCronCalendar(),
                                settings=Settings(trainbot_bucket="bkt", **settings), clock=clock)
    return World(clock, store, backend, jobs, schedules)


@pytest.fixture
def world(database_url: str) -> World:
    return make_world(database_url, trainbot_admins=("U_ADMIN",))


def finish(world: World, lineage: Lineage, metrics: dict[str, float],
           status: LineageStatus = LineageStatus.COMPLETED) -> Lineage:
    """What the watcher does when the backend says Completed."""
    attempt = lineage.attempts[-1]
    world.store.transition_attempt(attempt.job_name, moves.ATTEMPT_COMPLETED, metrics=metrics)
    move = {LineageStatus.COMPLETED: moves.COMPLETE, LineageStatus.FAILED: moves.FAIL}[status]
    assert world.store.transition_lineage(lineage.id, move)
    return world.store.get_lineage(lineage.id)


# -- adding: everything is checked now, not at 2 a.m. --------------------------------------------------


def test_add_stores_the_schedule_with_its_next_run_and_data_pointer(world: World) -> None:
    schedule = world.schedules.add_from_text(
        "nightly", f'cron="0 2 * * *" tz=Europe/Berlin {TRAIN} data=s3://bkt/fresh/ revision=v7', actor=ALICE,
        channel="C_ML")
    assert (schedule.cron, schedule.tz, schedule.channel) == ("0 2 * * *", "Europe/Berlin", "C_ML")
    assert schedule.train_data == "s3://bkt/fresh/" and schedule.dataset_revision == "v7"
    assert schedule.next_run == datetime(2026, 3, 2, 1, 0, tzinfo=timezone.utc)  # 02:00 CET
    assert schedule.next_run_text() == "2026-03-02 01:00 UTC"
    assert "nightly" in world.schedules.render_list() and "none yet" in world.schedules.render_list()
    assert [e.action for e in world.store.audit_log(target="nightly")] == ["schedule.add"]


@pytest.mark.parametrize(("text", "error", "words"), [
    (f'cron="0 25 * * *" {TRAIN}', ScheduleError, "not a cron expression"),
    (f'cron="0 2 * *" {TRAIN}', ScheduleError, "five fields"),
    (f'cron="0 2 * * *" tz=Mars/Olympus {TRAIN}', ScheduleError, "not a time zone"),
    (f'cron="0 2 31 2 *" {TRAIN}', ScheduleError, "never fires"),
    (f"{TRAIN} instances=2", ScheduleError, "cron expression"),
    ('cron="0 2 * * *" distilbert-spot instances=banana', SpecError, "instance"),
    ('cron="0 2 * * *" no-such-preset', SpecError, "Unknown preset"),
    (f'cron="0 2 * * *" overlap=sometimes {TRAIN}', ScheduleError, "skip or queue"),
    (f'cron="0 2 * * *" threshold=-3 {TRAIN}', ScheduleError, "threshold"),
])
def test_bad_input_is_refused_at_add_time_with_one_sentence(world: World, text: str, error: type[Exception],
                                                            words: str) -> None:
    with pytest.raises(error) as caught:
        world.schedules.add_from_text("nightly", text, actor=ALICE, channel="C_ML")
    message = str(caught.value)
    assert words.lower() in message.lower() and "\n" not in message and "Traceback" not in message
    assert world.schedules.list() == []


def test_bad_or_taken_names_are_refused(world: World) -> None:
    with pytest.raises(ScheduleError, match="cannot name a schedule"):
        world.schedules.add("no spaces!", "0 2 * * *", None, TRAIN, actor=ALICE, channel=None)
    world.schedules.add("nightly", "0 2 * * *", None, TRAIN, actor=ALICE, channel=None)
    with pytest.raises(ScheduleError, match="exists already"):
        world.schedules.add("nightly", "0 3 * * *", None, TRAIN, actor=ALICE, channel=None)


def test_unquoted_cron_fields_and_slack_curly_quotes_are_read() -> None:
    assert parse_add_text(f"cron=0 2 * * 1-5 {TRAIN} spot=yes").cron == "0 2 * * 1-5"
    request = parse_add_text(f"cron=\u201c30 1 * * *\u201d tz=UTC overlap=queue threshold=0.5 deploy_if_better=yes "
                             f"endpoint=prod-sentiment {TRAIN}")
    assert (request.cron, request.overlap, request.regression_points, request.deploy_if_better, request.endpoint) == (
        "30 1 * * *", "queue", 0.5, True, "prod-sentiment")
    assert request.train_text == TRAIN


def test_deploy_if_better_names_the_endpoint_it_promotes_into() -> None:
    with pytest.raises(ScheduleError, match="deploy_if_better=yes needs the endpoint to promote into"):
        parse_add_text(f"cron='0 2 * * *' deploy_if_better=yes {TRAIN}")
    with pytest.raises(ScheduleError, match="endpoint='prod_1' cannot be an endpoint's name"):
        parse_add_text(f"cron='0 2 * * *' endpoint=prod_1 {TRAIN}")
    assert parse_add_text(f"cron='0 2 * * *' endpoint=prod {TRAIN}").endpoint == "prod"  # a Promote button only


# -- pause, resume, remove -------------------------------------------------------------------------------


def test_pause_resume_and_remove(world: World) -> None:
    seen: list[str] = []
    world.schedules.subscribe(seen.append)
    world.schedules.add("nightly", "0 2 * * *", "UTC", TRAIN, actor=ALICE, channel="C_ML")
    paused = world.schedules.pause("nightly", actor=ALICE)
    assert paused.paused and paused.next_run is None and paused.next_run_text() == "paused"
    assert world.schedules.fire("nightly", NIGHTLY).outcome == "paused"
    assert world.backend.created == []
    assert world.schedules.resume("nightly").next_run == datetime(2026, 3, 2, 2, 0, tzinfo=timezone.utc)
    assert not world.schedules.get("nightly").paused
    with pytest.raises(PermissionDenied, match="U_ALICE"):
        world.schedules.remove("nightly", actor=BOB)
    world.schedules.remove("nightly", actor=Actor("U_ADMIN"))
    with pytest.raises(NotFound, match="schedule list"):
        world.schedules.get("nightly")
    assert seen == ["nightly"] * 4


# -- firing -------------------------------------------------------------------------------------------


def test_fire_launches_an_ordinary_lineage_for_the_schedule_once_per_slot(world: World) -> None:
    world.schedules.add_from_text("nightly", f'cron="0 2 * * *" {TRAIN} revision=v7', actor=ALICE, channel="C_ML")
    world.clock.advance(14 * 3600)
    result = world.schedules.fire("nightly", NIGHTLY)
    assert result.outcome == "launched" and result.lineage is not None
    lineage = world.store.get_lineage(result.lineage.id)
    assert lineage.schedule == "nightly" and lineage.origin == "schedule" and lineage.launched_by == "U_ALICE"
    assert lineage.spec.dataset_revision == "v7" and lineage.status is LineageStatus.RUNNING
    # The same slot again (a second process, or a retry) launches nothing.
    assert world.schedules.fire("nightly", NIGHTLY).outcome == "duplicate"
    assert len(world.backend.created) == 1
    note = world.store.outbox.due_notifications()[0]
    assert note.kind == "schedule" and note.channel == "C_ML" and "revision v7" in note.payload["text"]
    assert world.schedules.get("nightly").last_result.startswith(f"running ({lineage.id})")


def test_a_run_due_while_the_previous_is_active_is_skipped_with_a_note(world: World) -> None:
    world.schedules.add("nightly", "0 2 * * *", "UTC", TRAIN, actor=ALICE, channel="C_ML")
    first = world.schedules.fire("nightly", NIGHTLY)
    second = world.schedules.fire("nightly", NIGHTLY + timedelta(days=1))
    assert second.outcome == "skipped" and first.lineage is not None and first.lineage.id in second.note
    assert len(world.backend.created) == 1
    texts = [n.payload["text"] for n in world.store.outbox.due_notifications()]
    assert any("skipped" in t and "still running" in t for t in texts)
    assert world.schedules.get("nightly").last_result.startswith("skipped: the previous run")


def test_overlap_queue_runs_once_the_previous_run_ends(world: World) -> None:
    world.schedules.add_from_text("nightly", f'cron="0 2 * * *" overlap=queue {TRAIN}', actor=ALICE, channel=None)
    first = world.schedules.fire("nightly", NIGHTLY).lineage
    assert first is not None
    assert world.schedules.fire("nightly", NIGHTLY + timedelta(days=1)).outcome == "queued"
    assert world.schedules.release_queued() == []  # still running
    finish(world, first, {"eval_f1": 0.8})
    released = world.schedules.release_queued()
    assert [r.outcome for r in released] == ["launched"]
    assert world.schedules.release_queued() == []  # taken once
    assert len(world.backend.created) == 2


def test_a_refused_launch_is_recorded_not_raised(tmp_path: Path) -> None:
    world = make_world(tmp_path / "t.db", trainbot_max_job_usd=0.01)
    world.schedules.add("nightly", "0 2 * * *", "UTC", TRAIN, actor=ALICE, channel="C_ML")
    result = world.schedules.fire("nightly", NIGHTLY)
    assert result.outcome == "failed" and "$" in result.note
    assert world.schedules.get("nightly").last_result.startswith("failed:")


def test_run_now_launches_for_the_person_and_refuses_while_one_runs(world: World) -> None:
    world.schedules.add("nightly", "0 2 * * *", "UTC", TRAIN, actor=ALICE, channel="C_ML")
    lineage = world.schedules.run_now("nightly", actor=BOB)
    assert lineage.schedule == "nightly" and lineage.launched_by == "U_BOB"
    with pytest.raises(InvalidState, match="still running"):
        world.schedules.run_now("nightly", actor=BOB)
    finish(world, lineage, {})
    world.clock.advance(60)
    assert world.schedules.run_now("nightly", actor=BOB).id != lineage.id
    with pytest.raises(NotFound):
        world.schedules.run_now("nope", actor=BOB)


def test_own_code_is_allowed_when_added_and_pinned_afresh_at_each_run(database_url: str, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "git")
    first = repo.commit({"train.py": "print('v1')\n"})
    world = make_world(database_url)
    reader = CommandReader.of(max_instances=16, code_sources=(repo.url,), resolver=GitCodeSources(tmp_path / "home"))
    world.jobs = JobService(store=world.store, backend=world.backend, clock=world.clock, reader=reader,
                            settings=Settings(trainbot_bucket="bkt"))
    world.schedules = ScheduleService(store=world.store, jobs=world.jobs, calendar=ApsCronCalendar(),
                                      settings=Settings(trainbot_bucket="bkt"), clock=world.clock)
    own = f"model=bert-base-uncased dataset=custom code=git+{repo.url}@main entry=train.py"
    with pytest.raises(SpecError, match="TRAINBOT_CODE_SOURCES"):
        world.schedules.add("elsewhere", "0 2 * * *", "UTC", own.replace(repo.url, "https://example.com/r.git"),
                            actor=ALICE, channel="C_ML")
    # No git when it is added (a chat waits 3 s for its answer): a branch that does not exist yet is taken,
    # and its run says what is wrong.
    world.schedules.add("later", "0 3 * * *", "UTC", own.replace("@main", "@not-yet"), actor=ALICE, channel="C_ML")
    assert world.schedules.fire("later", NIGHTLY).outcome == "failed"
    assert "not-yet" in world.schedules.get("later").last_result

    world.schedules.add("nightly", "0 2 * * *", "UTC", own, actor=ALICE, channel="C_ML")
    monday = world.schedules.fire("nightly", NIGHTLY).lineage
    assert monday is not None and monday.spec.code_commit == first
    finish(world, monday, {})
    second = repo.commit({"train.py": "print('v2')\n"})
    world.clock.advance(86400)
    tuesday = world.schedules.fire("nightly", NIGHTLY + timedelta(days=1)).lineage
    assert tuesday is not None and tuesday.spec.code_commit == second != first


# -- comparing with yesterday -----------------------------------------------------------------------------


def _nightly_run(world: World, day: int, metrics: dict[str, float], *, status: LineageStatus = LineageStatus.COMPLETED
                 ) -> Lineage:
    world.clock.advance(86400)
    result = world.schedules.fire("nightly", NIGHTLY + timedelta(days=day))
    assert result.lineage is not None
    return finish(world, result.lineage, metrics, status)


def test_regression_is_flagged_beyond_the_threshold_against_the_previous_success(world: World) -> None:
    world.schedules.add_from_text("nightly", f'cron="0 2 * * *" threshold=1 deploy_if_better=yes endpoint=prod {TRAIN}',
                                  actor=ALICE, channel="C_ML")
    first = _nightly_run(world, 0, {"eval_exact_match": 80.0, "eval_f1": 88.0, "eval_loss": 1.2})
    assert world.schedules.compare_with_previous(first) is None  # nothing to compare with yet
    _nightly_run(world, 1, {"eval_exact_match": 10.0, "eval_f1": 10.0}, status=LineageStatus.FAILED)
    small_drop = _nightly_run(world, 2, {"eval_exact_match": 79.5, "eval_f1": 88.5, "eval_loss": 1.1})
    comparison = world.schedules.compare_with_previous(small_drop)
    assert comparison is not None and comparison.previous_lineage_id == first.id  # the failed run is not "previous"
    assert not comparison.regressed and not comparison.better
    big_drop = _nightly_run(world, 3, {"eval_exact_match": 77.9, "eval_f1": 88.6})
    comparison = world.schedules.compare_with_previous(big_drop)
    assert comparison is not None and comparison.regressed and comparison.previous_lineage_id == small_drop.id
    assert [c.name for c in comparison.changes if c.regressed] == ["eval_exact_match"]
    assert any("REGRESSION" in line for line in comparison.lines())
    better = _nightly_run(world, 4, {"eval_exact_match": 81.0, "eval_f1": 89.0})
    comparison = world.schedules.compare_with_previous(better)
    assert comparison is not None and comparison.better and comparison.deploy_recommended


def test_fractions_are_compared_in_points_and_the_threshold_is_per_schedule(world: World) -> None:
    world.schedules.add_from_text("nightly", f'cron="0 2 * * *" threshold=0.5 {TRAIN} data=s3://bkt/day/',
                                  actor=ALICE, channel=None)
    _nightly_run(world, 0, {"eval_accuracy": 0.910})
    run = _nightly_run(world, 1, {"eval_accuracy": 0.903})  # -0.7 points
    comparison = world.schedules.compare_with_previous(run)
    assert comparison is not None and comparison.regressed
    assert comparison.changes[0].change_points == pytest.approx(-0.7)
    assert comparison.data == "s3://bkt/day/" and "Trained on s3://bkt/day/." in comparison.lines()
    assert comparison.to_dict()["regressed"] is True


def test_an_unscheduled_lineage_has_no_comparison(world: World) -> None:
    lineage = world.jobs.launch(TRAIN, actor=ALICE)
    assert world.schedules.compare_with_previous(lineage) is None

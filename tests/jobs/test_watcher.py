"""Watcher scenarios: a real SQLite store, the scripted in-memory backend (a peer), a fake clock.

Every path of the recovery policy, plus a crash at each step of a relaunch: a new watcher on the same
database always ends with exactly one new attempt and one announcement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from bot.wiring import build_watcher, ending_steps
from jobs import lineage as moves
from jobs.endings.stage import EndingStage
from jobs.errors import BackendError, BackendUnavailable, CapacityError, InvalidState
from jobs.lifecycle import events
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher, cursor_key
from jobs.lineage import AttemptStatus, Lineage, LineageStatus
from jobs.planning import prices
from jobs.planning.grammar import parse_command
from jobs.records import Actor, MetricPoint, RemoteStatus
from jobs.settings import Settings
from jobs.store.outbox import Outbox
from jobs.store.store import Store
from tests.jobs.fakes import ScriptedBackend
from tests.support.clock import FakeClock

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
CAPACITY = "CapacityError: Unable to provision requested ML compute capacity. Please retry using a different ML instance type."


class Crash(BaseException):
    """A kill -9 stand-in: not an Exception, so nothing in the bot catches it."""


class CrashingStore(Store):
    """A Store that dies before or after one chosen write (dependency injection, not patching)."""

    def __init__(self, url: str, *, clock: FakeClock, method: str = "", when: str = "before",
                 match: Callable[[tuple[Any, ...], dict[str, Any]], bool] = lambda a, k: True) -> None:
        super().__init__(url, clock=clock)
        self.method, self.when, self.match = method, when, match
        self.fired = False
        self.outbox = _CrashingOutbox(self, self.outbox)  # type: ignore[assignment]

    def _around(self, name: str, call: Callable[[], Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        hit = not self.fired and name == self.method and self.match(args, kwargs)
        if hit and self.when == "before":
            self.fired = True
            raise Crash(name)
        result = call()
        if hit and (self.when != "after_true" or result):
            self.fired = True
            raise Crash(name)
        return result

    def transition_lineage(self, *args: Any, **kwargs: Any) -> bool:
        return bool(self._around("transition_lineage", lambda: super(CrashingStore, self).transition_lineage(
            *args, **kwargs), args, kwargs))

    def transition_attempt(self, *args: Any, **kwargs: Any) -> bool:
        return bool(self._around("transition_attempt", lambda: super(CrashingStore, self).transition_attempt(
            *args, **kwargs), args, kwargs))

    def add_attempt(self, *args: Any, **kwargs: Any) -> Any:
        return self._around("add_attempt", lambda: super(CrashingStore, self).add_attempt(*args, **kwargs),
                            args, kwargs)



class _CrashingOutbox:
    """The store's outbox, dying around `enqueue` when its store says so."""

    def __init__(self, store: CrashingStore, outbox: Outbox) -> None:
        self._store, self._outbox = store, outbox

    def enqueue(self, **kwargs: Any) -> bool:
        return bool(self._store._around("enqueue", lambda: self._outbox.enqueue(**kwargs), (), kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._outbox, name)


@dataclass
class World:
    clock: FakeClock
    store: Store
    backend: ScriptedBackend
    service: JobService
    watcher: Watcher
    settings: Settings
    url: str
    endings: EndingStage

    def launch(self, text: str = "distilbert-spot") -> Lineage:
        return self.service.launch(text, actor=ALICE)

    def move(self, job: str, status: RemoteStatus, secondary: str | None = None, **fields: Any) -> None:
        """The job changes on the backend one second later (so its LastModifiedTime moves)."""
        self.clock.advance(1)
        if secondary is not None:
            fields["secondary_status"] = secondary
        self.backend.set_remote(job, status, last_modified=self.clock.now(), **fields)

    def kinds(self) -> list[str]:
        """What the outbox holds once the steps after each ending (the announcement among them) have run."""
        self.endings.process_due(limit=1000)
        return [n.kind for n in self.store.outbox.due_notifications(limit=1000)]

    def notes(self, kind: str) -> list[dict[str, Any]]:
        self.endings.process_due(limit=1000)
        return [n.payload for n in self.store.outbox.due_notifications(limit=1000) if n.kind == kind]

    def restart(self, store: Store | None = None) -> Watcher:
        """A new process: a new store connection, service, watcher and ending stage on the same database."""
        self.store = store or Store(self.url, clock=self.clock)
        self.service = make_service(self.store, self.backend, self.clock, self.settings)
        self.watcher = build_watcher(self.store, self.backend, self.clock, self.settings)
        self.endings = make_endings(self.store, self.backend, self.clock, self.settings)
        return self.watcher


def make_endings(store: Store, backend: ScriptedBackend, clock: FakeClock, settings: Settings) -> EndingStage:
    return EndingStage(store, clock, ending_steps(store, backend, clock, settings))


def make_service(store: Store, backend: ScriptedBackend, clock: FakeClock, settings: Settings) -> JobService:
    counter = iter(range(1, 1000))
    return JobService(store=store, backend=backend, clock=clock, settings=settings,
                      new_lineage_id=lambda spec: f"{spec.preset or 'job'}-{next(counter):04d}")


class FlakyBackend(ScriptedBackend):
    """The scripted backend whose describe of chosen jobs fails once (an outage of one call)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_describe_once: set[str] = set()

    def describe(self, job_name: str) -> Any:
        if job_name in self.fail_describe_once:
            self.fail_describe_once.discard(job_name)
            raise BackendUnavailable("SageMaker could not be reached.")
        return super().describe(job_name)


def make_world(tmp_path: Path, *, backoff: float = 30, store_factory: Callable[..., Store] = Store) -> World:
    clock = FakeClock(datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc))
    url = f"sqlite:///{tmp_path / 'trainbot.db'}"
    store = store_factory(url, clock=clock)
    store.migrate()
    backend = FlakyBackend(clock=clock)
    settings = Settings(trainbot_bucket="bkt", trainbot_home=tmp_path, trainbot_relaunch_backoff_seconds=backoff)
    service = make_service(store, backend, clock, settings)
    watcher = build_watcher(store, backend, clock, settings)
    return World(clock, store, backend, service, watcher, settings, url, make_endings(store, backend, clock, settings))


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


@pytest.fixture
def at_once(tmp_path: Path) -> World:
    return make_world(tmp_path, backoff=0)


# -- cost of a cycle --------------------------------------------------------------------------------------


def test_a_quiet_cycle_lists_once_and_describes_nothing(world: World) -> None:
    lineage = world.launch()
    first = world.watcher.poll_once()
    assert first.described == [f"{lineage.id}-1"]
    assert world.kinds() == [events.STATE]
    assert world.store.get_meta(cursor_key(world.backend.name)) is not None
    world.clock.advance(30)
    quiet = world.watcher.poll_once()
    assert (quiet.api_calls, quiet.described, quiet.changes, quiet.actions) == (1, [], [], [])
    assert world.backend.calls_of("list_changed")[-1].method == "list_changed"


def test_only_the_job_that_changed_is_described(world: World) -> None:
    jobs = [world.launch() for _ in range(5)]
    world.watcher.poll_once()
    world.move(f"{jobs[2].id}-1", RemoteStatus.IN_PROGRESS, "Uploading")
    cycle = world.watcher.poll_once()
    assert cycle.described == [f"{jobs[2].id}-1"]
    assert cycle.api_calls == 2
    assert world.store.get_attempt(f"{jobs[2].id}-1").secondary_status == "Uploading"


# -- interrupted ------------------------------------------------------------------------------------------


def test_an_interruption_storm_is_announced_once_and_never_relaunched(world: World) -> None:
    job = f"{world.launch().id}-1"
    world.watcher.poll_once()
    for _ in range(4):
        world.move(job, RemoteStatus.IN_PROGRESS, "Interrupted")
        world.watcher.poll_once()
        world.move(job, RemoteStatus.IN_PROGRESS, "Training")
        world.watcher.poll_once()
    assert world.kinds().count(events.INTERRUPTED) == 1
    assert world.kinds().count(events.STATE) == 1  # "Training" once; later repeats share its dedup key
    assert world.backend.created == [job]
    assert world.store.get_attempt(job).secondary_status == "Training"


# -- capacity ---------------------------------------------------------------------------------------------


def test_max_wait_exceeded_relaunches_after_the_backoff_from_the_same_checkpoints(world: World) -> None:
    lineage = world.launch()
    job = f"{lineage.id}-1"
    world.watcher.poll_once()
    world.move(job, RemoteStatus.STOPPED, "MaxWaitTimeExceeded", billable_seconds=100, training_seconds=400)
    world.watcher.poll_once()
    waiting = world.store.get_lineage(lineage.id)
    assert waiting.status is LineageStatus.RELAUNCHING
    assert (waiting.next_instance_type, waiting.next_spot) == ("ml.g6e.xlarge", True)
    assert world.store.get_attempt(job).status is AttemptStatus.STOPPED
    world.clock.advance(28)
    world.watcher.poll_once()
    assert world.backend.created == [job]
    world.clock.advance(2)
    cycle = world.watcher.poll_once()
    assert world.backend.created == [job, f"{lineage.id}-2"]
    plan = world.backend.plans[f"{lineage.id}-2"]
    assert plan.spec.instance_type == "ml.g6e.xlarge" and plan.spec.spot
    assert plan.estimator["checkpoint_s3_uri"] == world.backend.plans[job].estimator["checkpoint_s3_uri"]
    assert world.store.get_lineage(lineage.id).status is LineageStatus.RUNNING
    assert world.store.get_lineage(lineage.id).restarts == 1
    [relaunched] = world.notes(events.RELAUNCHED)
    assert (relaunched["attempt"], relaunched["instance_type"]) == (2, "ml.g6e.xlarge")
    assert relaunched["checkpoint_uri"] == lineage.checkpoint_uri
    assert relaunched["text"].startswith(f"Relaunched as {lineage.id}-2 (attempt 2, ml.g6e.xlarge, spot; 1 GPU as planned)")
    assert ("relaunching from the checkpoints on ml.g6e.xlarge (spot; 1 GPU as planned) in 30 s"
            in world.notes(events.STATE)[-1]["text"])
    assert any(a.startswith(f"relaunched {lineage.id} as") for a in cycle.actions)


def test_capacity_errors_go_round_the_fallbacks_until_the_restart_cap_then_give_up(at_once: World) -> None:
    world = at_once
    lineage = world.launch()
    world.watcher.poll_once()
    for number in range(1, 7):
        world.move(f"{lineage.id}-{number}", RemoteStatus.FAILED, failure_reason=CAPACITY)
        world.watcher.poll_once()
    assert world.backend.created == [f"{lineage.id}-{n}" for n in range(1, 7)]
    types = [world.backend.plans[name].spec.instance_type for name in world.backend.created]
    # The same GPU count on every family, then from the top again: capacity is often back in minutes.
    assert types == ["ml.p3.2xlarge", "ml.g6e.xlarge", "ml.g6.xlarge", "ml.g5.xlarge", "ml.g4dn.xlarge", "ml.p3.2xlarge"]
    ended = world.store.get_lineage(lineage.id)
    assert ended.status is LineageStatus.GAVE_UP
    [gave_up] = world.notes(events.GAVE_UP)
    assert gave_up["reason"].endswith(
        "the restart cap of 5 relaunches is reached (tried ml.p3.2xlarge (spot) 2 times, ml.g6e.xlarge (spot), "
        "ml.g6.xlarge (spot), ml.g5.xlarge (spot), ml.g4dn.xlarge (spot))")
    world.watcher.poll_once()
    assert len(world.backend.created) == 6 and world.kinds().count(events.GAVE_UP) == 1


def test_on_demand_is_tried_last_when_the_spec_allows_it(at_once: World) -> None:
    world = at_once
    lineage = world.launch("distilbert-spot on_demand_fallback=yes")
    world.watcher.poll_once()
    for number in (1, 2, 3, 4, 5):  # p3.2xlarge, then the 1-GPU g6e, g6, g5 and g4dn, all spot
        world.move(f"{lineage.id}-{number}", RemoteStatus.STOPPED, "MaxWaitTimeExceeded")
        world.watcher.poll_once()
    last = world.backend.plans[f"{lineage.id}-6"].spec
    assert (last.instance_type, last.spot, last.max_wait) == ("ml.p3.2xlarge", False, None)


def test_the_restart_cap_gives_up(at_once: World) -> None:
    world = at_once
    lineage = world.launch("distilbert-spot max_restarts=1")
    world.watcher.poll_once()
    for number in (1, 2):
        world.move(f"{lineage.id}-{number}", RemoteStatus.FAILED, failure_reason="InternalServerError")
        world.watcher.poll_once()
    assert len(world.backend.created) == 2
    assert world.store.get_lineage(lineage.id).status is LineageStatus.GAVE_UP
    assert "restart cap of 1" in world.notes(events.GAVE_UP)[0]["reason"]


def test_a_refused_relaunch_moves_on_to_the_next_type(at_once: World) -> None:
    world = at_once
    lineage = world.launch()
    world.watcher.poll_once()
    world.backend.fail_launch(CapacityError("No capacity for ml.g6e.xlarge."), job_name=f"{lineage.id}-2")
    world.move(f"{lineage.id}-1", RemoteStatus.FAILED, failure_reason=CAPACITY)
    world.watcher.poll_once()
    assert world.backend.created == [f"{lineage.id}-1", f"{lineage.id}-3"]
    assert world.store.get_attempt(f"{lineage.id}-2").status is AttemptStatus.LAUNCH_FAILED
    assert world.backend.plans[f"{lineage.id}-3"].spec.instance_type == "ml.g6.xlarge"
    assert world.store.get_lineage(lineage.id).status is LineageStatus.RUNNING


# -- endings ----------------------------------------------------------------------------------------------


def test_a_code_failure_is_reported_with_the_log_tail_and_not_retried(world: World) -> None:
    lineage = world.launch()
    job = f"{lineage.id}-1"
    world.watcher.poll_once()
    world.backend.set_logs(job, [f"line {i}" for i in range(100)] + ["ZeroDivisionError: division by zero"])
    reason = "AlgorithmError: ExecuteUserScriptError: exit code 1"
    world.move(job, RemoteStatus.FAILED, failure_reason=reason)
    world.watcher.poll_once()
    world.clock.advance(3600)
    world.watcher.poll_once()
    assert world.backend.created == [job]
    assert world.store.get_lineage(lineage.id).status is LineageStatus.FAILED
    [failed] = world.notes(events.FAILED)
    assert failed["reason"] == reason
    assert failed["log_tail"][-1] == "ZeroDivisionError: division by zero"
    assert len(failed["log_tail"]) == events.LOG_TAIL_LINES


def test_a_user_stop_ends_it_with_nothing_more(world: World) -> None:
    lineage = world.launch()
    job = f"{lineage.id}-1"
    world.watcher.poll_once()
    world.clock.advance(1)
    world.service.stop(lineage.id, actor=ALICE)
    world.watcher.poll_once()
    world.clock.advance(3600)
    world.watcher.poll_once()
    assert world.backend.created == [job]
    assert world.store.get_attempt(job).status is AttemptStatus.STOPPED
    assert world.store.get_lineage(lineage.id).status is LineageStatus.STOPPED
    assert world.kinds().count(events.STOPPED) == 1


def test_a_stop_during_the_backoff_cancels_the_relaunch(world: World) -> None:
    lineage = world.launch()
    world.watcher.poll_once()
    world.move(f"{lineage.id}-1", RemoteStatus.STOPPED, "MaxWaitTimeExceeded")
    world.watcher.poll_once()
    world.service.stop(lineage.id, actor=ALICE)
    world.clock.advance(60)
    world.watcher.poll_once()
    assert len(world.backend.created) == 1
    assert world.store.get_lineage(lineage.id).status is LineageStatus.STOPPED


def test_completed_enqueues_the_final_report_and_curves(world: World) -> None:
    lineage = world.launch()
    job = f"{lineage.id}-1"
    world.watcher.poll_once()
    world.backend.set_metrics(job, {
        "loss": [MetricPoint(float(x), 1.0 / (x + 1)) for x in range(0, 100, 10)],
        "eval_accuracy": [MetricPoint(50.0, 0.8), MetricPoint(100.0, 0.9)],
    })
    world.move(job, RemoteStatus.COMPLETED, billable_seconds=300, training_seconds=1000,
               final_metrics={"eval_accuracy": 0.91, "eval_loss": 0.3})
    world.watcher.poll_once()
    world.watcher.poll_once()
    assert world.store.get_lineage(lineage.id).status is LineageStatus.COMPLETED
    [done] = world.notes(events.COMPLETED)
    report = done["report"]
    assert report["spot_savings"] == "70%"
    assert report["headline"] == {"accuracy": 0.91, "eval loss": 0.3}
    assert report["status"] == "completed" and not report["partial"]
    assert report["cost_usd"] == round(prices.cost_of("ml.p3.2xlarge", 1, 300, True), 2) > 0
    png = Path(done["png_path"])
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
    assert png == world.settings.trainbot_home / "plots" / f"{lineage.id}.png"


def test_jobs_that_ended_in_one_cycle_are_settled_in_the_order_they_ended(world: World) -> None:
    # The listing comes newest-first on SageMaker and in launch order here: neither is the order the jobs
    # ended in, which is what a model package's version and the channel's announcements must follow.
    first, second, third = (world.launch() for _ in range(3))
    world.watcher.poll_once()
    for lineage in (second, third, first):
        world.move(f"{lineage.id}-1", RemoteStatus.COMPLETED, billable_seconds=60, training_seconds=60)
    cycle = world.watcher.poll_once()
    assert cycle.described == [f"{second.id}-1", f"{third.id}-1", f"{first.id}-1"]
    # Each ending is recorded as its job is handled (at the same instant on this fake clock; the end-to-end
    # registry test, tests/bot/test_cli_promote.py, sees the versions follow on a real one).
    assert all(world.store.get_lineage(ln.id).status is LineageStatus.COMPLETED for ln in (first, second, third))


# -- lost launches and crashes ----------------------------------------------------------------------------


def test_a_lost_first_launch_is_relaunched_once_after_the_grace(world: World) -> None:
    def die(name: str) -> None:
        raise Crash(name)

    world.backend.on_launch = die
    with pytest.raises(Crash):
        world.launch()
    world.backend.on_launch = None
    [lineage] = world.store.list_lineages()
    assert lineage.status is LineageStatus.PENDING
    world.watcher.poll_once()
    assert world.backend.created == []  # its launch may still be under way
    world.clock.advance(301)
    world.watcher.poll_once()
    world.watcher.poll_once()
    assert world.backend.created == [f"{lineage.id}-2"]
    assert world.store.get_attempt(f"{lineage.id}-1").status is AttemptStatus.LAUNCH_FAILED
    assert world.store.get_lineage(lineage.id).status is LineageStatus.RUNNING


def test_a_launch_that_went_through_unrecorded_is_adopted(world: World) -> None:
    crashing = CrashingStore(world.url, clock=world.clock, method="transition_attempt")
    world.restart(crashing)
    with pytest.raises(Crash):
        world.launch()
    world.restart()
    world.watcher.poll_once()
    [lineage] = world.store.list_lineages()
    assert lineage.status is LineageStatus.RUNNING
    assert lineage.attempts[0].status is AttemptStatus.RUNNING
    assert len(world.backend.created) == 1


def _relaunch_started(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return bool(args) and args[1].target is LineageStatus.RELAUNCHING


def _second_attempt(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return kwargs.get("number") == 2


def _attempt_2_running(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return args[0].endswith("-2") and args[1].target is AttemptStatus.RUNNING


def _lineage_running(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return args[1].target is LineageStatus.RUNNING


def _relaunched_note(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return kwargs.get("kind") == events.RELAUNCHED


CRASH_POINTS = {
    "before the ending is recorded": ("transition_attempt", "before", lambda a, k: args_end(a)),
    "after the ending, before the lineage moves": ("transition_lineage", "before", _relaunch_started),
    "after the lineage moved to relaunching": ("transition_lineage", "after", _relaunch_started),
    "after the attempt is recorded, before the launch": ("add_attempt", "after", _second_attempt),
    "after the launch, before it is recorded": ("transition_attempt", "before", _attempt_2_running),
    "after the attempt is running, before the lineage": ("transition_lineage", "before", _lineage_running),
    "after the lineage is running, before the announcement": ("enqueue", "before", _relaunched_note),
}


def args_end(args: tuple[Any, ...]) -> bool:
    return bool(args) and args[0].endswith("-1") and args[1].target is AttemptStatus.STOPPED


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_a_crash_at_any_step_of_a_relaunch_gives_exactly_one_new_attempt(tmp_path: Path, point: str) -> None:
    method, when, match = CRASH_POINTS[point]
    world = make_world(tmp_path, backoff=0)
    lineage = world.launch()
    world.watcher.poll_once()
    world.restart(CrashingStore(world.url, clock=world.clock, method=method, when=when, match=match))
    world.move(f"{lineage.id}-1", RemoteStatus.STOPPED, "MaxWaitTimeExceeded")
    with pytest.raises(Crash):
        world.watcher.poll_once()
    world.restart()
    for _ in range(3):
        world.clock.advance(301)  # past the launch grace: a launch that never happened is redone
        world.watcher.poll_once()
    new = [name for name in world.backend.created if name != f"{lineage.id}-1"]
    assert len(new) == 1, world.backend.created
    final = world.store.get_lineage(lineage.id)
    assert final.status is LineageStatus.RUNNING
    assert [a.status for a in final.attempts if a.status is AttemptStatus.RUNNING] == [AttemptStatus.RUNNING]
    assert final.latest_attempt is not None and final.latest_attempt.job_name == new[0]
    assert world.kinds().count(events.RELAUNCHED) == 1


# -- the loop ---------------------------------------------------------------------------------------------


def test_a_second_watcher_during_a_slow_relaunch_leaves_it_alone(at_once: World) -> None:
    world = at_once
    lineage = world.launch()
    world.watcher.poll_once()
    other = Watcher(Store(world.url, clock=world.clock), world.backend, world.clock, world.settings)
    seen: list[list[str]] = []

    def race(job: str) -> None:
        if job.endswith("-2") and not seen:
            seen.append(other.poll_once().actions)  # runs while attempt 2's launch is in flight

    world.backend.on_launch = race
    world.move(f"{lineage.id}-1", RemoteStatus.FAILED, failure_reason=CAPACITY)
    world.watcher.poll_once()
    assert seen == [[]]
    assert world.backend.created == [f"{lineage.id}-1", f"{lineage.id}-2"]


def test_a_relaunch_refused_for_an_outage_retries_the_same_type_and_a_bad_request_fails(at_once: World) -> None:
    world = at_once
    lineage = world.launch()
    world.watcher.poll_once()
    world.backend.fail_launch(BackendUnavailable("SageMaker could not be reached."), job_name=f"{lineage.id}-2")
    world.backend.fail_launch(BackendError("The role may not pass itself to SageMaker."), job_name=f"{lineage.id}-3")
    world.move(f"{lineage.id}-1", RemoteStatus.FAILED, failure_reason=CAPACITY)
    world.watcher.poll_once()
    attempts = world.store.get_lineage(lineage.id).attempts
    assert [a.instance_type for a in attempts[1:]] == ["ml.g6e.xlarge", "ml.g6e.xlarge"]
    assert world.backend.created == [f"{lineage.id}-1"]
    assert world.store.get_lineage(lineage.id).status is LineageStatus.FAILED
    assert "may not pass" in world.notes(events.FAILED)[0]["reason"]


def test_a_job_whose_describe_fails_keeps_the_cursor_and_does_not_block_the_others(world: World) -> None:
    broken, fine = world.launch(), world.launch()
    world.watcher.poll_once()
    cursor = world.store.get_meta(cursor_key(world.backend.name))
    world.move(f"{fine.id}-1", RemoteStatus.IN_PROGRESS, "Uploading")
    world.move(f"{broken.id}-1", RemoteStatus.IN_PROGRESS, "Uploading")
    assert isinstance(world.backend, FlakyBackend)
    world.backend.fail_describe_once.add(f"{broken.id}-1")
    failed = world.watcher.poll_once()
    assert len(failed.errors) == 1 and world.store.get_meta(cursor_key(world.backend.name)) == cursor
    assert world.store.get_attempt(f"{fine.id}-1").secondary_status == "Uploading"
    healed = world.watcher.poll_once()
    assert healed.errors == [] and world.store.get_meta(cursor_key(world.backend.name)) != cursor
    assert world.store.get_attempt(f"{broken.id}-1").secondary_status == "Uploading"


def test_the_cycle_summary_is_what_watch_once_prints(world: World) -> None:
    lineage = world.launch()
    lines = world.watcher.poll_once().summary().splitlines()
    assert lines[0] == "2 API calls, 1 listed, 1 described, 1 changes, 1 actions, 0 errors"
    assert lines[1:] == [f"  change: {lineage.id}-1: -/- -> InProgress/Training",
                         f"  action: notified state {lineage.id}-1"]


def test_jobs_of_another_backend_sharing_the_store_are_left_alone(world: World) -> None:
    spec = parse_command("distilbert-spot")
    other = world.store.create_lineage(
        lineage_id="elsewhere-1a2b3c4d", spec=spec, backend="sagemaker",
        checkpoint_uri="s3://b/trainbot/elsewhere-1a2b3c4d/checkpoints", actor=ALICE, estimated_usd=1.0,
    )
    world.store.add_attempt(other.id, number=1, instance_type=spec.instance_type, spot=True)
    world.store.transition_lineage(other.id, moves.CONFIRM_LAUNCH)
    mine = world.launch()
    for _ in range(3):
        cycle = world.watcher.poll_once()
        world.clock.advance(600)  # far past the lost-launch grace period
        assert all(other.id not in name for name in cycle.described)
    assert [a.job_name for a in world.store.get_lineage(other.id).attempts] == [f"{other.id}-1"]
    assert world.store.get_lineage(other.id).status is LineageStatus.RUNNING
    assert world.store.get_lineage(mine.id).status is LineageStatus.RUNNING
    with pytest.raises(InvalidState, match="TRAINBOT_BACKEND=sagemaker"):
        world.service.stop(other.id, actor=ALICE)

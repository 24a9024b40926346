"""What follows an ending (jobs/endings): the ending is a fact recorded with the move, and the report, the
curves, the log tail, the history record and the announcement are steps after it, each retried on its own.
A real SQLite store, the scripted backend (a peer), a fake clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobs.endings.stage import MAX_TRIES, PATIENCE, EndingStage, Step, StepContext
from jobs.lifecycle import events
from jobs.lineage import LineageStatus
from jobs.records import MetricPoint, RemoteStatus
from jobs.store.runs import RunHistory
from tests.jobs.test_watcher import ALICE, World, make_endings, make_world


def complete(world: World, job: str, **fields: Any) -> None:
    world.backend.set_metrics(job, {"loss": [MetricPoint(float(x), 1.0 / (x + 1)) for x in range(0, 50, 10)]})
    world.move(job, RemoteStatus.COMPLETED, billable_seconds=300, training_seconds=1000,
               final_metrics={"eval_accuracy": 0.91, "eval_loss": 0.3}, **fields)


def block_plots(world: World) -> Path:
    """A plots 'folder' nothing can be written into: a file stands where the folder would be."""
    plots = world.settings.trainbot_home / "plots"
    plots.write_text("not a folder")
    return plots


def test_a_completed_job_stays_completed_when_its_curves_cannot_be_drawn(tmp_path: Path) -> None:
    """Reproduces bug 1 of issue 21: with an unwritable plots folder, the watcher's settle drew the plot
    inside the state machine, the error ended the Completed job GAVE_UP, and no report was posted."""
    world = make_world(tmp_path)
    lineage = world.launch()
    job = f"{lineage.id}-1"
    world.watcher.poll_once()
    plots = block_plots(world)
    complete(world, job)
    world.watcher.poll_once()
    assert world.store.get_lineage(lineage.id).status is LineageStatus.COMPLETED
    assert world.notes(events.GAVE_UP) == []
    for _ in range(PATIENCE):  # the announcement waits a little for its picture, then goes without it
        world.clock.advance(60)
        world.endings.process_due()
    [done] = world.notes(events.COMPLETED)
    assert done["png_path"] is None and done["report"]["status"] == "completed"
    assert done["report"]["headline"] == {"accuracy": 0.91, "eval loss": 0.3}
    # The folder is fixed later: the picture follows the report into the thread.
    plots.unlink()
    world.clock.advance(3600)
    [curves] = world.notes(events.CURVES)
    assert Path(curves["png_path"]).read_bytes()[:4] == b"\x89PNG"
    assert world.store.get_lineage(lineage.id).status is LineageStatus.COMPLETED


def test_a_relaunch_with_no_backoff_counts_each_backend_call_once(tmp_path: Path) -> None:
    """Reproduces bug 2 of issue 21: one MaxWaitTimeExceeded relaunched at once makes three backend calls
    (list, describe, create), and `cycle.api_calls` said 4 (the create call was counted twice)."""
    world = make_world(tmp_path, backoff=0)
    lineage = world.launch()
    world.watcher.poll_once()
    world.move(f"{lineage.id}-1", RemoteStatus.STOPPED, "MaxWaitTimeExceeded", failure_reason="MaxWaitTimeExceeded")
    before = len(world.backend.calls)
    cycle = world.watcher.poll_once()
    made = [c.method for c in world.backend.calls[before:] if c.method != "console_links"]
    assert made == ["list_changed", "describe", "launch"]
    assert cycle.api_calls == 3
    assert world.store.get_lineage(lineage.id).latest_attempt.job_name == f"{lineage.id}-2"  # type: ignore[union-attr]


def test_the_ending_is_recorded_with_the_move_and_says_why(tmp_path: Path) -> None:
    world = make_world(tmp_path, backoff=0)
    world.settings = world.settings.model_copy(update={"trainbot_max_restarts": 0})
    world.restart()
    lineage = world.launch()
    world.watcher.poll_once()
    world.move(f"{lineage.id}-1", RemoteStatus.STOPPED, "MaxWaitTimeExceeded", failure_reason="MaxWaitTimeExceeded")
    world.watcher.poll_once()
    ending = world.store.endings.get(lineage.id)
    assert ending is not None and ending.outcome is LineageStatus.GAVE_UP
    assert "restart cap of 0" in ending.reason and ending.job_name == f"{lineage.id}-1"
    [gave_up] = world.notes(events.GAVE_UP)
    assert gave_up["reason"] == ending.reason


def test_the_history_record_is_made_without_any_chat(tmp_path: Path) -> None:
    """A job launched and watched with no chat at all (trainbot launch, trainbot watch): its ending still
    teaches later forecasts, and the announcement waits in the outbox for whichever chat comes."""
    world = make_world(tmp_path)
    lineage = world.launch()
    job = f"{lineage.id}-1"
    world.watcher.poll_once()
    complete(world, job)
    world.watcher.poll_once()
    world.endings.process_due()
    took_seconds, took_usd = RunHistory(world.store, world.clock).took_of(lineage.id)
    assert took_seconds is not None and took_usd is not None and took_usd > 0
    ending = world.store.endings.get(lineage.id)
    assert ending is not None and ending.settled_at is not None
    assert set(ending.steps) == {"report", "history", "curves", "announce"}


def test_a_failed_step_is_retried_alone_and_a_done_step_is_never_run_again(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    runs: dict[str, int] = {"steady": 0, "flaky": 0}

    def steady(ctx: StepContext) -> str:
        runs["steady"] += 1
        return "ok"

    def flaky(ctx: StepContext) -> str:
        runs["flaky"] += 1
        if runs["flaky"] < 3:
            raise OSError("disk full")
        return f"after {ctx.result('steady')}"

    stage = EndingStage(world.store, world.clock, [Step("steady", steady), Step("flaky", flaky, needs=("steady",))])
    lineage = world.launch()
    world.service.stop(lineage.id, actor=ALICE)
    stage.process_due()
    stage.process_due()  # not due yet: the backoff holds
    assert runs == {"steady": 1, "flaky": 1}
    for _ in range(3):
        world.clock.advance(3600)
        stage.process_due()
    assert runs == {"steady": 1, "flaky": 3}
    ending = world.store.endings.get(lineage.id)
    assert ending is not None and ending.settled_at is not None
    assert ending.steps["flaky"]["result"] == "after ok" and ending.steps["flaky"]["tries"] == 2


def test_a_step_that_keeps_failing_gives_up_and_skips_what_needs_it(tmp_path: Path) -> None:
    world = make_world(tmp_path)

    def broken(ctx: StepContext) -> None:
        raise RuntimeError("never works")

    after: list[str] = []
    stage = EndingStage(world.store, world.clock, [
        Step("broken", broken),
        Step("after", lambda ctx: after.append("ran"), needs=("broken",)),
        Step("independent", lambda ctx: "fine"),
    ])
    lineage = world.launch()
    world.service.stop(lineage.id, actor=ALICE)
    for _ in range(MAX_TRIES + 1):
        stage.process_due()
        world.clock.advance(7200)
    ending = world.store.endings.get(lineage.id)
    assert ending is not None and ending.settled_at is not None
    assert ending.steps["broken"]["gave_up"] and ending.steps["broken"]["tries"] == MAX_TRIES
    assert ending.steps["after"]["gave_up"] and after == []
    assert ending.steps["independent"]["result"] == "fine"


def test_a_crash_in_the_middle_of_an_ending_redoes_only_the_step_it_was_in(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    ran: list[str] = []

    class Crash(BaseException):
        pass

    def crashing(ctx: StepContext) -> None:
        ran.append("second")
        if ran.count("second") == 1:
            raise Crash  # the process dies here (not an Exception: nothing catches it)

    steps = [Step("first", lambda ctx: ran.append("first")), Step("second", crashing)]
    lineage = world.launch()
    world.service.stop(lineage.id, actor=ALICE)
    with pytest.raises(Crash):
        EndingStage(world.store, world.clock, steps).process_due()
    world.clock.advance(600)  # the dead process's claim runs out
    EndingStage(world.store, world.clock, steps).process_due()  # a new process
    assert ran == ["first", "second", "second"]


def test_an_ending_step_of_another_room_is_one_more_step(tmp_path: Path) -> None:
    """The hook other rooms use (a model registry, a promotion): one Step after the built-in ones."""
    world = make_world(tmp_path)
    registered: list[str] = []
    steps = [*make_endings(world.store, world.backend, world.clock, world.settings).steps,
             Step("register", lambda ctx: registered.append(ctx.lineage.id), needs=("report",),
                  on=frozenset({LineageStatus.COMPLETED}))]
    world.endings = EndingStage(world.store, world.clock, steps)
    done = world.launch()
    stopped = world.launch()
    world.watcher.poll_once()
    complete(world, f"{done.id}-1")
    world.service.stop(stopped.id, actor=ALICE)
    world.watcher.poll_once()
    world.endings.process_due()
    assert registered == [done.id]


def test_a_refused_first_launch_is_not_announced_again(tmp_path: Path) -> None:
    from jobs.errors import CapacityError

    world = make_world(tmp_path)
    world.backend.fail_launch(CapacityError("No capacity."))
    with pytest.raises(CapacityError):
        world.launch()
    assert world.kinds() == []
    [lineage] = world.store.list_lineages()
    ending = world.store.endings.get(lineage.id)
    assert ending is not None and ending.outcome is LineageStatus.FAILED and "No capacity" in ending.reason


def test_steps_must_name_steps_that_exist(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    with pytest.raises(ValueError, match="not there"):
        EndingStage(world.store, world.clock, [Step("a", lambda ctx: None, needs=("b",))])
    with pytest.raises(ValueError, match="share a name"):
        EndingStage(world.store, world.clock, [Step("a", lambda ctx: None), Step("a", lambda ctx: None)])


def test_a_persons_stop_is_recorded_with_who_and_announced_once(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    lineage = world.launch()
    world.watcher.poll_once()
    world.service.stop(lineage.id, actor=ALICE)
    world.watcher.poll_once()  # the backend reports the job Stopped: nothing more to announce
    ending = world.store.endings.get(lineage.id)
    assert ending is not None and ending.reason == "stopped by U_ALICE"
    [stopped] = world.notes(events.STOPPED)
    assert stopped["text"] == f"{lineage.id}-1 was stopped."

"""The controller, the one owner of a lineage's life: relaunches replay the approved plan, every failure to
carry out a decision ends the lineage, and money caps hold on relaunch. Driven through the watcher on a real
SQLite store and the scripted backend, with settings changed between "processes" as an operator would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.wiring import build_watcher
from jobs.errors import BackendError, CapacityError
from jobs.lifecycle import events
from jobs.lineage import AttemptStatus, LineageStatus
from jobs.records import RemoteStatus
from jobs.store.schema import lineages
from jobs.store.store import Store
from tests.jobs.test_watcher import ALICE, World, make_endings, make_service, make_world


def restart_with(world: World, **settings: Any) -> None:
    """A new bot process on the same database whose operator changed the settings."""
    world.settings = world.settings.model_copy(update=settings)
    world.store = Store(world.url, clock=world.clock)
    world.service = make_service(world.store, world.backend, world.clock, world.settings)
    world.watcher = build_watcher(world.store, world.backend, world.clock, world.settings)
    world.endings = make_endings(world.store, world.backend, world.clock, world.settings)


def lose_capacity(world: World, job: str) -> None:
    world.move(job, RemoteStatus.STOPPED, "MaxWaitTimeExceeded", failure_reason="MaxWaitTimeExceeded",
               billable_seconds=120, training_seconds=400)


def test_a_relaunch_replays_the_stored_plan_after_the_bucket_changed(tmp_path: Path) -> None:
    world = make_world(tmp_path, backoff=0)
    lineage = world.launch()
    world.watcher.poll_once()
    restart_with(world, trainbot_bucket="another-bucket")
    lose_capacity(world, f"{lineage.id}-1")
    world.watcher.poll_once()
    first, second = (world.backend.plans[f"{lineage.id}-{n}"] for n in (1, 2))
    assert second.estimator["checkpoint_s3_uri"] == first.estimator["checkpoint_s3_uri"] == \
        "s3://bkt/trainbot/" + lineage.id + "/checkpoints"
    changed = {k for k in first.estimator if first.estimator[k] != second.estimator.get(k)}
    assert changed <= {"instance_type", "use_spot_instances", "max_wait"}
    [note] = world.notes(events.RELAUNCHED)
    assert note["checkpoint_uri"] == second.estimator["checkpoint_s3_uri"]


def test_a_lowered_instance_cap_neither_strands_a_relaunch_nor_hides_other_jobs(tmp_path: Path) -> None:
    world = make_world(tmp_path, backoff=0)
    big = world.launch("distilbert-spot instance_count=2 distribution=ddp")
    other = world.launch("distilbert-spot")
    world.watcher.poll_once()
    restart_with(world, trainbot_max_instances=1)
    lose_capacity(world, f"{big.id}-1")
    world.move(f"{other.id}-1", RemoteStatus.COMPLETED, "Completed")
    cycle = world.watcher.poll_once()
    assert cycle.errors == []
    assert world.backend.plans[f"{big.id}-2"].estimator["instance_count"] == 2  # the approved plan
    assert world.store.get_lineage(big.id).status is LineageStatus.RUNNING
    assert world.store.get_lineage(other.id).status is LineageStatus.COMPLETED


def test_an_exception_from_a_relaunch_ends_the_lineage_with_its_reason(tmp_path: Path) -> None:
    world = make_world(tmp_path, backoff=0)
    lineage = world.launch()
    world.watcher.poll_once()
    world.backend.fail_launch(ValueError("embedded null byte"), times=100)
    lose_capacity(world, f"{lineage.id}-1")
    for _ in range(12):
        world.clock.advance(400)
        world.watcher.poll_once()
    ended = world.store.get_lineage(lineage.id)
    assert ended.status is LineageStatus.FAILED
    assert [a.status for a in ended.attempts] == [AttemptStatus.STOPPED, AttemptStatus.LAUNCH_FAILED]
    assert "embedded null byte" in ended.attempts[-1].failure_reason
    assert world.notes(events.RELAUNCHED) == []
    [failed] = world.notes(events.FAILED)
    assert "embedded null byte" in failed["reason"]


def test_capacity_refusals_on_relaunch_stop_at_the_restart_cap(tmp_path: Path) -> None:
    world = make_world(tmp_path, backoff=0)
    restart_with(world, trainbot_max_restarts=2)
    lineage = world.launch()
    world.watcher.poll_once()
    world.backend.fail_launch(CapacityError("No capacity."), times=100)
    lose_capacity(world, f"{lineage.id}-1")
    for _ in range(10):
        world.clock.advance(400)
        world.watcher.poll_once()
    ended = world.store.get_lineage(lineage.id)
    assert ended.status is LineageStatus.GAVE_UP
    assert len(ended.attempts) == 3  # attempt 1 and two relaunches, each refused
    assert "restart cap of 2" in world.notes(events.GAVE_UP)[0]["reason"]


def test_an_exception_from_a_first_launch_fails_the_lineage_with_one_sentence(tmp_path: Path) -> None:
    world = make_world(tmp_path)
    world.backend.fail_launch(ValueError("embedded null byte"))
    with pytest.raises(BackendError, match="embedded null byte"):
        world.launch()
    [lineage] = world.store.list_lineages()
    assert lineage.status is LineageStatus.FAILED
    assert lineage.attempts[0].status is AttemptStatus.LAUNCH_FAILED


def test_the_per_job_cap_skips_fallbacks_that_would_break_it(tmp_path: Path) -> None:
    world = make_world(tmp_path, backoff=0)
    lineage = world.launch("distilbert-spot on_demand_fallback=yes")
    restart_with(world, trainbot_max_job_usd=0.30)  # lowered under the lineage's worst case once it runs
    world.watcher.poll_once()
    lose_capacity(world, f"{lineage.id}-1")  # billed $0.04
    world.watcher.poll_once()
    # g6.xlarge and g5.xlarge spot could bill $0.31 and $0.39 more: skipped; g4dn.xlarge ($0.20) fits.
    second = world.store.get_lineage(lineage.id).latest_attempt
    assert second is not None and (second.instance_type, second.spot) == ("ml.g4dn.xlarge", True)


def test_the_per_job_cap_ends_a_lineage_no_fallback_fits_with_a_sentence_naming_it(tmp_path: Path) -> None:
    world = make_world(tmp_path, backoff=0)
    lineage = world.launch("distilbert-spot")
    restart_with(world, trainbot_max_job_usd=0.10)
    world.watcher.poll_once()
    lose_capacity(world, f"{lineage.id}-1")
    world.watcher.poll_once()
    assert world.store.get_lineage(lineage.id).status is LineageStatus.GAVE_UP
    assert world.backend.created == [f"{lineage.id}-1"]
    reason = world.notes(events.GAVE_UP)[0]["reason"]
    assert "$0.10 per-job cap (TRAINBOT_MAX_JOB_USD)" in reason and "(tried ml.p3.2xlarge (spot))" in reason


def test_the_daily_budget_counts_every_attempt_and_stops_a_relaunch(tmp_path: Path) -> None:
    world = make_world(tmp_path, backoff=0)
    lineage = world.launch("distilbert-spot")  # its attempt counts $1.06 (1000 s on-demand) until it ends
    # The operator lowers the budget under the lineage's worst case once it runs (a launch is checked
    # against every attempt it may make, so this one would be refused now).
    restart_with(world, trainbot_daily_budget_usd=0.2)
    ledger = world.service._ledger
    assert ledger.spent_today(world.clock.now()) == pytest.approx(1.0625)
    world.watcher.poll_once()
    lose_capacity(world, f"{lineage.id}-1")  # billed 120 s spot: $0.04
    world.watcher.poll_once()
    # Attempt 2 could bill $0.20 (g4dn.xlarge) to $0.39 (g5.xlarge): more than today's budget leaves ($0.16).
    assert world.store.get_lineage(lineage.id).status is LineageStatus.GAVE_UP
    assert "TRAINBOT_DAILY_BUDGET_USD" in world.notes(events.GAVE_UP)[0]["reason"]
    assert ALICE.user_id == world.store.get_lineage(lineage.id).launched_by


def test_a_fault_while_relaunching_ends_the_lineage_announced_and_other_jobs_go_on(tmp_path: Path) -> None:
    world = make_world(tmp_path, backoff=0)
    broken = world.launch()
    other = world.launch()
    world.watcher.poll_once()
    with world.store.engine.begin() as conn:  # a stored plan this version cannot replay
        conn.execute(lineages.update().where(lineages.c.id == broken.id).values(launch_plan={}))
    lose_capacity(world, f"{broken.id}-1")
    world.move(f"{other.id}-1", RemoteStatus.COMPLETED, "Completed")
    cycle = world.watcher.poll_once()
    assert world.store.get_lineage(broken.id).status is LineageStatus.GAVE_UP
    assert "trainbot could not carry on" in world.notes(events.GAVE_UP)[0]["reason"]
    assert world.store.get_lineage(other.id).status is LineageStatus.COMPLETED
    assert cycle.errors == []
    assert world.watcher.poll_once().actions == []  # settled for good: nothing retried


def test_a_relaunch_on_more_gpus_keeps_the_global_batch_and_each_attempt_records_its_settings(tmp_path: Path) -> None:
    world = make_world(tmp_path, backoff=0)
    lineage = world.launch("distilbert-spot instance_type=ml.g5.xlarge")
    restart_with(world, trainbot_recovery_policy="any-count")  # the operator widens recovery while it runs
    world.watcher.poll_once()
    lose_capacity(world, f"{lineage.id}-1")
    world.watcher.poll_once()
    lose_capacity(world, f"{lineage.id}-2")
    world.watcher.poll_once()
    lose_capacity(world, f"{lineage.id}-3")  # every 1-GPU type with 24 GB or more tried: ml.g6e and ml.g6
    world.watcher.poll_once()
    ran = world.store.get_lineage(lineage.id)
    assert [(a.instance_type, a.per_device_batch, a.accumulation) for a in ran.attempts] == [
        ("ml.g5.xlarge", 32, 1), ("ml.g6e.xlarge", 32, 1), ("ml.g6.xlarge", 32, 1), ("ml.g6e.12xlarge", 8, 1)]
    assert ran.launch_plan is not None and ran.launch_plan["batch"]["global_batch"] == 32  # the approved one
    third = world.backend.plans[f"{lineage.id}-4"]
    assert third.estimator["hyperparameters"]["per_device_train_batch_size"] == 8
    assert third.attempt_batch.global_batch == 32
    notes = [n["text"] for n in world.notes(events.RELAUNCHED)]
    assert notes[0].startswith(f"Relaunched as {lineage.id}-2 (attempt 2, ml.g6e.xlarge, spot; 1 GPU as planned)")
    assert notes[2].startswith(f"Relaunched as {lineage.id}-4 (attempt 4, ml.g6e.12xlarge, spot; 4 GPUs, "
                               "per-device batch 8 instead of 32, global batch 32 as planned)")
    forecast = ran.attempts[3].forecast  # the rest is forecast on the type it runs on now
    assert forecast is not None and forecast["seconds"] < (ran.attempts[2].forecast or {})["seconds"]

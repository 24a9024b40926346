"""Forecasts learn: a completed run's measured throughput and start-up change the next plan's forecast,
and the final report puts the forecast next to what the job took."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.wiring import ending_steps
from jobs.endings.stage import EndingStage
from jobs.lifecycle import events
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
from jobs.lineage import LineageStatus
from jobs.records import Actor, RemoteStatus
from jobs.settings import Settings
from jobs.store.runs import RunHistory
from jobs.store.store import Store
from tests.jobs.fakes import ScriptedBackend
from tests.support.clock import FakeClock

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
ONE_V100 = "bert-squad max_steps=none instances=1 type=ml.p3.2xlarge distribution=none"


class Rig:
    def __init__(self, tmp_path: Path, clock: FakeClock, store: Store, backend_name: str = "sagemaker") -> None:
        self.clock, self.store = clock, store
        self.settings = Settings(trainbot_bucket="bkt", trainbot_home=tmp_path, trainbot_relaunch_backoff_seconds=0)
        self.backend = ScriptedBackend(clock=clock, name=backend_name)
        counter = iter(range(1, 1000))
        self.service = JobService(store=store, backend=self.backend, clock=clock, settings=self.settings,
                                  new_lineage_id=lambda spec: f"run-{next(counter):04d}")
        self.watcher = Watcher(store, self.backend, clock, self.settings)
        self.endings = EndingStage(store, clock, ending_steps(store, self.backend, clock, self.settings))

    def complete(self, text: str, *, samples_per_second: float, runtime: float, wall: float,
                 resumed_from_step: int | None = None) -> str:
        """Launch ``text``, let it run ``wall`` seconds and complete with the Trainer's figures."""
        lineage = self.service.launch(text, actor=ALICE)
        job = f"{lineage.id}-1"
        self.watcher.poll_once()
        self.clock.advance(wall)
        self.backend.set_remote(
            job, RemoteStatus.COMPLETED, last_modified=self.clock.now(), ended_at=self.clock.now(),
            billable_seconds=int(wall - 150), training_seconds=int(wall - 150), resumed_from_step=resumed_from_step,
            final_metrics={"train_samples_per_second": samples_per_second, "train_runtime": runtime,
                           "eval_exact_match": 80.1, "eval_f1": 87.9, "total_flos": 1.2e17, "epoch": 2.0},
        )
        self.watcher.poll_once()
        self.endings.process_due()  # the history record is a step after the ending
        assert self.store.get_lineage(lineage.id).status is LineageStatus.COMPLETED
        return lineage.id


@pytest.fixture
def rig(tmp_path: Path, clock: FakeClock, store: Store) -> Rig:
    return Rig(tmp_path, clock, store)


def test_a_completed_run_changes_the_next_forecast(rig: Rig) -> None:
    before = rig.service.plan(ONE_V100).forecast
    assert before is not None and before.basis == "physics" and before.physics_samples_per_second
    # It trained at half the speed physics said, and spent 20 minutes around the training.
    measured = before.physics_samples_per_second / 2
    runtime = 175_232 / measured
    rig.complete(ONE_V100, samples_per_second=measured, runtime=runtime, wall=runtime + 1200)
    after = rig.service.plan(ONE_V100).forecast
    assert after is not None and after.basis == "1 earlier run"
    assert after.samples_per_second == pytest.approx(measured)
    assert after.training_seconds == pytest.approx(2 * (before.training_seconds or 0), rel=0.01)
    assert after.startup_seconds == pytest.approx(1200)
    assert (after.usd or 0) > (before.usd or 0)


def test_three_runs_make_the_basis_say_so(rig: Rig) -> None:
    speed = rig.service.plan(ONE_V100).forecast.physics_samples_per_second  # type: ignore[union-attr]
    for factor in (0.9, 1.0, 1.1):
        rig.complete(ONE_V100, samples_per_second=speed * factor, runtime=1000, wall=1300)
    after = rig.service.plan(ONE_V100).forecast
    assert after is not None and after.basis == "3 earlier runs"
    assert after.samples_per_second == pytest.approx(speed, rel=0.01)  # the median of the three


def test_only_the_same_model_task_and_instance_type_learn(rig: Rig) -> None:
    rig.complete(ONE_V100, samples_per_second=1.0, runtime=1000, wall=1300)
    for other in (ONE_V100.replace("ml.p3.2xlarge", "ml.g5.2xlarge"), f"{ONE_V100} model=bert-base-uncased",
                  "distilbert-spot"):
        forecast = rig.service.plan(other).forecast
        assert forecast is not None and forecast.basis == "physics", other


def test_a_resumed_attempt_teaches_nothing(rig: Rig) -> None:
    # Its train_samples_per_second counts the steps its checkpoint saved as if it had trained them.
    rig.complete(ONE_V100, samples_per_second=500.0, runtime=100, wall=400, resumed_from_step=4000)
    assert rig.service.plan(ONE_V100).forecast.basis == "physics"  # type: ignore[union-attr]


def test_the_report_puts_the_forecast_next_to_what_it_took(rig: Rig) -> None:
    planned = rig.service.plan(ONE_V100).forecast
    assert planned is not None and planned.seconds is not None
    lineage_id = rig.complete(ONE_V100, samples_per_second=12.0, runtime=14_000, wall=planned.seconds + 1800)
    [done] = [n.payload for n in rig.store.outbox.due_notifications(limit=100) if n.kind == events.COMPLETED]
    report = done["report"]
    assert report["forecast"]["basis"] == "physics"
    line = report["forecast_vs_actual"]
    assert line.startswith("forecast 4 h / $15, took 4 h 30 min / $")
    assert report["headline"] == {"exact_match": 80.1, "f1": 87.9}
    assert report["details"] == {"train_samples_per_second": 12.0, "train_runtime": 14_000, "total_flos": 1.2e17,
                                 "epoch": 2.0}
    row = RunHistory(rig.store, rig.clock).past_runs("sagemaker", rig.service.plan(ONE_V100).spec)
    assert len(row) == 1 and row[0].startup_seconds == pytest.approx(planned.seconds + 1800 - 14_000)
    assert rig.store.get_lineage(lineage_id).status is LineageStatus.COMPLETED


def test_the_local_backend_learns_apart_from_sagemaker(tmp_path: Path, clock: FakeClock, store: Store) -> None:
    local = Rig(tmp_path, clock, store, backend_name="local")
    local.complete(ONE_V100, samples_per_second=3.0, runtime=30, wall=45)
    assert local.service.plan(ONE_V100).forecast.basis == "physics"  # type: ignore[union-attr]
    assert len(RunHistory(store, clock).past_runs("local", local.service.plan(ONE_V100).spec)) == 1


def test_a_lineage_launched_before_forecasts_has_no_row_to_complete(rig: Rig, clock: FakeClock) -> None:
    runs = RunHistory(rig.store, clock)
    assert not runs.record_completed(
        "older-1", samples_per_second=1.0, startup_seconds=1.0, took_seconds=1.0, took_usd=1.0)
    assert runs.forecast_of("older-1") is None

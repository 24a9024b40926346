"""Live progress: one backend call for every running job, at most every TRAINBOT_PROGRESS_SECONDS; step /
total, loss, ETA and cost so far kept per lineage for the cards and `trainbot status`."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.lifecycle.progress import LiveProgress, ProgressTracker, progress_words, read_live
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
from jobs.lineage import Lineage
from jobs.planning.prices import cost_of
from jobs.records import Actor, Progress
from jobs.settings import Settings
from jobs.store.runs import RunHistory
from jobs.store.store import Store
from tests.jobs.fakes import ScriptedBackend
from tests.support.clock import FakeClock

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")


class Rig:
    def __init__(self, tmp_path: Path, clock: FakeClock, store: Store) -> None:
        self.clock, self.store = clock, store
        self.settings = Settings(trainbot_bucket="bkt", trainbot_home=tmp_path, trainbot_progress_seconds=60)
        self.backend = ScriptedBackend(clock=clock, name="sagemaker")
        self.service = JobService(store=store, backend=self.backend, clock=clock, settings=self.settings)
        self.watcher = Watcher(store, self.backend, clock, self.settings)
        self.tracker = ProgressTracker(store, self.backend, clock, self.settings)

    def running(self, text: str = "bert-squad") -> Lineage:
        lineage = self.service.launch(text, actor=ALICE)
        self.watcher.poll_once()
        return self.store.get_lineage(lineage.id)

    def live(self, lineage: Lineage) -> LiveProgress:
        data = RunHistory(self.store, self.clock).progress_of([lineage.id])[lineage.id]
        return LiveProgress.from_json(data)


@pytest.fixture
def rig(tmp_path: Path, clock: FakeClock, store: Store) -> Rig:
    return Rig(tmp_path, clock, store)


def test_one_call_covers_every_running_job(rig: Rig) -> None:
    lineages = [rig.running() for _ in range(3)]
    for n, lineage in enumerate(lineages[:2]):
        rig.backend.set_progress(f"{lineage.id}-1", Progress(step=10 * (n + 1), loss=0.5, steps_per_second=1.0))
    result = rig.tracker.poll_once()
    assert (result.ran, result.jobs, result.found, sorted(result.updated)) == (
        True, 3, 2, sorted(ln.id for ln in lineages[:2]))
    [call] = rig.backend.calls_of("progress")
    assert set((call.job_name or "").split(",")) == {f"{ln.id}-1" for ln in lineages}
    assert rig.live(lineages[1]).step == 20


def test_step_total_loss_eta_and_cost_so_far(rig: Rig) -> None:
    lineage = rig.running("bert-squad")  # max_steps=100: the total comes from the forecast
    rig.clock.advance(600)
    rig.backend.set_progress(f"{lineage.id}-1", Progress(step=40, loss=0.75, steps_per_second=2.0))
    rig.tracker.poll_once()
    live = rig.live(lineage)
    assert (live.step, live.total, live.loss, live.eta_seconds) == (40, 100, 0.75, 30)
    assert live.cost_so_far_usd == pytest.approx(cost_of("ml.p3.16xlarge", 2, 600, False), abs=0.01)
    assert live.words() == f"step 40/100 · loss 0.7500 · ETA 30 s · ${live.cost_so_far_usd:,.2f} so far"


def test_the_scripts_own_total_and_eta_win(rig: Rig) -> None:
    lineage = rig.running()
    rig.backend.set_progress(f"{lineage.id}-1", Progress(step=5, max_steps=60, loss=0.7, eta_seconds=13.0))
    rig.tracker.poll_once()
    live = rig.live(lineage)
    assert (live.total, live.eta_seconds) == (60, 13)


def test_before_a_pace_the_forecast_gives_the_eta(rig: Rig) -> None:
    lineage = rig.running()
    rig.backend.set_progress(f"{lineage.id}-1", Progress(step=0, loss=2.0))
    rig.tracker.poll_once()
    planned = RunHistory(rig.store, rig.clock).forecast_of(lineage.id)
    assert planned is not None and planned.training_seconds
    assert rig.live(lineage).eta_seconds == pytest.approx(planned.training_seconds, abs=1)


def test_at_most_every_progress_seconds_and_only_what_moved(rig: Rig) -> None:
    lineage = rig.running()
    job = f"{lineage.id}-1"
    rig.backend.set_progress(job, Progress(step=10, loss=1.0))
    assert rig.tracker.poll_once().updated == [lineage.id]
    rig.clock.advance(30)
    assert not rig.tracker.poll_once().ran  # not due yet
    assert len(rig.backend.calls_of("progress")) == 1
    rig.clock.advance(30)
    again = rig.tracker.poll_once()
    assert again.ran and again.updated == []  # nothing moved: no card redraw
    rig.clock.advance(60)
    rig.backend.set_progress(job, Progress(step=20, loss=0.9))
    assert rig.tracker.poll_once().updated == [lineage.id]


def test_no_running_job_means_no_call(rig: Rig) -> None:
    assert rig.tracker.poll_once().jobs == 0
    assert rig.backend.calls_of("progress") == []


def test_status_reads_it_fresh_and_falls_back_to_the_stored_one(rig: Rig) -> None:
    lineage = rig.running()
    job = f"{lineage.id}-1"
    rig.backend.set_progress(job, Progress(step=30, loss=0.6, steps_per_second=1.0))
    live = read_live(rig.store, rig.backend, rig.clock, lineage)
    assert live is not None and (live.step, live.total, live.eta_seconds) == (30, 100, 70)
    rig.tracker.poll_once()
    quiet = ScriptedBackend(clock=rig.clock, name="sagemaker")  # knows nothing: the stored figures stand
    stored = read_live(rig.store, quiet, rig.clock, lineage)
    assert stored is not None and stored.step == 30


def test_the_words_are_the_consoles() -> None:
    assert progress_words(20, 60, 0.70812, 13.0) == "step 20/60 · loss 0.7081 · ETA 13 s"
    assert progress_words(5, None, None, 185) == "step 5 · ETA 3 min 5 s"
    assert LiveProgress("j-1", None, None, None, None, 1.5).words() == "$1.50 so far"

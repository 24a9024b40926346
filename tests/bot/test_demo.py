"""`trainbot demo`'s flow and closing table, in-process on a scripted backend peer whose jobs complete
at once (the real local run is `trainbot demo` itself, timed by bench/console_startup.py)."""

from __future__ import annotations

import io
import re
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from bot.demo import RECIPES, run_demo
from bot.wiring import build_runtime
from jobs.clock import SystemClock
from jobs.records import RemoteStatus
from jobs.settings import Settings
from tests.jobs.fakes import ScriptedBackend

METRICS = {
    "bert-squad": {"eval_exact_match": 31.0, "eval_f1": 33.5},
    "roberta-mnli": {"eval_accuracy": 0.57},
    "distilbert-spot": {"eval_accuracy": 0.46},
}


def completing(backend: ScriptedBackend) -> None:
    def later(job_name: str) -> None:
        def complete() -> None:
            now = backend.clock.now()
            preset = re.sub(r"-[0-9a-f]+-\d+$", "", job_name)
            spot = preset == "distilbert-spot"
            backend.set_remote(job_name, RemoteStatus.COMPLETED, created_at=now, ended_at=now,
                               last_modified=now + timedelta(seconds=1), training_seconds=100,
                               billable_seconds=30 if spot else 100, spot=spot,
                               final_metrics=METRICS[preset], model_artifacts="/tmp/model")

        threading.Timer(0.3, complete).start()

    backend.on_launch = later


@pytest.mark.timeout(90)
def test_demo_runs_the_three_recipes_in_turn_and_ends_with_the_table(tmp_path: Path) -> None:
    backend = ScriptedBackend(clock=SystemClock())
    completing(backend)
    runtime = build_runtime(Settings(trainbot_home=tmp_path / "home"), clock=backend.clock, backend=backend)  # type: ignore[arg-type]
    out = io.StringIO()

    code = run_demo(runtime, stdout=out)

    transcript = out.getvalue()
    assert code == 0, transcript
    starts = [transcript.index(f"== {n}/3 {recipe.title}: /train {recipe.command} ==")
              for n, recipe in enumerate(RECIPES, 1)]
    assert starts == sorted(starts)
    assert [name.rsplit("-", 2)[0] for name in backend.created] == ["bert-squad", "roberta-mnli", "distilbert-spot"]
    table = transcript.split("\n\n")[-2].splitlines()
    assert table[0].split() == ["recipe", "job", "wall", "forecast", "attempts", "metrics", "SageMaker,", "this",
                                "run", "full-size", "on", "SageMaker", "spot", "savings"]
    qa, mnli, spot = table[2:]
    assert "exact_match 31, f1 33.5" in qa and qa.rstrip().endswith("-")
    assert "accuracy 0.57" in mnli
    assert "accuracy 0.46" in spot and spot.rstrip().endswith("70%")
    assert "about 9 min, about $5.89" in qa  # the full-size plan on 2 x p3.16xlarge (100 steps), forecast
    assert transcript.rstrip().splitlines()[-1].startswith("demo wall time: ")

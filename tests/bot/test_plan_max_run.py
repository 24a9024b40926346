"""Issue 35, item 5: a plan whose forecast does not fit its max_run (SageMaker would stop it there) says so
and suggests a max_run= that fits: on the console's plan card (`trainbot console --script`), in `trainbot plan`
and in `trainbot plan --json`; a plan that fits says nothing of it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from bot.cli import main
from bot.console import run_console
from bot.wiring import build_runtime
from jobs.clock import SystemClock
from jobs.settings import Settings
from tests.jobs.fakes import ScriptedBackend

WARNING = ("The forecast (about 26 min) is longer than max_run (16 min 40 s): SageMaker would stop the job before "
           "it ends. `max_run=40m` fits, with room to spare.")


@pytest.mark.timeout(60)
def test_the_plan_card_warns_and_suggests_a_max_run_that_fits(tmp_path: Path) -> None:
    backend = ScriptedBackend(clock=SystemClock())
    script = tmp_path / "plan.txt"
    script.write_text("/train distilbert-spot epochs=5\ncancel\n/train distilbert-spot\ncancel\n"
                      "/train distilbert-spot epochs=5 max_run=40m\ncancel\n")
    out = io.StringIO()

    code = run_console(build_runtime(Settings(trainbot_home=tmp_path / "home"), clock=backend.clock,
                                     backend=backend), script, stdout=out)  # type: ignore[arg-type]

    transcript = out.getvalue()
    assert code == 0, transcript
    cards = transcript.split("trainbot> /train ")[1:]
    assert "│ Forecast: about 26 min, about $0.45 (physics).\n" f"│ ⚠ {WARNING}\n" in cards[0]
    assert "⚠" not in cards[1] and "max_run=" not in cards[1].split("\n", 1)[1]  # it fits: nothing said
    assert "⚠" not in cards[2]  # the suggestion taken: it fits


def test_trainbot_plan_says_it_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRAINBOT_HOME", str(tmp_path))
    assert main(["plan", "distilbert-spot", "epochs=5"]) == 0
    assert f"\nWarning: {WARNING}\n" in capsys.readouterr().out
    assert main(["plan", "distilbert-spot", "epochs=5", "max_run=20m", "--json"]) == 0
    advice = json.loads(capsys.readouterr().out)["max_run_advice"]
    assert advice["forecast_seconds"] > 1200 and advice["suggested_max_run"] >= 1.5 * advice["forecast_seconds"]
    assert (advice["max_run"], advice["suggested_max_run"], advice["suggested_max_wait"]) == (1200, 2400, None)
    # A spot plan whose max_wait would be shorter than the max_run suggested gets a max_wait too.
    assert main(["plan", "distilbert-spot", "epochs=15", "--json"]) == 0
    advice = json.loads(capsys.readouterr().out)["max_run_advice"]
    assert advice["suggested_max_run"] > 3600 and advice["suggested_max_wait"] == 2 * advice["suggested_max_run"]
    assert main(["plan", "distilbert-spot", "--json"]) == 0
    assert "max_run_advice" not in json.loads(capsys.readouterr().out)

"""`trainbot demo`: the article's three recipes, scaled down, one after another, in a console session.

Each recipe is typed into the console as a person would (`/train PRESET`, `launch`, then waiting for
the job), so the demo shows the real bot: plan cards, live progress, the spot interruption the console
simulates and the watcher recovers from the checkpoints, and each final report. It ends with a table:
wall time next to the forecast of this run (one attempt: the spot job's second attempt comes on top),
attempts (the spot job has two), the headline metrics, what SageMaker would have charged for this run's
billable seconds at the plan's prices, the forecast of the full-size run on SageMaker, and the spot
savings (1 - billable / training seconds). Exit 0 when all three completed, 1 otherwise.

The demo runs in a home of its own (a new folder under the system's temporary directory, with a SQLite store
of its own), never in the person's TRAINBOT_HOME or TRAINBOT_DATABASE_URL: their schedules do not fire
during it, their jobs are not watched by it, and its table reports its own three jobs (issue 35.3). The
tiny model and data already built in TRAINBOT_HOME are linked in, not built again.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bot import console_render as render
from bot.console import Console, tune_for_terminal
from bot.console_chat import Screen
from jobs.backends.local.offline_assets import ASSETS_VERSION
from jobs.lifecycle.forecasts import forecast_of
from jobs.lineage import LineageStatus
from jobs.planning.forecast import about_duration, forecast
from jobs.planning.forecast import summary as forecast_summary
from jobs.planning.prices import usd
from jobs.reporting.reports import JobReport, build_report, with_forecast
from jobs.settings import Settings

if TYPE_CHECKING:
    from bot.wiring import Runtime


@dataclass(frozen=True)
class Recipe:
    title: str
    command: str  # what is typed after /train


RECIPES = (
    Recipe("QA, data parallel (2 processes)", "bert-squad"),
    Recipe("sentence pairs (MNLI-style)", "roberta-mnli"),
    Recipe("managed spot, interrupted", "distilbert-spot"),
)
HEADERS = ("recipe", "job", "wall", "forecast", "attempts", "metrics", "SageMaker, this run",
           "full-size on SageMaker", "spot savings")


@dataclass(frozen=True)
class Outcome:
    recipe: Recipe
    wall_seconds: float
    report: JobReport | None
    planned: str  # the forecast of the full-size run on SageMaker, in words


def demo_home(settings: Settings) -> Path:
    """A new home for one demo, with the assets the person's home has built linked in."""
    home = Path(tempfile.mkdtemp(prefix="trainbot-demo-")).resolve()
    built = settings.trainbot_home / "assets" / ASSETS_VERSION
    if (built / "READY").exists():
        shutil.copytree(built, home / "assets" / ASSETS_VERSION, copy_function=_link_or_copy)
    return home


def demo_settings(settings: Settings, home: Path) -> Settings:
    """The person's settings in the demo's home: its own store, no Slack, no events queue, no recipes file."""
    return settings.model_copy(update={
        "trainbot_home": home, "trainbot_database_url": "", "trainbot_backend": "local", "trainbot_events_queue": "",
        "trainbot_recipes_file": None, "slack_bot_token": None, "slack_app_token": None, "slack_signing_secret": None,
    })


def _link_or_copy(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:  # another file system
        shutil.copy2(source, destination)


def run_demo(runtime: Runtime, *, stdout: TextIO | None = None) -> int:
    out = stdout or sys.stdout
    tune_for_terminal(runtime)
    console = Console(runtime, Screen(out, redraw_prompt=False))
    console.start()
    started = time.monotonic()
    try:
        outcomes = [_run_recipe(console, number, recipe) for number, recipe in enumerate(RECIPES, 1)]
    finally:
        console.stop()
    total = time.monotonic() - started
    console.chat.say("", *summary(outcomes), "", f"demo wall time: {total:.0f} s")
    return 0 if all(o.report is not None and o.report.status == LineageStatus.COMPLETED.value
                    for o in outcomes) else 1


def _run_recipe(console: Console, number: int, recipe: Recipe) -> Outcome:
    console.chat.say("", f"== {number}/{len(RECIPES)} {recipe.title}: /train {recipe.command} ==")
    before = {lineage.id for lineage in console.session()}
    started = time.monotonic()
    console.play([f"/train {recipe.command}", "launch", "/wait $last"])
    wall = time.monotonic() - started
    new = [lineage for lineage in console.session() if lineage.id not in before]
    if not new:
        return Outcome(recipe, wall, None, "-")
    lineage = new[-1]
    runtime = console.runtime
    report = build_report(lineage, runtime.backend)
    report = with_forecast(report, forecast_of(runtime.store, runtime.clock, lineage.id))
    return Outcome(recipe, wall, report, forecast_summary(forecast(lineage.spec)))


def summary(outcomes: list[Outcome]) -> list[str]:
    """The closing table (one row a recipe)."""
    rows = [_row(outcome) for outcome in outcomes]
    return render.table(HEADERS, rows)


def _row(outcome: Outcome) -> list[str]:
    report = outcome.report
    wall = f"{outcome.wall_seconds:.0f} s"
    if report is None:
        return [outcome.recipe.command, "not launched", wall, "-", "-", "-", "-", "-", "-"]
    job = report.lineage_id if report.status == LineageStatus.COMPLETED.value else f"{report.lineage_id} ({report.status})"
    return [
        outcome.recipe.command,
        job,
        wall,
        _forecast_seconds(report),
        str(len(report.attempts)),
        _metrics(report.headline),
        usd(report.cost_usd),
        outcome.planned,
        report.spot_savings_pct or "-",
    ]


def _metrics(headline: dict[str, float]) -> str:
    if not headline:
        return "-"
    return ", ".join(f"{name} {value:.3g}" for name, value in headline.items())


def _forecast_seconds(report: JobReport) -> str:
    seconds = (report.forecast or {}).get("seconds")
    return "-" if seconds is None else about_duration(float(seconds))

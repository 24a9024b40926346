"""Forecast against measured for local jobs: the three presets on the local backend, each run twice (the
second forecast learns from the first run), and the SageMaker forecast of the full-size plan beside them.

    PYTHONPATH=. .venv/bin/python bench/forecast_local.py [--rounds 2]

Each job is what the console and the suite's local scenarios run: the plan scaled down to this machine
(tiny BERT, 200 generated examples, 60 steps). Measured is launch to end as the report counts it, and its
bill at the plan's prices. Figures only; the machine's load moves them.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PRESETS = ("bert-squad", "roberta-mnli", "distilbert-spot")


def run(rounds: int) -> None:
    from bot.wiring import build_runtime
    from jobs.planning.forecast import summary
    from jobs.records import Actor
    from jobs.settings import Settings
    from jobs.store.runs import RunHistory

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(trainbot_home=Path(tmp), trainbot_poll_seconds=1, trainbot_relaunch_backoff_seconds=2)
        runtime = build_runtime(settings, force_local=True)
        runs = RunHistory(runtime.store, runtime.clock)
        print(f"{'job':<28} {'basis':<14} {'forecast':>9} {'measured':>9} {'ratio':>6} {'$ forecast':>10} "
              f"{'$ measured':>10}  full size on SageMaker")
        for _ in range(rounds):
            for preset in PRESETS:
                plan = runtime.jobs.plan(preset)
                lineage = runtime.jobs.launch(preset, actor=Actor("bench", via="cli"))
                while not runtime.store.get_lineage(lineage.id).status.is_terminal():
                    runtime.watch_cycle()
                    time.sleep(1)
                runtime.watch_cycle()
                own = plan.run_forecast
                assert own is not None and own.seconds is not None and own.usd is not None
                took, paid = runs.took_of(lineage.id)
                status = runtime.store.get_lineage(lineage.id).status.value
                if took is None:
                    print(f"{lineage.id:<28} {own.basis:<14} {own.seconds:8.0f}s {'-':>9}  ({status})")
                    continue
                print(f"{lineage.id:<28} {own.basis:<14} {own.seconds:8.0f}s {took:8.0f}s {took / own.seconds:6.2f} "
                      f"{own.usd:10.4f} {paid or 0.0:10.4f}  {summary(plan.forecast) if plan.forecast else '-'}")


def main() -> None:
    for noisy in ("jobs", "bot", "handlers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=2)
    run(parser.parse_args().rounds)


if __name__ == "__main__":
    main()

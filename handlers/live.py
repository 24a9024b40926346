"""A lineage's card with what the store knows beyond the lineage: its forecast and its live progress."""

from __future__ import annotations

from handlers import blocks as bk
from handlers import cards
from handlers.context import Services
from jobs.lifecycle.progress import LiveProgress
from jobs.lineage import Lineage
from jobs.store.runs import RunHistory


def job_card(services: Services, lineage: Lineage, *, detail: bool = False) -> tuple[str, list[bk.Block]]:
    """The launch card (or, with ``detail``, the /job card) of ``lineage`` as it stands now."""
    runs = RunHistory(services.store, services.clock)
    forecast = runs.forecast_of(lineage.id)
    stored = runs.progress_of([lineage.id]).get(lineage.id)
    live = LiveProgress.from_json(stored) if stored else None
    if detail:
        return cards.job_detail(lineage, forecast=forecast, live=live)
    return cards.launch_card(lineage, forecast=forecast, live=live)

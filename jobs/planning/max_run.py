"""A plan whose forecast does not fit its max_run: SageMaker stops a training job at MaxRuntimeInSeconds,
so such a plan would be cut short (issue 35: `distilbert-spot epochs=5` forecast 26 min against the preset's
16 min 40 s). The card warns, and suggests a `max_run=` (and, for spot, a `max_wait=`) that fits.

The forecast compared is the whole attempt's (start-up, training, evaluation, upload): the part of it
SageMaker does not count against max_run (the instances' provisioning) is small next to the margin added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from jobs.planning.forecast import Forecast, about_duration
from jobs.planning.spec import JobSpec

#: A suggested max_run leaves this much room over the forecast (forecasts are estimates, not promises).
MARGIN = 1.5


@dataclass(frozen=True)
class MaxRunAdvice:
    forecast_seconds: float
    max_run: int  # the plan's
    suggested_max_run: int
    suggested_max_wait: int | None  # spot only, when the plan's max_wait would be shorter than the new max_run

    def keys(self) -> str:
        """``max_run=40m`` (and ``max_wait=80m``): what to type."""
        typed = f"max_run={duration_key(self.suggested_max_run)}"
        if self.suggested_max_wait is not None:
            typed += f" max_wait={duration_key(self.suggested_max_wait)}"
        return typed

    def to_json(self) -> dict[str, Any]:
        return {"forecast_seconds": round(self.forecast_seconds), "max_run": self.max_run,
                "suggested_max_run": self.suggested_max_run, "suggested_max_wait": self.suggested_max_wait}


def max_run_advice(spec: JobSpec, forecast: Forecast | None) -> MaxRunAdvice | None:
    """None when the forecast fits in max_run (or there is no forecast)."""
    if forecast is None or forecast.seconds is None or forecast.seconds <= spec.max_run:
        return None
    suggested = round_up(forecast.seconds * MARGIN)
    max_wait = None
    if spec.spot and spec.max_wait is not None and spec.max_wait < suggested:
        max_wait = 2 * suggested
    return MaxRunAdvice(forecast.seconds, spec.max_run, suggested, max_wait)


def round_up(seconds: float) -> int:
    """Up to a whole 10 minutes below 3 h, else a whole half hour: a number a person would type."""
    step = 600 if seconds < 3 * 3600 else 1800
    return int(math.ceil(seconds / step) * step)


def duration_key(seconds: int) -> str:
    """``2400`` -> ``40m``; ``9000`` -> ``2h30m``; ``7200`` -> ``2h`` (the grammar reads them all)."""
    hours, rest = divmod(seconds, 3600)
    minutes = rest // 60
    if not hours:
        return f"{minutes}m"
    return f"{hours}h{minutes}m" if minutes else f"{hours}h"


def advice_words(advice: MaxRunAdvice) -> str:
    """The card's and `trainbot plan`'s sentence."""
    return (f"The forecast (about {about_duration(advice.forecast_seconds)}) is longer than max_run "
            f"({limit_words(advice.max_run)}): SageMaker would stop the job before it ends. "
            f"`{advice.keys()}` fits, with room to spare.")


def limit_words(seconds: int) -> str:
    """``1000`` -> ``16 min 40 s``: a limit said exactly, not rounded as a forecast is."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours} h" if hours else "", f"{minutes} min" if minutes else "", f"{secs} s" if secs else ""]
    return " ".join(part for part in parts if part) or "0 s"

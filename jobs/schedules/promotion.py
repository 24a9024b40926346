"""What a completed scheduled run means for the schedule's endpoint: the decision alone (pure).

With `endpoint=NAME`, each completed run is compared with the previous successful one (the schedule's
comparison, strict as it is): a better run of a schedule with `deploy_if_better=yes` is promoted without a
click; a regression never is; every other run is offered to a person with a Promote button.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from jobs.comparison import Comparison
from jobs.schedules.store import Schedule


class Verdict(str, Enum):
    PROMOTE = "promote"  # better, and deploy_if_better=yes: promoted without a click
    BETTER = "better"  # better, deploy_if_better=no: a Promote button
    REGRESSED = "regressed"  # a metric dropped past the threshold: never promoted (a Promote button anyway)
    NOT_BETTER = "not_better"  # nothing dropped past the threshold, but nothing beat the previous run either
    FIRST = "first"  # nothing to compare with: the first run, or no metric in common


@dataclass(frozen=True)
class PromotionDecision:
    schedule: str
    endpoint: str
    lineage_id: str
    verdict: Verdict
    comparison: Comparison | None

    @property
    def automatic(self) -> bool:
        return self.verdict is Verdict.PROMOTE

    def changes(self) -> str:
        """``eval_f1 88 → 89.5, +1.50 points; ...``: what moved, for the one line."""
        if self.comparison is None:
            return ""
        return "; ".join(f"{c.name} {c.previous:g} → {c.current:g}, {c.change_points:+.2f} points"
                         for c in self.comparison.changes if c.quality)


def decide_promotion(schedule: Schedule, lineage_id: str, comparison: Comparison | None) -> PromotionDecision | None:
    """None when the schedule promotes into no endpoint."""
    if not schedule.endpoint:
        return None
    if comparison is None:
        verdict = Verdict.FIRST
    elif comparison.regressed:
        verdict = Verdict.REGRESSED
    elif comparison.better:
        verdict = Verdict.PROMOTE if schedule.deploy_if_better else Verdict.BETTER
    else:
        verdict = Verdict.NOT_BETTER
    return PromotionDecision(schedule.name, schedule.endpoint, lineage_id, verdict, comparison)

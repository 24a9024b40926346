"""How a run's final metrics compare with another's: a scheduled run against its schedule's last good run
(the nightly comparison), and a candidate model against the one serving (promotions and the registry).

Quality metrics (EM, F1, accuracy) are read on a 0-100 scale; a drop of more than the schedule's threshold
is a regression, and a run that dropped nothing and improved something is "better" (deploy_if_better).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.lineage import AttemptStatus, Lineage

#: A run is flagged when EM, F1 or accuracy drops by more than this many points (0-100 scale).
DEFAULT_REGRESSION_POINTS = 1.0
# Metrics where higher is better and a drop is a regression; compared on a 0-100 scale.
QUALITY_METRICS = {"exact_match", "exact", "em", "f1", "accuracy", "acc"}
_METRIC_PREFIXES = ("eval_", "test_", "final_", "validation_")


@dataclass(frozen=True)
class MetricChange:
    name: str
    previous: float
    current: float
    change_points: float  # current - previous, in points for quality metrics
    quality: bool  # higher is better and a drop counts as a regression
    regressed: bool


@dataclass(frozen=True)
class Comparison:
    schedule: str
    lineage_id: str
    previous_lineage_id: str
    threshold_points: float
    changes: tuple[MetricChange, ...]
    data: str  # which data this run trained on
    previous_data: str
    deploy_if_better: bool

    @property
    def regressed(self) -> bool:
        return any(c.regressed for c in self.changes)

    @property
    def better(self) -> bool:
        quality = [c for c in self.changes if c.quality]
        # Strict on purpose (it can trigger a deploy): nothing dropped at all, and something improved.
        return bool(quality) and all(c.change_points >= 0 for c in quality) and any(
            c.change_points > 0 for c in quality)

    @property
    def deploy_recommended(self) -> bool:
        """deploy_if_better=yes and this run beat the previous one (the endpoints layer acts on it)."""
        return self.deploy_if_better and self.better

    def lines(self) -> list[str]:
        head = f"Compared with {self.previous_lineage_id} (previous successful run of {self.schedule}):"
        body = [f"- {c.name}: {c.previous:g} -> {c.current:g} ({c.change_points:+.2f}"
                f"{' points' if c.quality else ''}){' REGRESSION' if c.regressed else ''}" for c in self.changes]
        verdict = (f"Regression: a metric dropped by more than {self.threshold_points:g} points."
                   if self.regressed else "No regression.")
        return [head, *body, verdict, f"Trained on {self.data}."]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule, "lineage_id": self.lineage_id, "previous_lineage_id": self.previous_lineage_id,
            "threshold_points": self.threshold_points, "regressed": self.regressed, "better": self.better,
            "deploy_recommended": self.deploy_recommended, "data": self.data, "previous_data": self.previous_data,
            "changes": [c.__dict__ for c in self.changes], "text": "\n".join(self.lines()),
        }


def describe_data(train_data: str | None, revision: str | None) -> str:
    """The report's sentence fragment on the data a run used."""
    if train_data and revision:
        return f"{train_data} (revision {revision})"
    if train_data:
        return train_data
    return f"the dataset at revision {revision}" if revision else "the dataset's default revision"


def compare_runs(schedule: str, lineage: Lineage, previous: Lineage, *, threshold: float,
                 deploy_if_better: bool) -> Comparison | None:
    """`lineage`'s final metrics against `previous`'s; None when they have no metric in common."""
    changes = _changes(final_metrics(previous), final_metrics(lineage), threshold)
    if not changes:
        return None
    return Comparison(
        schedule=schedule, lineage_id=lineage.id, previous_lineage_id=previous.id,
        threshold_points=threshold, changes=changes, deploy_if_better=deploy_if_better,
        data=describe_data(lineage.spec.train_data, lineage.spec.dataset_revision),
        previous_data=describe_data(previous.spec.train_data, previous.spec.dataset_revision),
    )


def final_metrics(lineage: Lineage) -> dict[str, float]:
    """The metrics of the attempt that completed (else the latest attempt's)."""
    for attempt in reversed(lineage.attempts):
        if attempt.status is AttemptStatus.COMPLETED:
            return dict(attempt.metrics)
    latest = lineage.latest_attempt
    return dict(latest.metrics) if latest else {}


def regressions(previous: dict[str, float], current: dict[str, float], *,
                threshold: float = DEFAULT_REGRESSION_POINTS) -> tuple[MetricChange, ...]:
    """The quality metrics ``current`` dropped on against ``previous`` by more than ``threshold`` points (a
    candidate model against the one serving: a promotion that makes the endpoint worse asks first)."""
    return tuple(change for change in _changes(previous, current, threshold) if change.regressed)


def change_words(changes: tuple[MetricChange, ...]) -> str:
    """``eval_accuracy 1 → 0.54 (-46.00 points)``, each change once, joined by semicolons."""
    return "; ".join(f"{c.name} {c.previous:g} → {c.current:g} ({c.change_points:+.2f}"
                     f"{' points' if c.quality else ''})" for c in changes)


def _is_quality(name: str) -> bool:
    base = name.lower()
    for prefix in _METRIC_PREFIXES:
        base = base.removeprefix(prefix)
    return base in QUALITY_METRICS


def _changes(previous: dict[str, float], current: dict[str, float], threshold: float) -> tuple[MetricChange, ...]:
    out = []
    for name in sorted(set(previous) & set(current)):
        before, after = float(previous[name]), float(current[name])
        quality = _is_quality(name)
        # Accuracy 0.91 and SQuAD EM 81.2 are both "points" people read on a 0-100 scale.
        scale = 100.0 if quality and abs(before) <= 1 and abs(after) <= 1 else 1.0
        change = (after - before) * scale
        out.append(MetricChange(name, before, after, round(change, 4), quality, quality and -change > threshold))
    return tuple(out)

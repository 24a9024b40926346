"""A promotion, checked and not started: the endpoint as it is, the model that would replace it, the new
endpoint config (instances, cost), and how traffic would shift. Both sides carry what a person compares
before pressing Promote: metrics, lineage, package, cost per hour.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from jobs.comparison import MetricChange, change_words, regressions
from jobs.endpoints import texts
from jobs.endpoints.options import DeployOptions
from jobs.endpoints.port import DeployRequest, Rollout, UpdateRequest
from jobs.endpoints.store import Endpoint
from jobs.errors import SpecError
from jobs.lineage import Lineage
from jobs.planning.prices import hourly_usd

#: A canary needs a fleet to take a share of: below this many instances the update goes all at once.
CANARY_MIN_INSTANCES = 2
DEFAULT_CANARY_PERCENT = 10
DEFAULT_WAIT_SECONDS = 300


@dataclass(frozen=True)
class Side:
    """One side of the card: what serves now, or what would."""

    lineage_id: str
    job_name: str
    metrics: dict[str, float]
    package: str | None  # "sentiment v3", when registered
    approval: str | None  # its approval status
    where: str
    hourly_usd: float | None  # None: serverless, or an unknown price


@dataclass(frozen=True)
class PromotionPlan:
    endpoint: Endpoint
    lineage: Lineage  # the new model's
    update: UpdateRequest
    current: Side
    new: Side
    options: dict[str, str]  # as written (the Promote button carries them)
    framework_note: str | None

    @property
    def name(self) -> str:
        return self.endpoint.name

    @property
    def model(self) -> DeployRequest:
        assert self.update.model is not None
        return self.update.model

    def headline(self) -> str:
        return texts.PROMOTING.format(lineage=self.lineage.id, name=self.name, current=self.current.lineage_id,
                                      rollout=rollout_words(self.update.rollout))

    def summary(self) -> str:
        text = f"{self.headline()} {texts.PROMOTE_FOLLOW}"
        return f"{text} {self.framework_note}" if self.framework_note else text

    @property
    def regressions(self) -> tuple[MetricChange, ...]:
        """The quality metrics the new model is worse on than what serves (jobs/comparison.py's threshold):
        such a promotion asks first."""
        return regressions(self.current.metrics, self.new.metrics)

    def regression_sentence(self) -> str:
        """What a person confirms before a promotion that makes the endpoint worse; "" when it does not."""
        changes = self.regressions
        if not changes:
            return ""
        return texts.PROMOTION_REGRESSES.format(lineage=self.lineage.id, name=self.name,
                                                current=self.current.lineage_id, changes=change_words(changes))

    def button_value(self) -> str:
        """What the Promote button carries: the job, the endpoint and the options as written, and ``ok`` when
        the card it is on asked about the regression (a button without it asks at the press)."""
        fields: dict[str, object] = {"job": self.lineage.id, "endpoint": self.name, "options": self.options}
        if self.regressions:
            fields["ok"] = 1
        return json.dumps(fields, separators=(",", ":"))


def rollout_words(rollout: Rollout) -> str:
    words = (texts.ROLLOUT_CANARY.format(percent=rollout.canary_percent, wait=rollout.wait_seconds)
             if rollout.canary_percent else texts.ROLLOUT_ALL)
    if rollout.alarm:
        words += texts.ROLLOUT_ALARM.format(alarm=rollout.alarm)
    return words


def rollout_for(opts: DeployOptions, *, endpoint: str, instance_count: int, serverless: bool,
                inherited_alarm: str) -> Rollout:
    """The options' alarm (``yes``: the bot names one for the endpoint), else the one its last promotion
    had; a canary step when the fleet has room for one (a single instance cannot be split)."""
    alarm: str | None = inherited_alarm or None
    if "alarm" in opts.given:
        alarm = f"{endpoint}-5xx" if opts.alarm == "yes" else opts.alarm
    if serverless:
        return Rollout(canary_percent=None, wait_seconds=0, alarm=None)  # no blue/green for serverless
    canary = opts.canary_percent or DEFAULT_CANARY_PERCENT
    return Rollout(canary_percent=canary if instance_count >= CANARY_MIN_INSTANCES else None,
                   wait_seconds=DEFAULT_WAIT_SECONDS, alarm=alarm)


def instances_for(opts: DeployOptions, endpoint: Endpoint) -> tuple[str, int, bool, int]:
    """(instance type, count, serverless, memory) of the new config: the endpoint's own unless the options
    name others."""
    sizing = {"instance_type", "instance_count", "serverless", "memory_mb", "max_concurrency"}
    if not opts.given & sizing:
        return endpoint.instance_type, endpoint.instance_count, endpoint.serverless, endpoint.memory_mb
    return opts.instance_type, opts.instance_count, opts.serverless, opts.memory_mb


def hourly(backend: str, instance_type: str, count: int, serverless: bool) -> float | None:
    if backend == "local":
        return 0.0
    if serverless:
        return None
    try:
        return hourly_usd(instance_type) * count
    except (SpecError, KeyError):
        return None

"""The steps after a lineage completes that close the nightly loop: register its model package, then
promote it into its schedule's endpoint when the schedule says so (or offer it with a Promote button).

They run as steps of the ending stage (``ReleaseSteps.all``, added in bot/wiring.py ``ending_steps``), which
remembers each as done and retries a failure with its backoff. Each is keyed by the lineage id and safe to run
twice: the package row and the remote package are found before they are made, a scheduled promotion carries
the request id ``schedule:<lineage>``, and the channel's line has the dedup key ``release:<lineage>``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from jobs.endings.stage import COMPLETED_ONLY, Step, StepContext
from jobs.errors import BackendUnavailable, TrainbotError
from jobs.lineage import Lineage
from jobs.registry.service import RegistryService
from jobs.releases import texts
from jobs.schedules.promotion import PromotionDecision, Verdict, decide_promotion
from jobs.schedules.service import schedule_actor
from jobs.schedules.store import Schedule
from jobs.store.store import Store

if TYPE_CHECKING:
    from jobs.endpoints.revisions import Revision
    from jobs.endpoints.service import EndpointService
    from jobs.schedules.service import ScheduleService

log = logging.getLogger(__name__)

REGISTER = "register_model"
PROMOTE = "promote_if_scheduled"


class ReleaseSteps:
    def __init__(self, *, store: Store, registry: RegistryService,
                 schedules: ScheduleService | None = None, endpoints: EndpointService | None = None) -> None:
        self._store = store
        self._registry = registry
        self._schedules = schedules
        self._endpoints = endpoints

    # -- the steps --------------------------------------------------------------------------------

    def all(self) -> list[Step]:
        """The two steps, for every completed lineage, the promotion once the package is registered."""
        return [
            Step(REGISTER, lambda ctx: self.register_model_package(ctx.lineage.id), on=COMPLETED_ONLY),
            Step(PROMOTE, self._promote_step, on=COMPLETED_ONLY, needs=(REGISTER,)),
        ]

    def register_model_package(self, lineage_id: str) -> str | None:
        """The package's label ("sentiment v3"); None when the lineage produced no model."""
        package = self._registry.register(lineage_id)
        return None if package is None else package.label

    def _promote_step(self, ctx: StepContext) -> str | None:
        decision = self.promote_if_scheduled(ctx.lineage.id)
        self._registry.packages.mark_released(ctx.lineage.id)
        return None if decision is None else decision.verdict.value

    def promote_if_scheduled(self, lineage_id: str) -> PromotionDecision | None:
        """A scheduled run with `endpoint=`: promoted when better and `deploy_if_better=yes`, else offered;
        the schedule's channel hears which in one line. None when its schedule promotes into no endpoint."""
        lineage = self._store.get_lineage(lineage_id)
        schedule = self._schedule_of(lineage)
        if schedule is None or self._schedules is None:
            return None
        decision = decide_promotion(schedule, lineage.id, self._schedules.compare_with_previous(lineage))
        if decision is None:
            return None
        revision, refusal = None, ""
        if decision.automatic:
            revision, refusal = self._promote(schedule, lineage, decision)
        self._announce(schedule, lineage, decision, revision, refusal)
        return decision

    def _promote(self, schedule: Schedule, lineage: Lineage,
                 decision: PromotionDecision) -> tuple[Revision | None, str]:
        if self._endpoints is None:
            return None, "endpoints are not set up on this bot."
        previous = decision.comparison.previous_lineage_id if decision.comparison else "-"
        try:
            revision = self._endpoints.promotions.promote_once(
                lineage.id, decision.endpoint, request_id=f"schedule:{lineage.id}", actor=schedule_actor(schedule),
                reason=f"schedule {schedule.name}: better than {previous}")
        except BackendUnavailable:
            raise  # the cloud did not answer: the next cycle tries again
        except TrainbotError as exc:
            log.info("schedule %s: %s not promoted into %s: %s", schedule.name, lineage.id, decision.endpoint,
                     exc.user_message())
            return None, exc.user_message()
        return revision, ""

    # -- the line ---------------------------------------------------------------------------------

    def _announce(self, schedule: Schedule, lineage: Lineage, decision: PromotionDecision,
                  revision: Revision | None, refusal: str) -> None:
        if schedule.channel is None:
            return
        endpoint = self._endpoints.promotion_target({"name": decision.endpoint}) if self._endpoints else None
        current = self._endpoints.get(endpoint).lineage_id if endpoint and self._endpoints else "-"
        values = {"schedule": schedule.name, "lineage": lineage.id, "endpoint": decision.endpoint,
                  "previous": decision.comparison.previous_lineage_id if decision.comparison else "-",
                  "changes": decision.changes() or texts.NO_CHANGES, "current": current,
                  "reason": refusal.rstrip(".") + "." if refusal else ""}
        if revision is not None:
            values["current"] = self._serving_before(revision)
            text = texts.PROMOTED.format(**values)
        elif decision.automatic:
            text = texts.REFUSED.format(**values)
        elif endpoint is None:
            verdict = texts.VERDICT_WORDS[decision.verdict.value].format(previous=values["previous"])
            text = texts.NO_ENDPOINT.format(**values, verdict=verdict)
        else:
            text = {Verdict.REGRESSED: texts.REGRESSED, Verdict.BETTER: texts.BETTER,
                    Verdict.NOT_BETTER: texts.NOT_BETTER, Verdict.FIRST: texts.FIRST}[decision.verdict].format(**values)
        payload = {"kind": texts.RELEASE, "text": text, "schedule": schedule.name, "lineage_id": lineage.id,
                   "job_name": None, "endpoint": decision.endpoint, "verdict": decision.verdict.value,
                   "revision": revision.id if revision else None,
                   "offer": revision is None and endpoint is not None}
        # lineage_id None: the line goes into the channel itself, not the job's thread.
        self._store.outbox.enqueue(kind=texts.RELEASE, payload=payload, channel=schedule.channel,
                                   dedup_key=f"{texts.RELEASE}:{lineage.id}")

    def _serving_before(self, revision: Revision) -> str:
        if self._endpoints is None or not revision.replaces:
            return "-"
        return self._endpoints.promotions.revisions.get(revision.replaces).lineage_id

    def _schedule_of(self, lineage: Lineage) -> Schedule | None:
        if lineage.schedule is None or self._schedules is None:
            return None
        return self._schedules.find(lineage.schedule)

"""Routing: once an outbox event has reached its job's thread, the same event goes to every channel subscribed
to it (/notify) as one short line with a link to the thread, and to the launcher as a DM when they asked for
one (`notify=dm`, `/notify dm on`).

The fan-out is a step of outbox delivery (handlers/notify.py): it reads the event from the entry's kind and
queues one `routed` entry per subscribed channel, keyed by event and channel, so a fan-out run twice queues
nothing twice, and each channel's line goes through the same outbox: delivered exactly once, deferred on an
outage, paced per channel by the chat. Which outbox kinds are which event:
- launched: the first `state` line of attempt 1 that says InProgress (once per lineage);
- interrupted, relaunched, completed, failed, gave-up: the kinds of the same names;
- regression: a `completed` scheduled run whose quality metric dropped against the schedule's previous run;
- endpoint-idle: the daily `endpoints_idle` note.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from handlers import blocks as bk
from handlers import texts
from handlers.cards import billed, mention
from handlers.chat import Chat, ChatUnavailable, LinkingChat
from handlers.context import Services
from jobs.endpoints import texts as endpoint_texts
from jobs.errors import NotFound
from jobs.lifecycle import events
from jobs.lineage import Lineage
from jobs.notifications import rules
from jobs.notifications.rules import JobFacts
from jobs.notifications.service import NotificationService
from jobs.notifications.store import Subscription
from jobs.planning.prices import usd
from jobs.records import Actor, RemoteStatus
from jobs.reporting.spend import lineage_cost_so_far
from jobs.store.rows import Notification

log = logging.getLogger(__name__)

ROUTED = "routed"  # outbox kind of one routed line: payload {event, text, lineage_id, channel}
KINDS = (ROUTED,)
#: Endings that may send the launcher a DM (failed and gave_up by default, every one with notify=dm).
DM_KINDS = (events.COMPLETED, events.FAILED, events.GAVE_UP, events.STOPPED)
_FAILURES = (events.FAILED, events.GAVE_UP)
_EVENT_OF_KIND = {
    events.INTERRUPTED: rules.INTERRUPTED,
    events.RELAUNCHED: rules.RELAUNCHED,
    events.COMPLETED: rules.COMPLETED,
    events.FAILED: rules.FAILED,
    events.GAVE_UP: rules.GAVE_UP,
    endpoint_texts.ENDPOINTS_IDLE: rules.ENDPOINT_IDLE,
}
REASON_CHARS = 200
#: Events whose line quotes what the job printed (its failure reason).
_FAILURE_EVENTS = (rules.FAILED, rules.GAVE_UP)


@dataclass(frozen=True)
class Routed:
    event: str
    key: str  # with the channel: the routed entry's dedup key
    text: str  # the line, less the thread link (added when it is delivered)
    #: The line without what the job printed (its failure reason), for a channel whose subscribers may not
    #: read that job's failure lines; None when the line holds nothing of the kind.
    withheld: str | None = None


def notifications(services: Services) -> NotificationService:
    """The notification rules over the services' store (stateless: built where needed)."""
    return NotificationService(services.store, clock=services.clock, policy=services.jobs.policy,
                               most_per_user=services.settings.trainbot_max_subscriptions_per_user)


# ---------------------------------------------------------------- fan-out


def fan_out(services: Services, notification: Notification) -> int:
    """Queue one routed line per channel subscribed to the events in ``notification``; returns how many
    were queued now (0 when a previous run of this step queued them)."""
    lineage = _lineage(services, notification.lineage_id)
    service = notifications(services)
    queued = 0
    for routed in _routable(services, notification, lineage):
        jobs = _facts(services, routed.event, lineage, notification.payload)
        for channel, subscriptions in service.subscribers_for(routed.event, jobs).items():
            text = routed.text
            if routed.withheld is not None and not _may_read(services, lineage, channel, subscriptions):
                text = routed.withheld
            payload = {"kind": ROUTED, "event": routed.event, "text": text, "channel": channel,
                       "lineage_id": lineage.id if lineage else None, "job_name": None}
            queued += services.store.outbox.enqueue(kind=ROUTED, payload=payload, dedup_key=f"{routed.key}:{channel}",
                                             lineage_id=lineage.id if lineage else None, channel=channel)
    return queued


def _routable(services: Services, notification: Notification, lineage: Lineage | None) -> list[Routed]:
    payload, kind = notification.payload, notification.kind
    found: list[Routed] = []
    if kind == events.STATE and lineage is not None and _first_running(lineage, payload):
        found.append(Routed(rules.LAUNCHED, f"route:{rules.LAUNCHED}:{lineage.id}", _launched(lineage)))
    event = _EVENT_OF_KIND.get(kind)
    if event == rules.ENDPOINT_IDLE:
        hours = services.settings.trainbot_endpoint_idle_hours
        found.append(Routed(event, f"route:{event}:{notification.dedup_key}", _idle_line(payload, hours)))
    elif event in _FAILURE_EVENTS and lineage is not None:
        found.append(Routed(event, f"route:{event}:{notification.dedup_key}", _line(event, lineage, payload),
                            withheld=_line(event, lineage, {**payload, "reason": None}, withheld=True)))
    elif event is not None and lineage is not None:
        found.append(Routed(event, f"route:{event}:{notification.dedup_key}", _line(event, lineage, payload)))
    if kind == events.COMPLETED and lineage is not None:
        regression = _regression(services, lineage)
        if regression is not None:
            found.append(Routed(rules.REGRESSION, f"route:{rules.REGRESSION}:{lineage.id}", regression))
    return found


def _may_read(services: Services, lineage: Lineage | None, channel: str, subscriptions: list[Subscription]) -> bool:
    """A failure line goes to the job's own channel, and to a channel one of whose subscribers routing it
    there may read it (its launcher or an admin: AccessPolicy.may_read_logs)."""
    if lineage is None:
        return False
    policy = services.jobs.policy
    return channel == lineage.channel or any(
        policy.may_read_logs(Actor(s.created_by, via=s.via), lineage) for s in subscriptions)


def _first_running(lineage: Lineage, payload: dict[str, Any]) -> bool:
    # The watcher's first line about attempt 1 once the backend has it; the dedup key keeps it to one.
    return payload.get("job_name") == f"{lineage.id}-1" and payload.get("status") == RemoteStatus.IN_PROGRESS.value


def _facts(services: Services, event: str, lineage: Lineage | None, payload: dict[str, Any]) -> list[JobFacts] | None:
    if lineage is not None:
        return [_fact(lineage)]
    if event != rules.ENDPOINT_IDLE or services.endpoints is None:
        return None
    facts = []
    for name in payload.get("endpoints") or []:
        try:
            facts.append(_fact(services.store.get_lineage(services.endpoints.get(str(name)).lineage_id)))
        except NotFound:
            continue
    return facts


def _fact(lineage: Lineage) -> JobFacts:
    return JobFacts(launched_by=lineage.launched_by, schedule=lineage.schedule, preset=lineage.spec.preset)


def _lineage(services: Services, lineage_id: str | None) -> Lineage | None:
    if not lineage_id:
        return None
    try:
        return services.store.get_lineage(lineage_id)
    except NotFound:
        return None


# ---------------------------------------------------------------- the lines


def _common(lineage: Lineage) -> dict[str, Any]:
    """The values every job line takes. `{link}` stays a placeholder: the thread's link is filled in when the
    line is delivered, when the job's card (and so its permalink) is sure to exist."""
    spec = lineage.spec
    return {"lineage": lineage.id, "who": mention(lineage.launched_by), "model": bk.escape(spec.model_label),
            "count": spec.instance_count, "instance": spec.instance_type, "spot": " (spot)" if spec.spot else "",
            "link": "{link}"}


def _launched(lineage: Lineage) -> str:
    return texts.ROUTED[rules.LAUNCHED].format(**_common(lineage))


def _line(event: str, lineage: Lineage, payload: dict[str, Any], *, withheld: bool = False) -> str:
    values = _common(lineage)
    if event == rules.INTERRUPTED:
        values["instance"] = payload.get("instance_type") or values["instance"]
    elif event == rules.RELAUNCHED:
        values.update(job=payload.get("job_name", ""), attempt=payload.get("attempt", "?"),
                      instance=payload.get("instance_type", ""),
                      market="spot" if payload.get("spot") else "on-demand",
                      change=f"; {bk.escape(str(payload['change']))}" if payload.get("change") else "")
    elif event == rules.COMPLETED:
        report = payload.get("report") or {}
        values.update(metrics=_metrics(report), cost=billed(float(report.get("cost_usd") or 0.0), lineage.backend))
    elif event in _FAILURE_EVENTS:
        values.update(reason=texts.REASON_IN_THREAD if withheld else _reason(payload),
                      attempts=payload.get("attempts", len(lineage.attempts)))
    return texts.ROUTED[event].format(**values)


def _idle_line(payload: dict[str, Any], hours: float) -> str:
    names = [str(name) for name in payload.get("endpoints") or []]
    return texts.ROUTED[rules.ENDPOINT_IDLE].format(
        count=len(names), names=", ".join(names[:10]) + (" …" if len(names) > 10 else ""), hours=f"{hours:g}",
        total=usd(float(payload.get("running_usd") or 0.0)))


def _regression(services: Services, lineage: Lineage) -> str | None:
    if services.schedules is None or lineage.schedule is None:
        return None
    try:
        comparison = services.schedules.compare_with_previous(lineage)
    except Exception:  # a comparison is extra news: the completed line still goes out
        log.exception("could not compare %s with its previous run", lineage.id)
        return None
    if comparison is None or not comparison.regressed:
        return None
    changes = "; ".join(texts.REGRESSION_CHANGE.format(name=c.name, before=c.previous, after=c.current,
                                                       points=c.change_points)
                        for c in comparison.changes if c.regressed)
    return texts.ROUTED[rules.REGRESSION].format(**_common(lineage), schedule=bk.escape(lineage.schedule),
                                                 previous=comparison.previous_lineage_id, changes=changes)


def _metrics(report: dict[str, Any]) -> str:
    headline = report.get("headline") or {}
    if not isinstance(headline, dict) or not headline:
        return ""
    return texts.METRICS_PREFIX + ", ".join(f"{bk.escape(str(k))} {_number(v)}" for k, v in headline.items())


def _number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else bk.escape(str(value))


def _reason(payload: dict[str, Any]) -> str:
    return bk.escape(bk.truncate(str(payload.get("reason") or "no reason given").rstrip("."), REASON_CHARS))


# ---------------------------------------------------------------- delivering a routed line


def deliver(services: Services, chat: Chat, notification: Notification, *,
            post: Callable[[str, str], object] | None = None) -> None:
    """Post one routed line into its channel, with the link to the job's thread as it is now. ``post`` is
    the outbox's (it marks the post so a retry finds it instead of posting again); plain chat.post without."""
    payload = notification.payload
    channel = str(payload.get("channel") or notification.channel or "")
    if not channel:
        return
    lineage = _lineage(services, notification.lineage_id)
    text = bk.fallback(str(payload.get("text") or "").replace("{link}", thread_link(chat, lineage)))
    # One line of mrkdwn, no blocks: Slack renders a message's text as mrkdwn.
    (post or (lambda where, line: chat.post(where, line)))(channel, text)


def thread_link(chat: Chat, lineage: Lineage | None) -> str:
    """`<permalink|Thread>` where the chat gives permalinks, else the channel the thread is in."""
    if lineage is None or not lineage.channel:
        return texts.ROUTED_NO_THREAD if lineage is not None else ""
    if lineage.message_ts and isinstance(chat, LinkingChat):
        try:
            url = chat.permalink(lineage.channel, lineage.message_ts)
        except ChatUnavailable:
            url = None
        if url:
            return texts.ROUTED_LINK.format(url=url)
    return texts.THREAD_LINK.format(channel=lineage.channel)


# ---------------------------------------------------------------- DMs


def wants_dm(services: Services, kind: str, lineage: Lineage | None) -> bool:
    if lineage is None or kind not in DM_KINDS:
        return False
    return notifications(services).wants_dm(lineage.launched_by, lineage.spec.notify, failure=kind in _FAILURES)


def dm_text(services: Services, chat: Chat, kind: str, lineage: Lineage, payload: dict[str, Any]) -> str:
    """The outcome, the headline metrics, the cost and the link to the thread, in one message."""
    report = payload.get("report") or {}
    cost = report.get("cost_usd") if kind == events.COMPLETED else None
    values = {
        "lineage": lineage.id,
        "link": texts.THREAD_IN.format(link=thread_link(chat, lineage)) if lineage.channel else "",
        "cost": billed(float(cost) if isinstance(cost, int | float) else lineage_cost_so_far(lineage, services.clock.now()),
                       lineage.backend),
        "metrics": _metrics(report),
        "savings": texts.DM_SAVINGS.format(savings=report["spot_savings"]) if report.get("spot_savings") else "",
        "reason": _reason(payload),
        "attempts": payload.get("attempts", len(lineage.attempts)),
    }
    if kind == events.STOPPED:
        values["reason"] = f": {_reason(payload)}" if payload.get("reason") else ""
    return bk.fallback(texts.DM[kind].format(**values).strip())

"""Subscriptions and DM defaults with the access rules applied, and the two routing questions the outbox
asks: which channels get this event, and does the launcher want a direct message.

Access: subscribing, unsubscribing and setting a DM default need the same right as using the bot
(TRAINBOT_ALLOWED_USERS, TRAINBOT_ALLOWED_CHANNELS). A subscription belongs to its author: /notify on changes
only the caller's own (anyone else's in the channel stays as it is, and the caller gets one of their own), and
a subscription is removed by its author or an admin. Each person has at most
TRAINBOT_MAX_SUBSCRIPTIONS_PER_USER. When routing, a channel that TRAINBOT_ALLOWED_CHANNELS no longer names
gets nothing, and a channel two people subscribed gets each message once.
"""

from __future__ import annotations

import builtins
import logging
from dataclasses import dataclass

from jobs.clock import Clock
from jobs.notifications.rules import Filter, JobFacts, matches
from jobs.notifications.store import Subscription, SubscriptionStore
from jobs.permissions import AccessPolicy
from jobs.records import Actor
from jobs.store.store import Store

log = logging.getLogger(__name__)

#: Surfaces whose subscriptions the channel rule does not apply to (the operator's own terminal).
_OPERATOR_VIA = ("console", "cli")


@dataclass(frozen=True)
class Subscribed:
    subscription: Subscription  # the caller's own
    before: tuple[str, ...] | None  # the events their subscription had, when this replaced them
    others: tuple[Subscription, ...]  # other people's with the same filter here, left as they are


@dataclass(frozen=True)
class Unsubscribed:
    removed: tuple[Subscription, ...]
    kept: tuple[Subscription, ...]  # matching ones this person may not remove (someone else's)


class NotificationService:
    def __init__(self, store: Store, *, clock: Clock, policy: AccessPolicy, most_per_user: int | None = None) -> None:
        self._store = store
        self._rows = SubscriptionStore(store, clock=clock)
        self._policy = policy
        self._most = most_per_user

    # -- /notify on | off | list ------------------------------------------------------------------

    def subscribe(self, actor: Actor, channel: str, events: tuple[str, ...], flt: Filter) -> Subscribed:
        """The caller's own subscription of ``channel`` with ``flt`` made or changed; nobody else's is touched."""
        self._policy.check_can_use(actor)
        subscription, before = self._rows.upsert(channel=channel, events=events, flt=flt,
                                                created_by=actor.user_id, via=actor.via, most=self._most)
        self._store.audit(actor, "notify.on", channel, {"events": list(events), "filter": flt.kind,
                                                        "value": flt.value, "before": list(before or ())})
        others = tuple(s for s in self._rows.for_channel(channel)
                       if s.filter == flt and s.created_by != actor.user_id)
        return Subscribed(subscription, before, others)

    def unsubscribe(self, actor: Actor, channel: str, flt: Filter | None) -> Unsubscribed:
        """The channel's subscriptions (with ``flt``, or all): removed where ``actor`` added them or is an
        admin; the others are named back."""
        self._policy.check_can_use(actor)
        chosen = [s for s in self._rows.for_channel(channel) if flt is None or s.filter == flt]
        mine = [s for s in chosen if s.created_by == actor.user_id or self._policy.is_admin(actor)]
        self._rows.remove([s.id for s in mine])
        if mine:
            self._store.audit(actor, "notify.off", channel, {"removed": [s.id for s in mine]})
        return Unsubscribed(tuple(mine), tuple(s for s in chosen if s not in mine))

    def list(self, channel: str) -> list[Subscription]:
        return self._rows.for_channel(channel)

    # -- /notify dm on | off ----------------------------------------------------------------------

    def set_dm_default(self, actor: Actor, dm: bool) -> None:
        self._policy.check_can_use(actor)
        self._rows.set_dm_default(actor.user_id, dm)
        self._store.audit(actor, "notify.dm", actor.user_id, {"dm": dm})

    def dm_default(self, user_id: str) -> bool | None:
        return self._rows.dm_default(user_id)

    # -- routing ----------------------------------------------------------------------------------

    def channels_for(self, event: str, jobs: builtins.list[JobFacts] | None) -> builtins.list[str]:
        """The channels subscribed to ``event`` for any of ``jobs`` (None: an event about no job, which
        only unfiltered subscriptions get), each once, in subscription order."""
        return list(self.subscribers_for(event, jobs))

    def subscribers_for(self, event: str,
                        jobs: builtins.list[JobFacts] | None) -> dict[str, builtins.list[Subscription]]:
        """channels_for's channels, each with the subscriptions that route ``event`` there (whose authors
        decide what the line may say: a failure line only for those who may read it)."""
        channels: dict[str, builtins.list[Subscription]] = {}
        for subscription in self._rows.all():
            if event not in subscription.events or not self._channel_allowed(subscription):
                continue
            if jobs is None:
                hit = not subscription.filter.kind
            else:
                hit = any(matches(subscription.filter, job) for job in jobs)
            if hit:
                channels.setdefault(subscription.channel, []).append(subscription)
        return channels

    def wants_dm(self, launched_by: str, spec_notify: str | None, *, failure: bool) -> bool:
        """`notify=dm` (or `notify=none`) on the job wins; then the launcher's `/notify dm` default; with
        neither, only failures and give-ups are sent (the bot's behaviour before /notify existed)."""
        if spec_notify == "dm":
            return True
        if spec_notify == "none":
            return False
        default = self._rows.dm_default(launched_by)
        return failure if default is None else default

    def _channel_allowed(self, subscription: Subscription) -> bool:
        allowed = self._policy.allowed_channels
        if not allowed or subscription.via in _OPERATOR_VIA or subscription.channel in allowed:
            return True
        log.info("subscription %s: channel %s is no longer allowed; skipped", subscription.id, subscription.channel)
        return False


__all__ = ["NotificationService", "Subscribed", "Unsubscribed"]

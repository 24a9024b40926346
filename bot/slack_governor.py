"""The one governor of Slack's Web API: every call a GovernedWebClient makes (Bolt's, the chat's, the inner
calls of files_upload_v2, and any added later: it wraps `api_call`, which every method goes through) first
takes a slot of its method's tier and, for posts, of its channel's pace, at the priority of the work it is
for (jobs.rate_limits.prioritised; unmarked calls are a person waiting). The ledger keeps the buckets: in
memory, or in the store (jobs/store/rate_ledger.py) so every bot on one database shares the workspace's budget.

A 429 blocks its method for Retry-After for every caller and replica (the ledger holds it) and is sent again
once that has passed (a 429 stored nothing), while the wait fits the priority's patience; otherwise the
caller gets RateLimitedError (SlackChat turns it into handlers.chat.ChatBusy, which the outbox defers).

Tiers are Slack's method reference (Tier 2 20+ a minute, Tier 3 50+, Tier 4 100+; chat.postMessage about
one a second a channel). The rates here sit under them: a bucket admits at most ``per_minute + burst`` in
any minute, so each stays inside its tier in every sliding minute.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web import SlackResponse

from jobs.clock import Clock
from jobs.rate_limits import (
    MAX_WAIT_SECONDS,
    Budget,
    MemoryLedger,
    Priority,
    Rate,
    RateLedger,
    current_priority,
)

log = logging.getLogger(__name__)

TIER_1 = Rate(per_minute=1, burst=3)
TIER_2 = Rate(per_minute=17, burst=3)
TIER_3 = Rate(per_minute=45, burst=5)
TIER_4 = Rate(per_minute=90, burst=10)
#: chat.postMessage's workspace-wide limit is "several hundred a minute": well under it.
POSTS_WORKSPACE = Rate(per_minute=200, burst=10)
#: About one message a second a channel, short bursts allowed: every method that puts a message there.
CHANNEL_PACE = Rate(per_minute=50, burst=2)
#: A method Slack's reference did not give us: paced as Tier 2, where most methods are.
UNKNOWN_TIER = TIER_2

SLACK_TIERS: Mapping[str, Rate] = {
    "apps.connections.open": TIER_1,
    "usergroups.list": TIER_2,
    "conversations.list": TIER_2,
    "users.list": TIER_2,
    "chat.update": TIER_3,
    "chat.delete": TIER_3,
    "chat.scheduleMessage": TIER_3,
    "conversations.open": TIER_3,
    # Tier 3 for internal apps like this one; a commercially distributed app outside the Marketplace gets
    # 1 a minute for these two since 2025 (Slack's rate-limit changelog).
    "conversations.history": TIER_3,
    "conversations.replies": TIER_3,
    "conversations.info": TIER_3,
    "reactions.add": TIER_3,
    "chat.postEphemeral": TIER_4,
    "chat.getPermalink": TIER_4,
    "views.open": TIER_4,
    "views.publish": TIER_4,
    "views.update": TIER_4,
    "views.push": TIER_4,
    "files.getUploadURLExternal": TIER_4,
    "files.completeUploadExternal": TIER_4,
    "users.info": TIER_4,
    "conversations.members": TIER_4,
    "auth.test": TIER_4,
    "chat.postMessage": POSTS_WORKSPACE,
}
#: Methods that put a message into a channel: each also waits for the channel's pace.
CHANNEL_PACED = frozenset({"chat.postMessage", "chat.postEphemeral", "chat.scheduleMessage",
                           "files.completeUploadExternal", "chat.meMessage"})
#: How often a 429 is sent again (after its Retry-After) before the caller is told to come back later.
RATE_LIMIT_RETRIES = 3
#: Retry-After past this is read as this (the outbox comes back then anyway).
MAX_RETRY_AFTER_SECONDS = 900.0
#: A rate no bucket ever reaches: the unpaced governor keeps only the Retry-After back-offs.
UNLIMITED = Rate(per_minute=1e9, burst=1_000_000)


class RateLimitedError(SlackClientError):
    """The governor held the call back (nothing was sent): Slack's limits allow it in ``retry_after`` s."""

    def __init__(self, method: str, retry_after: float) -> None:
        super().__init__(f"Slack {method} is rate limited: try again in {math.ceil(retry_after)} s")
        self.method = method
        self.retry_after = retry_after


class SlackGovernor:
    """Paces Web API calls by tier, channel and priority on ``ledger``; sleeps on ``clock``."""

    def __init__(self, ledger: RateLedger, clock: Clock, *, tiers: Mapping[str, Rate] = SLACK_TIERS,
                 channel_pace: Rate | None = CHANNEL_PACE, unknown: Rate = UNKNOWN_TIER) -> None:
        self._ledger = ledger
        self._clock = clock
        self._tiers = tiers
        self._channel_pace = channel_pace
        self._unknown = unknown
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self.rate_limited: Counter[str] = Counter()  # 429s Slack answered, by method
        self.held_back: Counter[str] = Counter()  # calls refused before sending (RateLimitedError), by method

    @classmethod
    def unpaced(cls, clock: Clock, ledger: RateLedger | None = None) -> SlackGovernor:
        """No tiers and no channel pace, Retry-After still honoured: for tests that post fast on loopback."""
        return cls(ledger or MemoryLedger(), clock, tiers={}, channel_pace=None, unknown=UNLIMITED)

    def budgets(self, method: str, channel: str | None) -> list[Budget]:
        """What a call of ``method`` (into ``channel``) draws on."""
        rate = self._tiers.get(method)
        if rate is None:
            rate = self._unknown
            if self._tiers and method not in self._warned:
                self._warned.add(method)
                log.info("no Slack tier known for %s: paced as %g a minute", method, rate.per_minute)
        budgets = [Budget(method, rate)]
        if channel and self._channel_pace is not None and method in CHANNEL_PACED:
            budgets.append(Budget(f"channel:{channel}", self._channel_pace))
        return budgets

    def call(self, method: str, channel: str | None, send: Callable[[], SlackResponse]) -> SlackResponse:
        """``send()`` once its slots are free; a 429 blocks ``method`` for everyone, then is retried."""
        priority = current_priority()
        budgets = self.budgets(method, channel)
        for tries_left in range(RATE_LIMIT_RETRIES, -1, -1):
            self._acquire(method, budgets, priority)
            try:
                return send()
            except SlackApiError as exc:
                retry_after = _retry_after(exc)
                if retry_after is None:
                    raise
                self._ledger.block(method, self._now() + retry_after)
                with self._lock:
                    self.rate_limited[method] += 1
                log.warning("Slack answered 429 to %s: Retry-After %g s, held for every caller", method,
                            retry_after)
                if not tries_left:
                    raise RateLimitedError(method, retry_after) from None
        raise AssertionError("unreachable")

    def _acquire(self, method: str, budgets: list[Budget], priority: Priority) -> None:
        patience = MAX_WAIT_SECONDS[priority]
        waited = 0.0
        while True:
            wait = self._ledger.take(budgets, priority, self._now())
            if wait <= 0:
                return
            if waited + wait > patience:
                with self._lock:
                    self.held_back[method] += 1
                raise RateLimitedError(method, wait)
            self._clock.sleep(wait)
            waited += wait

    def _now(self) -> float:
        return self._clock.now().timestamp()


def _retry_after(exc: SlackApiError) -> float | None:
    """Seconds Slack asked to wait, when ``exc`` is a 429 (1 s when it named none)."""
    response = exc.response
    if response is None or response.status_code != 429:
        return None
    headers = {str(k).lower(): v for k, v in (response.headers or {}).items()}
    raw = headers.get("retry-after")
    value = raw[0] if isinstance(raw, list) and raw else raw
    try:
        seconds = float(str(value)) if value is not None else 1.0
    except ValueError:
        seconds = 1.0
    if not math.isfinite(seconds) or seconds <= 0:
        seconds = 1.0  # a 429 always means wait a little
    return min(seconds, MAX_RETRY_AFTER_SECONDS)


def _channel_of(*bodies: dict | None) -> str | None:
    for body in bodies:
        if body:
            channel = body.get("channel") or body.get("channel_id")
            if isinstance(channel, str) and channel:
                return channel
    return None


class GovernedWebClient(WebClient):
    """A WebClient whose every Web API call goes through ``governor``."""

    def __init__(self, *args: Any, governor: SlackGovernor, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.governor = governor

    def api_call(  # type: ignore[override]
        self,
        api_method: str,
        *,
        http_verb: str = "POST",
        files: dict | None = None,
        data: dict | None = None,
        params: dict | None = None,
        json: dict | None = None,
        headers: dict | None = None,
        auth: dict | None = None,
    ) -> SlackResponse:
        def send() -> SlackResponse:
            return super(GovernedWebClient, self).api_call(
                api_method, http_verb=http_verb, files=files, data=data, params=params, json=json,
                headers=dict(headers) if headers else None, auth=auth)

        return self.governor.call(api_method, _channel_of(json, data, params), send)

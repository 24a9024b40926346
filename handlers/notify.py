"""Delivers the due outbox notifications (the controller's notices, the endings' announcements) into each
lineage's thread.

For each one: a thread reply rendered for its kind, the card's redraw asked for, a DM to the launcher when
the job ended and they want one (handlers/routing.py decides), the loss-curve PNG with the final report,
then the fan-out to subscribed channels (routing.fan_out queues their lines through this same outbox). A chat
error defers the notification with a backoff (the steps already done are remembered), so an outage delays
and never drops; a call the chat's rate limits held back is deferred to when they allow it.

Order and pace (handlers/pacing.py): endings and failures are delivered first, then state changes, each
at its priority; then the waiting cards are redrawn once each with their newest state, and live progress
takes whatever room the chat's limits leave.

A post whose answer was lost may still have been made. Where the chat can mark its posts (Slack, see
handlers.chat.MarkingChat), every post carries its row and step, and a row that may have been tried
before looks for its post before making it again: one message in the thread however often it is retried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from handlers import blocks as bk
from handlers import cards, launch_card, pacing, promotion, routing, texts
from handlers.chat import Chat, ChatBusy, ChatUnavailable, Mark, MarkingChat
from handlers.context import Services
from handlers.live import job_card
from jobs.errors import NotFound
from jobs.lifecycle import events
from jobs.lineage import Lineage
from jobs.rate_limits import prioritised
from jobs.store.rows import Notification

log = logging.getLogger(__name__)

#: How long a Slack-launched lineage's updates wait for its card to be posted before going in without one.
CARD_GRACE = timedelta(seconds=120)
CARD_WAIT = timedelta(seconds=5)
MAX_BACKOFF_SECONDS = 900.0
#: How long a delivering process holds a notification; another bot process on the same store takes it
#: over after that (a claimer that died drops nothing). Far longer than a post or an upload takes.
CLAIM_SECONDS = 300.0
PROGRESS_PREFIX = "notify:"
_ICONS = {
    events.STATE: ":small_blue_diamond:",
    events.INTERRUPTED: ":pause_button:",
    events.RELAUNCHED: ":recycle:",
    events.FAILED: ":x:",
    events.GAVE_UP: ":warning:",
    events.COMPLETED: ":white_check_mark:",
    events.STOPPED: ":octagonal_sign:",
    events.CURVES: ":chart_with_downwards_trend:",
}


class _NotYet(Exception):
    """The lineage's card is being posted right now: try again shortly."""


def deliver_due(services: Services, chat: Chat, *, limit: int = 20) -> int:
    """Deliver what is due (endings first), redraw the cards that asked, then those whose live progress
    moved; returns how many notifications were delivered (the rest are deferred)."""
    delivered = 0
    due = services.store.outbox.due_notifications(limit=limit, claim_seconds=CLAIM_SECONDS,
                                                  ranks=pacing.DELIVERY_RANKS)
    for notification in due:
        with prioritised(pacing.priority_of(notification.kind)):
            if deliver_one(services, chat, notification):
                delivered += 1
    pacing.redraw_cards(services, chat, limit=limit)
    pacing.redraw_progress(services, chat, limit=limit)
    return delivered


def deliver_one(services: Services, chat: Chat, notification: Notification) -> bool:
    store = services.store
    done = _progress(services, notification)
    try:
        _deliver(services, chat, notification, done)
        if notification.kind not in routing.KINDS:
            _step(done, "route", lambda: routing.fan_out(services, notification))
    except _NotYet:  # waiting for the card is no failed attempt: the backoff stays as it was
        store.outbox.wait(notification.id, until=services.clock.now() + CARD_WAIT, why="card not posted yet")
        return False
    except Exception as exc:
        _defer(services, notification, done, exc)
        return False
    store.outbox.mark_delivered(notification.id)
    if notification.attempts:  # a deferred one kept its progress: delivered, it is needed no more
        store.delete_meta(PROGRESS_PREFIX + str(notification.id))
    return True


def _defer(services: Services, notification: Notification, done: set[str], exc: Exception) -> None:
    if isinstance(exc, ChatUnavailable):
        log.warning("notification %s deferred: %s", notification.id, exc)
    else:
        log.exception("notification %s failed; deferred", notification.id)
    if isinstance(exc, ChatBusy):  # nothing was sent: come back when the chat's limits allow it
        delay = min(MAX_BACKOFF_SECONDS, max(1.0, exc.retry_after))
    else:
        delay = min(MAX_BACKOFF_SECONDS, 5.0 * 2 ** min(notification.attempts, 10))
    services.store.set_meta(PROGRESS_PREFIX + str(notification.id), ",".join(sorted(done)))
    services.store.outbox.defer(notification.id, until=services.clock.now() + timedelta(seconds=delay),
                         error=bk.truncate(f"{type(exc).__name__}: {exc}", 500))


def _progress(services: Services, notification: Notification) -> set[str]:
    if notification.attempts == 0:
        return set()
    saved = services.store.get_meta(PROGRESS_PREFIX + str(notification.id)) or ""
    return {step for step in saved.split(",") if step}


def _step(done: set[str], name: str, call: Callable[[], object]) -> None:
    if name in done:
        return
    call()
    done.add(name)


def _deliver(services: Services, chat: Chat, notification: Notification, done: set[str]) -> None:
    if notification.kind in routing.KINDS:  # a routed line for a subscribed channel
        routing.deliver(services, chat, notification,
                        post=lambda channel, text: _post(chat, notification, "post", channel, text))
        return
    lineage = _lineage_of(services, notification)
    channel = (lineage.channel if lineage else None) or notification.channel
    if channel is None:
        log.info("notification %s has no chat to go to (launched outside one)", notification.id)
        return
    if lineage is not None and lineage.message_ts is None:
        lineage = _with_card(services, chat, notification, lineage, channel, done)
    thread_ts = lineage.message_ts if lineage else None
    payload = notification.payload
    text, blocks = render(services, notification.kind, payload)
    if notification.kind != events.CURVES:  # late curves are their upload alone
        _step(done, "post", lambda: _post(chat, notification, "post", channel, text, blocks=blocks,
                                          thread_ts=thread_ts))
    if lineage is not None and lineage.message_ts:  # drawn by the redraw pass, once, with its newest state
        _step(done, "card", lambda: pacing.request_card(services, lineage.id, notification.kind))
    if lineage is not None and routing.wants_dm(services, notification.kind, lineage):
        _step(done, "dm", lambda: _dm(chat, notification, lineage.launched_by,
                                      routing.dm_text(services, chat, notification.kind, lineage, payload)))
    png = payload.get("png_path")
    if notification.kind in (events.COMPLETED, events.CURVES) and png and Path(png).is_file():
        title = texts.REPORT_PLOT_TITLE.format(lineage=payload.get("lineage_id", ""))
        _step(done, "upload", lambda: chat.upload_file(channel, Path(png), title=title, thread_ts=thread_ts))


def _lineage_of(services: Services, notification: Notification) -> Lineage | None:
    if not notification.lineage_id:
        return None
    try:
        return services.store.get_lineage(notification.lineage_id)
    except NotFound:
        log.warning("notification %s names an unknown lineage %s", notification.id, notification.lineage_id)
        return None


def _with_card(services: Services, chat: Chat, notification: Notification, lineage: Lineage, channel: str,
               done: set[str]) -> Lineage:
    """A lineage with no card yet: a Slack launch is posting it right now (wait a little, unless it went ahead
    without its card); anything else (a schedule, a launch whose card post failed) gets its card here, so its
    thread exists. A Slack launch's card may have been stored unconfirmed: it is found by its mark first."""
    young = services.clock.now() - lineage.created_at < CARD_GRACE
    if lineage.origin == "slack" and young and not launch_card.was_lost(services, lineage.id):
        raise _NotYet
    text, blocks = job_card(services, lineage)
    ts = launch_card.post_for_outbox(chat, lineage, channel, text, blocks)
    if ts is None:
        ts = _post(chat, notification, "card", channel, text, blocks=blocks)
        done.add("card")  # drawn now with its newest state; a card found may be older: the card step redraws it
    services.jobs.attach_message(lineage.id, channel, ts)
    return services.store.get_lineage(lineage.id)


def _post(chat: Chat, notification: Notification, step: str, channel: str, text: str, *,
          blocks: list[bk.Block] | None = None, thread_ts: str | None = None) -> str:
    if not isinstance(chat, MarkingChat):
        return chat.post(channel, text, blocks=blocks, thread_ts=thread_ts)
    return chat.post_once(channel, text, mark=_mark(notification, step), blocks=blocks, thread_ts=thread_ts,
                          look_first=_tried_before(notification))


def _dm(chat: Chat, notification: Notification, user: str, text: str) -> None:
    if not isinstance(chat, MarkingChat):
        chat.dm(user, text)
        return
    chat.dm_once(user, text, mark=_mark(notification, "dm"), look_first=_tried_before(notification))


def _mark(notification: Notification, step: str) -> Mark:
    return Mark(outbox_id=notification.id, step=step, key=notification.dedup_key)


def _tried_before(notification: Notification) -> bool:
    """A delivery of this row may have posted before: it was deferred, or claimed by a process that then
    stopped (its claim moved the row's next try past its creation)."""
    return notification.attempts > 0 or notification.next_try_at > notification.created_at


# ---------------------------------------------------------------- rendering


def render(services: Services, kind: str, payload: dict[str, Any]) -> tuple[str, list[bk.Block]]:
    """The thread reply of one event: plain text (notifications) and Block Kit."""
    if kind in promotion.KINDS:
        return promotion.render(kind, payload)
    summary = str(payload.get("text") or kind)
    icon = _ICONS.get(kind, "")
    line = f"{icon} {bk.escape(summary)}".strip()
    fallback = bk.fallback(bk.escape(summary))  # the notification's text: a failure reason is a script's words
    if kind == events.COMPLETED:
        report = payload.get("report") or {}
        return fallback, cards.report_blocks(str(payload.get("lineage_id", "")), report, summary)
    if kind == events.FAILED:
        return fallback, [bk.section(line), *_log_blocks(services, payload)]
    if kind == events.STATE:
        return fallback, [bk.context(line)]
    return fallback, [bk.section(line)]


def _log_blocks(services: Services, payload: dict[str, Any]) -> list[bk.Block]:
    lines = [str(line) for line in payload.get("log_tail") or []]
    if not lines:
        return []
    logs = logs_link(services, payload.get("job_name"))
    return [bk.code(lines, link=logs, cut_note=texts.LOG_CUT)]


def logs_link(services: Services, job_name: object) -> str | None:
    backend = services.backend
    if backend is None or not isinstance(job_name, str):
        return None
    try:
        link = backend.console_links(job_name).get("logs")
    except Exception:
        log.warning("no console links for %s", job_name)
        return None
    return link if link and link.startswith(("http://", "https://")) else None

"""What the outbox delivers first when the chat is busy, and how cards are redrawn within its limits.

- Each outbox kind has a priority (jobs.rate_limits.Priority): a job's ending and failures first, then state
  changes and routed lines; live progress last. Delivery takes due notifications in that order and makes
  their calls at that priority, so the chat's governor (Slack's: bot/slack_governor.py) gives the tier's
  room to what matters.
- A card is never redrawn in the middle of a delivery: the delivery asks for it (jobs/store/card_redraws.py)
  and the redraw pass draws each waiting card once, with its newest state, most important first. Twenty
  changes to one card are one chat.update.
- Progress redraws go last and never wait: they take what room the tier has left, the card showing the
  oldest figures first, so under load each card's refresh stretches (and the card says how fresh it is).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from handlers import routing
from handlers.chat import Chat, ChatBusy, ChatUnavailable
from handlers.context import Services
from handlers.live import job_card
from jobs.errors import NotFound
from jobs.lifecycle import events
from jobs.rate_limits import Priority, prioritised
from jobs.releases import texts as release_texts
from jobs.store.card_redraws import CardRedraws, Redraw
from jobs.store.runs import RunHistory

log = logging.getLogger(__name__)

KIND_PRIORITY: Mapping[str, Priority] = {
    events.COMPLETED: Priority.ENDING,
    events.FAILED: Priority.ENDING,
    events.GAVE_UP: Priority.ENDING,
    events.STOPPED: Priority.ENDING,
    events.CURVES: Priority.ENDING,  # the ending's late pictures: with its report, in the thread's order
    events.RELAUNCHED: Priority.CHANGE,
    events.INTERRUPTED: Priority.CHANGE,
    events.STATE: Priority.CHANGE,
    routing.ROUTED: Priority.CHANGE,
    release_texts.RELEASE: Priority.CHANGE,  # a schedule's promotion line, with its button
}
#: The outbox's delivery order (kind -> rank); kinds added later go after these, as changes.
DELIVERY_RANKS: Mapping[str, int] = {kind: int(priority) for kind, priority in KIND_PRIORITY.items()}


def priority_of(kind: str) -> Priority:
    return KIND_PRIORITY.get(kind, Priority.CHANGE)


def request_card(services: Services, lineage_id: str, kind: str) -> None:
    """Ask for the lineage's card to be redrawn for an event of ``kind`` (coalesced with any waiting)."""
    CardRedraws(services.store, services.clock).request(lineage_id, priority_of(kind))


def redraw_cards(services: Services, chat: Chat, *, limit: int = 20) -> int:
    """Draw the waiting cards, most important first, each once with its newest state; stops when the chat
    is busy (the rest go next pass). Returns how many were drawn."""
    redraws = CardRedraws(services.store, services.clock)
    runs = RunHistory(services.store, services.clock)
    drawn = 0
    for redraw in redraws.due(limit=limit):
        try:
            lineage = services.store.get_lineage(redraw.lineage_id)
        except NotFound:
            redraws.drawn(redraw)
            continue
        if lineage.channel and lineage.message_ts:
            runs.mark_current_progress_shown(lineage.id)  # the card drawn now shows it
            text, blocks = job_card(services, lineage)
            try:
                with prioritised(Priority(redraw.priority)):
                    chat.update(lineage.channel, lineage.message_ts, text, blocks=blocks)
            except ChatBusy as exc:
                log.info("card of %s waits: %s", lineage.id, exc)
                return drawn
            except ChatUnavailable as exc:
                _failed(redraws, redraw, exc)
                return drawn
            drawn += 1
        redraws.drawn(redraw)
    return drawn


def _failed(redraws: CardRedraws, redraw: Redraw, exc: ChatUnavailable) -> None:
    if redraws.failed(redraw):
        log.warning("card of %s not redrawn yet: %s", redraw.lineage_id, exc)
    else:
        log.warning("card of %s given up after repeated failures: %s", redraw.lineage_id, exc)


def redraw_progress(services: Services, chat: Chat, *, limit: int = 20) -> int:
    """Cards whose progress (jobs.lifecycle.progress) is newer than what they show, the oldest shown first,
    redrawn at the lowest priority: none waits for the chat, so progress takes only the room left. A redraw
    is idempotent, so two bot processes doing the same one harm nothing; a chat error ends the pass."""
    runs = RunHistory(services.store, services.clock)
    redrawn = 0
    for lineage_id, progress_at in runs.unshown_progress(limit=limit):
        try:
            lineage = services.store.get_lineage(lineage_id)
        except NotFound:
            runs.mark_progress_shown(lineage_id, progress_at)
            continue
        if lineage.channel and lineage.message_ts:
            text, blocks = job_card(services, lineage)
            try:
                with prioritised(Priority.PROGRESS):
                    chat.update(lineage.channel, lineage.message_ts, text, blocks=blocks)
            except ChatUnavailable as exc:
                log.debug("progress of %s not shown yet: %s", lineage_id, exc)
                return redrawn
            redrawn += 1
        runs.mark_progress_shown(lineage_id, progress_at)
    return redrawn

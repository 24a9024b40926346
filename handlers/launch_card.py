"""A job's launch card, posted once even when Slack's answer is lost.

Launch posts the card, then launches, then attaches the card to the lineage. A post whose connection dropped
or timed out may still have been stored by Slack: posted blindly again, the channel got two cards; left alone,
the outbox waited CARD_GRACE for a card that never came, counting each wait as a failed delivery (the report
came 100 s late, 15 minutes after one more failure). Now:

- the card carries a mark naming the launch's request id (metadata, as the outbox's posts do:
  handlers.chat.MarkingChat), and when its answer is lost it is looked for once (one conversations.history
  call: Slack allows that method one request a minute for a distributed app) before it is posted again;
- when even that fails (Slack is down), the launch goes ahead without a card and says so in the store
  (`record_lost`), so the outbox does not wait for it: it looks for the marked card once and attaches it, or
  posts it with the same mark (`post_for_outbox`); waiting for a card that is being posted is not a failure
  (jobs/store/outbox.py `wait`).
"""

from __future__ import annotations

import logging

from handlers import blocks as bk
from handlers.chat import ChannelUnreachable, Chat, ChatBusy, ChatUnavailable, Mark, MarkingChat
from handlers.context import Services
from jobs.lineage import Lineage

log = logging.getLogger(__name__)

#: The mark's step; its key is the launch's request id (the lineage's request_id), its outbox id 0 (no row).
STEP = "launch-card"
#: Store meta, set when a launch went ahead without its card: the outbox need not wait for it.
LOST_PREFIX = "launch-card-lost:"


def mark(request_id: str) -> Mark:
    return Mark(outbox_id=0, step=STEP, key=request_id)


def post(chat: Chat, channel: str, text: str, blocks: list[bk.Block], request_id: str) -> str:
    """The card's ts: posted with its mark; when the answer was lost, the one Slack stored, found by the mark,
    else posted again. ChatUnavailable (ChannelUnreachable, ChatBusy) as chat.post raises it."""
    if not isinstance(chat, MarkingChat):
        return chat.post(channel, text, blocks=blocks)
    try:
        return chat.post_once(channel, text, mark=mark(request_id), blocks=blocks)
    except (ChannelUnreachable, ChatBusy):
        raise  # nothing was stored: nothing to look for
    except ChatUnavailable as exc:
        log.warning("the launch card of %s may have been posted (%s): looking for it", request_id, exc)
    return chat.post_once(channel, text, mark=mark(request_id), blocks=blocks, look_first=True)


def record_lost(services: Services, lineage_id: str) -> None:
    """The lineage was launched without its card (it may exist in Slack, unconfirmed)."""
    services.store.set_meta(LOST_PREFIX + lineage_id, "1")


def was_lost(services: Services, lineage_id: str) -> bool:
    return services.store.get_meta(LOST_PREFIX + lineage_id) is not None


def post_for_outbox(chat: Chat, lineage: Lineage, channel: str, text: str, blocks: list[bk.Block]) -> str | None:
    """For a Slack launch whose card was never attached: the card Slack stored, found by its mark, or posted
    now with it; None for a lineage launched otherwise (the outbox posts its card with its own mark)."""
    if lineage.origin != "slack" or not lineage.request_id or not isinstance(chat, MarkingChat):
        return None
    return chat.post_once(channel, text, mark=mark(lineage.request_id), blocks=blocks, look_first=True)

"""Where the bot can post: a slash command reaches the bot from any conversation, but chat.postMessage works
only where the bot is (a DM between people or a private channel it was not invited to answer
channel_not_found), so a job's card and thread need a conversation the bot can post in.

conversations.info says (channels:read, groups:read, im:read, mpim:read): the bot's own DM, a conversation
it is a member of, and a public channel of its workspace (chat:write.public) take posts; an archived one,
a private or shared one it is not in, or one it cannot see, do not. A yes is remembered for YES_TTL seconds
(and renewed by every post that works), a no for NO_TTL (so an `/invite @trainbot` is seen within a
minute; a post that works there says so at once). When Slack cannot be asked (missing scope, outage) the
answer is yes, unremembered: a post that fails then stops the launch before anything is started.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)

YES_TTL = 600.0
NO_TTL = 60.0
#: Slack errors that mean "the bot cannot post there" (chat.postMessage, conversations.info).
UNREACHABLE_ERRORS = frozenset({"channel_not_found", "not_in_channel", "is_archived", "restricted_action",
                                "cannot_dm_bot", "user_not_in_channel", "team_access_not_granted",
                                "ekm_access_denied"})

#: conversations.info for a channel: its "channel" object, or the Slack error string it answered.
ConversationInfo = Callable[[str], "Mapping[str, Any] | str"]


def takes_posts(channel: Mapping[str, Any]) -> bool:
    """Whether a conversations.info channel object takes the bot's posts."""
    if channel.get("is_archived"):
        return False
    if channel.get("is_im") or channel.get("is_member"):
        return True
    shared = channel.get("is_ext_shared") or channel.get("is_shared") or channel.get("is_org_shared")
    # chat:write.public posts in a public channel of the bot's own workspace without an invitation.
    return bool(channel.get("is_channel")) and not channel.get("is_private") and not shared


class ChannelReach:
    def __init__(self, info: ConversationInfo, *, yes_ttl: float = YES_TTL, no_ttl: float = NO_TTL,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._info = info
        self._ttl = {True: yes_ttl, False: no_ttl}
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._known: dict[str, tuple[bool, float]] = {}  # channel -> (takes posts, until)

    def known(self, channel: str) -> bool | None:
        """What is remembered of ``channel``; None when nothing (fresh) is."""
        with self._lock:
            answer, until = self._known.get(channel, (False, float("-inf")))
            return answer if until > self._monotonic() else None

    def can_post(self, channel: str) -> bool:
        known = self.known(channel)
        if known is not None:
            return known
        answer = self._info(channel)
        if isinstance(answer, str):
            if answer in UNREACHABLE_ERRORS:
                self._remember(channel, False)
                return False
            log.warning("cannot tell whether the bot may post in %s (%s); assuming it may (grant channels:read, "
                        "groups:read, im:read and mpim:read)", channel, answer)
            return True
        takes = takes_posts(answer)
        self._remember(channel, takes)
        return takes

    def posted(self, channel: str) -> None:
        """A post in ``channel`` went through: it takes posts."""
        self._remember(channel, True)

    def refused(self, channel: str) -> None:
        """A post in ``channel`` was refused because the bot cannot post there."""
        self._remember(channel, False)

    def _remember(self, channel: str, takes: bool) -> None:
        with self._lock:
            self._known[channel] = (takes, self._monotonic() + self._ttl[takes])

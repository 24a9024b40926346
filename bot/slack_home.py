"""The App Home on Slack: `app_home_opened` publishes the person's home (views.publish), and the tab's buttons
(Stop, Undeploy) go through the same router as a card's, answered by a DM because a home tab has no channel.

Its actor is `via="home"` with no channel: TRAINBOT_ALLOWED_USERS applies there as everywhere, while
TRAINBOT_ALLOWED_CHANNELS, a rule about channels, has nothing to apply to (jobs.permissions refuses a channel-less
`slack` actor, so the home is its own surface rather than a Slack actor without a channel).

Both run off the ack path (services.run_later). The refresher (handlers/home.py) publishes again when the
person's jobs change; `trainbot serve` runs its loop.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

from slack_bolt import Ack, App

from bot.slack_chat import SlackChat
from bot.slack_people import request_team
from handlers import router
from handlers.chat import ChatUnavailable
from handlers.context import CommandContext, Services
from handlers.home import HomeRefresher
from jobs.records import Actor

log = logging.getLogger(__name__)

HOME_VIA = "home"  # Actor.via of the App Home tab: Slack's, but no channel


def register(app: App, home: HomeTab) -> None:
    """Listeners for the home tab; call before the catch-all action listener (Bolt runs the first match)."""
    app.event("app_home_opened")(home.on_opened)
    app.action(re.compile(".+"), matchers=[from_home_tab])(home.on_action)


def from_home_tab(body: dict[str, Any]) -> bool:
    view = body.get("view") or {}
    return (body.get("container") or {}).get("type") == "view" and view.get("type") == "home"


class HomeTab:
    """The tab's two listeners, with what they need: the services, the chat, who is in which user group
    (TRAINBOT_ADMINS may name groups) and the refresher that publishes a person's home."""

    def __init__(self, services: Services, chat: SlackChat, groups_of: Callable[[str, str | None], tuple[str, ...]],
                 refresher: HomeRefresher) -> None:
        self.services = services
        self.chat = chat
        self.groups_of = groups_of
        self.refresher = refresher

    def on_opened(self, event: dict[str, Any], body: dict[str, Any]) -> None:
        if event.get("tab", "home") != "home":
            return  # the Messages tab opened: nothing to publish
        user = str(event.get("user") or "")
        if user:
            actor = self._actor(user, request_team(body))  # the envelope's team_id: the user's workspace
            self.services.run_later(lambda: self._publish(actor))

    def on_action(self, ack: Ack, body: dict[str, Any], action: dict[str, Any]) -> None:
        ack()
        user, team = str((body.get("user") or {}).get("id") or ""), request_team(body)
        action_id, value = str(action.get("action_id", "")), str(action.get("value", "") or "")
        self.services.run_later(lambda: self._press(user, team, action_id, value))

    def _press(self, user: str, team: str | None, action_id: str, value: str) -> None:
        chat = self.chat
        try:
            channel = chat.dm_channel(user)  # where the answer, and any later word on it, goes
        except ChatUnavailable as exc:
            log.warning("no DM channel with %s for a home tab answer: %s", user, exc)
            channel = ""
        ctx = CommandContext(actor=self._actor(user, team), channel_id=channel, services=self.services, chat=chat)
        reply = router.run_action(ctx, action_id, value)
        if reply is not None and channel:
            try:
                chat.post(channel, reply.text, blocks=reply.blocks or None)
            except ChatUnavailable as exc:
                log.warning("could not answer %s's home tab button: %s", user, exc)
        self._publish(ctx.actor)

    def _publish(self, actor: Actor) -> None:
        self.refresher.opened(actor)

    def _actor(self, user: str, team: str | None) -> Actor:
        """Who pressed: their user groups in the workspace the request came from (an org-wide install lists
        groups per workspace)."""
        return Actor(user_id=user, channel_id=None, groups=self.groups_of(user, team), via=HOME_VIA)

"""The narrow Chat port the handlers talk through; Slack (bot/slack_chat.py) and the console implement it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


class ChatUnavailable(Exception):
    """The chat surface could not take the call (outage, rate limit past its retries, bad channel).

    Adapters raise it instead of their library's errors; the outbox defers the notification and
    tries again later, so a chat outage delays a message and never drops it.
    """


class ChatBusy(ChatUnavailable):
    """The chat's rate limits held the call back and nothing was sent: it may go in ``retry_after`` seconds
    (the outbox defers to then, a redraw waits for the next pass)."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ChannelUnreachable(ChatUnavailable):
    """The chat will not take posts in this conversation from the bot, now or on a retry (Slack: a DM
    between people, a private channel it was not invited to, an archived channel)."""


class Chat(Protocol):
    def post(self, channel: str, text: str, *, blocks: list[dict] | None = None,
             thread_ts: str | None = None) -> str:
        """Post a message; returns its ts."""
        ...

    def update(self, channel: str, ts: str, text: str, *, blocks: list[dict] | None = None) -> None: ...

    def post_ephemeral(self, channel: str, user: str, text: str, *,
                       blocks: list[dict] | None = None) -> None: ...

    def dm(self, user: str, text: str, *, blocks: list[dict] | None = None) -> None: ...

    def upload_file(self, channel: str, path: Path, *, title: str, thread_ts: str | None = None) -> None: ...


@runtime_checkable
class ModalChat(Protocol):
    """An optional extension: surfaces that have modals (Slack) implement it; the console does not."""

    def open_modal(self, trigger_id: str, view: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class Mark:
    """What makes a posted message findable again: the outbox row that posted it and the step of its delivery."""

    outbox_id: int
    step: str  # "card", "post", "dm"
    key: str  # the row's dedup key, so outboxes of two bots in one channel never match each other's posts


@runtime_checkable
class MarkingChat(Protocol):
    """An optional extension for surfaces where a post can be stored although its answer never came back
    (Slack: a timeout, a dropped connection). Each post carries its Mark; with `look_first` the surface
    looks for it in the channel or thread and posts only when it is not there, so a retried delivery
    posts once. The console does not need it: its posts cannot be half done."""

    def post_once(self, channel: str, text: str, *, mark: Mark, blocks: list[dict] | None = None,
                  thread_ts: str | None = None, look_first: bool = False) -> str:
        """The ts of the message: the one found, or the one posted now."""
        ...

    def dm_once(self, user: str, text: str, *, mark: Mark, blocks: list[dict] | None = None,
                look_first: bool = False) -> None: ...


@dataclass(frozen=True)
class Reply:
    """What a command handler answers at once (the ack)."""

    text: str
    blocks: list[dict] = field(default_factory=list)
    ephemeral: bool = True


@runtime_checkable
class LinkingChat(Protocol):
    """An optional extension: surfaces with message permalinks (Slack's chat.getPermalink)."""

    def permalink(self, channel: str, ts: str) -> str | None:
        """A URL of the message, or None when the chat cannot give one now."""
        ...


@runtime_checkable
class HomeChat(Protocol):
    """An optional extension: surfaces with a per-user home tab (Slack's views.publish)."""

    def publish_home(self, user: str, view: dict[str, Any]) -> None: ...


@runtime_checkable
class ReachChat(Protocol):
    """An optional extension for surfaces where a person can talk to the bot from a conversation the bot
    cannot post in (Slack: a slash command works in a DM between people or a private channel the bot is
    not in; chat.postMessage there fails). A job's card and thread need a conversation that takes posts."""

    def known_reach(self, channel: str) -> bool | None:
        """What ``can_post(channel)`` would say, when it is known without asking the platform (so on an ack
        path); None when it is not."""
        ...

    def can_post(self, channel: str) -> bool:
        """Whether the bot can post (and keep a thread) in ``channel``; may ask the platform."""
        ...

    def dm_channel(self, user: str) -> str:
        """The bot's own direct-message conversation with ``user`` (it can always post there)."""
        ...

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

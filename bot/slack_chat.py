"""The Chat port over Slack's Web API, on a GovernedWebClient (bot/slack_governor.py: every call within its
tier and its channel's pace, 429s honoured for every caller), turning every Slack failure into ChatUnavailable
(ChatBusy when the governor held a call back: nothing was sent, try again in its retry_after).

Posts are never retried blindly: a post whose connection dropped or whose answer timed out may have been
stored. The outbox's posts (MarkingChat) carry message metadata naming their row, and are looked for in the
channel or thread (conversations.history / conversations.replies) before they are made again.

Its calls run off the ack path (the background executor and the outbox thread), so the governor's waits
never delay an acknowledgement. It knows where the bot can post (bot/slack_reach.py, handlers.chat.ReachChat):
a post refused because the bot is not in the conversation raises ChannelUnreachable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.error import URLError

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState

from bot.slack_governor import GovernedWebClient, RateLimitedError, SlackGovernor
from bot.slack_reach import UNREACHABLE_ERRORS, ChannelReach
from handlers.chat import ChannelUnreachable, ChatBusy, ChatUnavailable, Mark
from jobs.clock import SystemClock
from jobs.rate_limits import MemoryLedger
from jobs.settings import Settings

log = logging.getLogger(__name__)

#: Methods that post: sent again after a dropped connection, they may post twice.
POSTING_METHODS = frozenset({"chat.postMessage", "chat.postEphemeral", "chat.scheduleMessage",
                             "files.completeUploadExternal"})
#: The metadata event type of the outbox's posts (its payload: the Mark's fields).
OUTBOX_EVENT = "trainbot_outbox"
#: How far back a lost post is looked for: pages of the thread (oldest first) or of the channel (newest first).
LOOKUP_PAGE = 200
LOOKUP_PAGES = 5
#: Slack errors after which a post cannot be looked for (the scope or membership is missing): it is made
#: again, as before marks existed, and the warning says what to grant.
UNSEARCHABLE = frozenset({"missing_scope", "not_in_channel", "thread_not_found", "channel_not_found",
                          "not_allowed_token_type"})
T = TypeVar("T")


def make_web_client(settings: Settings, *, timeout: int = 10,
                    governor: SlackGovernor | None = None) -> GovernedWebClient:
    """The one WebClient of the process, at SLACK_API_URL: every call through ``governor`` (by default one
    of this process alone; `trainbot serve` passes the store's, shared by every replica), dropped
    connections retried."""
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    governor = governor or SlackGovernor(MemoryLedger(), SystemClock())
    client = GovernedWebClient(token=token, base_url=settings.slack_api_url, timeout=timeout, governor=governor)
    add_retry_handlers(client)
    return client


class ConnectionRetryExceptPosts(ConnectionErrorRetryHandler):
    """Retries a dropped connection once, except a post that may have reached Slack: only a refused
    connection (nothing was sent) is safe to send again."""

    def _can_retry(self, *, state: RetryState, request: HttpRequest, response: HttpResponse | None = None,
                   error: Exception | None = None) -> bool:
        method = request.url.rstrip("/").rsplit("/", 1)[-1]
        if method in POSTING_METHODS and not _never_sent(error):
            return False
        return super()._can_retry(state=state, request=request, response=response, error=error)


def _never_sent(error: Exception | None) -> bool:
    return isinstance(error, URLError) and isinstance(error.reason, ConnectionRefusedError)


def add_retry_handlers(client: WebClient) -> None:
    """Dropped connections retried once, posts excepted (the client's default ConnectionErrorRetryHandler
    would send a post again after its connection dropped). 429s are the governor's: it retries them
    after Retry-After on its own clock and holds every other caller back meanwhile."""
    handlers = [h for h in client.retry_handlers if type(h) is not ConnectionErrorRetryHandler]
    kinds = {type(handler) for handler in handlers}
    if ConnectionRetryExceptPosts not in kinds:
        handlers.append(ConnectionRetryExceptPosts(max_retry_count=1))
    client.retry_handlers = handlers


class SlackChat:
    """handlers.chat.Chat (and ModalChat, MarkingChat, ReachChat) over a slack_sdk WebClient."""

    def __init__(self, client: GovernedWebClient) -> None:
        add_retry_handlers(client)
        self._client = client
        self._dm_channels: dict[str, str] = {}
        self._permalinks: dict[tuple[str, str], str] = {}
        self._reach = ChannelReach(self._conversation_info)

    @property
    def client(self) -> GovernedWebClient:
        return self._client

    def post(self, channel: str, text: str, *, blocks: list[dict] | None = None,
             thread_ts: str | None = None) -> str:
        response = self._posting(channel, "chat.postMessage", lambda: self._client.chat_postMessage(
            channel=channel, text=text, blocks=blocks or None, thread_ts=thread_ts, unfurl_links=False))
        return str(response["ts"])

    # -- where the bot can post (handlers.chat.ReachChat) -------------------------------------------

    def known_reach(self, channel: str) -> bool | None:
        return self._reach.known(channel)

    def can_post(self, channel: str) -> bool:
        return self._reach.can_post(channel)

    def _conversation_info(self, channel: str) -> Any:
        try:
            return self._client.conversations_info(channel=channel)["channel"]
        except SlackApiError as exc:
            return str(exc.response.get("error", "unknown")) if exc.response is not None else "unknown"
        except (SlackClientError, OSError) as exc:
            return f"unreachable ({type(exc).__name__})"

    def _posting(self, channel: str, method: str, call: Callable[[], T]) -> T:
        """A post: what it says of the channel is remembered (bot/slack_reach.py)."""
        try:
            response = self._call(method, call)
        except ChannelUnreachable:
            self._reach.refused(channel)
            raise
        self._reach.posted(channel)
        return response

    def post_once(self, channel: str, text: str, *, mark: Mark, blocks: list[dict] | None = None,
                  thread_ts: str | None = None, look_first: bool = False) -> str:
        if look_first:
            found = self._find(channel, mark, thread_ts)
            if found is not None:
                log.info("outbox %s (%s) was posted already, as %s", mark.outbox_id, mark.step, found)
                return found
        metadata = {"event_type": OUTBOX_EVENT, "event_payload": _payload(mark)}
        response = self._posting(channel, "chat.postMessage", lambda: self._client.chat_postMessage(
            channel=channel, text=text, blocks=blocks or None, thread_ts=thread_ts, unfurl_links=False,
            metadata=metadata))
        return str(response["ts"])

    def dm_once(self, user: str, text: str, *, mark: Mark, blocks: list[dict] | None = None,
                look_first: bool = False) -> None:
        self.post_once(self._dm_channel(user), text, mark=mark, blocks=blocks, look_first=look_first)

    def update(self, channel: str, ts: str, text: str, *, blocks: list[dict] | None = None) -> None:
        self._call("chat.update", lambda: self._client.chat_update(
            channel=channel, ts=ts, text=text, blocks=blocks or []))

    def post_ephemeral(self, channel: str, user: str, text: str, *, blocks: list[dict] | None = None) -> None:
        self._posting(channel, "chat.postEphemeral", lambda: self._client.chat_postEphemeral(
            channel=channel, user=user, text=text, blocks=blocks or None))

    def dm(self, user: str, text: str, *, blocks: list[dict] | None = None) -> None:
        self.post(self._dm_channel(user), text, blocks=blocks)

    def upload_file(self, channel: str, path: Path, *, title: str, thread_ts: str | None = None) -> None:
        self._call("files_upload_v2", lambda: self._client.files_upload_v2(
            channel=channel, file=str(path), filename=path.name, title=title, thread_ts=thread_ts))

    def open_modal(self, trigger_id: str, view: dict[str, Any]) -> None:
        self._call("views.open", lambda: self._client.views_open(trigger_id=trigger_id, view=view))

    def permalink(self, channel: str, ts: str) -> str | None:
        """chat.getPermalink, remembered (a message's permalink never changes)."""
        key = (channel, ts)
        if key not in self._permalinks:
            response = self._call("chat.getPermalink", lambda: self._client.chat_getPermalink(
                channel=channel, message_ts=ts))
            self._permalinks[key] = str(response["permalink"])
        return self._permalinks[key]

    def publish_home(self, user: str, view: dict[str, Any]) -> None:
        self._call("views.publish", lambda: self._client.views_publish(user_id=user, view=view))

    def dm_channel(self, user: str) -> str:
        """The bot's direct-message channel with ``user`` (conversations.open, remembered)."""
        return self._dm_channel(user)

    def _dm_channel(self, user: str) -> str:
        if user not in self._dm_channels:
            response = self._call("conversations.open", lambda: self._client.conversations_open(users=user))
            self._dm_channels[user] = str(response["channel"]["id"])
        return self._dm_channels[user]

    def _find(self, channel: str, mark: Mark, thread_ts: str | None) -> str | None:
        """The ts of the message carrying `mark` in the thread (or the channel's latest messages); None
        when it is not there, or cannot be looked for (then it is posted again, with a warning)."""
        method = "conversations.replies" if thread_ts else "conversations.history"
        wanted = _payload(mark)
        cursor: str | None = None
        try:
            for _ in range(LOOKUP_PAGES):
                page = self._call(method, partial(self._history_page, channel, thread_ts, cursor))
                for message in page.get("messages") or []:
                    metadata = message.get("metadata") or {}
                    if metadata.get("event_type") == OUTBOX_EVENT and metadata.get("event_payload") == wanted:
                        return str(message["ts"])
                cursor = (page.get("response_metadata") or {}).get("next_cursor") or None
                if cursor is None:
                    return None
        except _Unsearchable as exc:
            log.warning("cannot look for outbox %s in %s (%s): posting it again; grant the bot the "
                        "channels:history, groups:history and im:history scopes and invite it to the channel",
                        mark.outbox_id, channel, exc)
        return None

    def _history_page(self, channel: str, thread_ts: str | None, cursor: str | None) -> Any:
        try:
            if thread_ts:
                return self._client.conversations_replies(channel=channel, ts=thread_ts, cursor=cursor,
                                                          limit=LOOKUP_PAGE, include_all_metadata=True)
            return self._client.conversations_history(channel=channel, cursor=cursor, limit=LOOKUP_PAGE,
                                                      include_all_metadata=True)
        except SlackApiError as exc:
            error = exc.response.get("error", "") if exc.response is not None else ""
            if error in UNSEARCHABLE:
                raise _Unsearchable(error) from None
            raise

    def _call(self, method: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except RateLimitedError as exc:
            log.info("Slack %s held back: %s", method, exc)
            raise ChatBusy(str(exc), retry_after=exc.retry_after) from None
        except SlackApiError as exc:
            error = exc.response.get("error", "unknown") if exc.response is not None else "unknown"
            log.warning("Slack %s failed: %s", method, error)
            kind = ChannelUnreachable if error in UNREACHABLE_ERRORS else ChatUnavailable
            raise kind(f"Slack {method} failed: {error}") from None
        except (SlackClientError, OSError) as exc:
            log.warning("Slack %s unreachable: %s", method, type(exc).__name__)
            raise ChatUnavailable(f"Slack {method} unreachable: {type(exc).__name__}") from None


class _Unsearchable(Exception):
    """Slack will not show this channel's history to the bot (scope, membership)."""


def _payload(mark: Mark) -> dict[str, Any]:
    return {"outbox_id": mark.outbox_id, "step": mark.step, "key": mark.key}

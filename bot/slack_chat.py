"""The Chat port over Slack's Web API: retries 429s (RateLimitErrorRetryHandler honours Retry-After),
paces posts to about one a second a channel, and turns every Slack failure into ChatUnavailable.

Its calls run off the ack path (the background executor and the outbox thread), so the pacing sleeps
never delay an acknowledgement.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_handlers import ConnectionErrorRetryHandler, RateLimitErrorRetryHandler

from handlers.chat import ChatUnavailable
from jobs.settings import Settings

log = logging.getLogger(__name__)

#: chat.postMessage allows about one message a second a channel (short bursts pass).
POST_INTERVAL_SECONDS = 1.0
RATE_LIMIT_RETRIES = 3
T = TypeVar("T")


def make_web_client(settings: Settings, *, timeout: int = 10) -> WebClient:
    """The one WebClient of the process, at SLACK_API_URL, retrying 429s and dropped connections."""
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    client = WebClient(token=token, base_url=settings.slack_api_url, timeout=timeout)
    add_retry_handlers(client)
    return client


def add_retry_handlers(client: WebClient) -> None:
    kinds = {type(handler) for handler in client.retry_handlers}
    if RateLimitErrorRetryHandler not in kinds:
        client.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES))
    if ConnectionErrorRetryHandler not in kinds:
        client.retry_handlers.append(ConnectionErrorRetryHandler(max_retry_count=1))


class ChannelPacer:
    """Hands out send slots at most one per ``interval`` seconds per channel; callers sleep to their slot."""

    def __init__(self, interval: float = POST_INTERVAL_SECONDS, *,
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._interval = interval
        self._monotonic = monotonic
        self._sleep = sleep
        self._lock = threading.Lock()
        self._next: dict[str, float] = {}

    def wait(self, channel: str) -> float:
        """Block until ``channel`` may take another message; returns the seconds waited."""
        with self._lock:
            now = self._monotonic()
            slot = max(now, self._next.get(channel, now))
            self._next[channel] = slot + self._interval
        delay = slot - now
        if delay > 0:
            self._sleep(delay)
        return delay


class SlackChat:
    """handlers.chat.Chat (and ModalChat) over a slack_sdk WebClient."""

    def __init__(self, client: WebClient, *, pacer: ChannelPacer | None = None) -> None:
        add_retry_handlers(client)
        self._client = client
        self._pacer = pacer or ChannelPacer()
        self._dm_channels: dict[str, str] = {}
        self._permalinks: dict[tuple[str, str], str] = {}

    @property
    def client(self) -> WebClient:
        return self._client

    def post(self, channel: str, text: str, *, blocks: list[dict] | None = None,
             thread_ts: str | None = None) -> str:
        self._pacer.wait(channel)
        response = self._call("chat.postMessage", lambda: self._client.chat_postMessage(
            channel=channel, text=text, blocks=blocks or None, thread_ts=thread_ts, unfurl_links=False))
        return str(response["ts"])

    def update(self, channel: str, ts: str, text: str, *, blocks: list[dict] | None = None) -> None:
        self._call("chat.update", lambda: self._client.chat_update(
            channel=channel, ts=ts, text=text, blocks=blocks or []))

    def post_ephemeral(self, channel: str, user: str, text: str, *, blocks: list[dict] | None = None) -> None:
        self._pacer.wait(channel)
        self._call("chat.postEphemeral", lambda: self._client.chat_postEphemeral(
            channel=channel, user=user, text=text, blocks=blocks or None))

    def dm(self, user: str, text: str, *, blocks: list[dict] | None = None) -> None:
        self.post(self._dm_channel(user), text, blocks=blocks)

    def upload_file(self, channel: str, path: Path, *, title: str, thread_ts: str | None = None) -> None:
        self._pacer.wait(channel)
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

    def _call(self, method: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except SlackApiError as exc:
            error = exc.response.get("error", "unknown") if exc.response is not None else "unknown"
            log.warning("Slack %s failed: %s", method, error)
            raise ChatUnavailable(f"Slack {method} failed: {error}") from None
        except (SlackClientError, OSError) as exc:
            log.warning("Slack %s unreachable: %s", method, type(exc).__name__)
            raise ChatUnavailable(f"Slack {method} unreachable: {type(exc).__name__}") from None

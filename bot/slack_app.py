"""The Bolt app: slash commands, buttons and modal submissions, each turned into the same handler call
the console makes (handlers.router). Adapters translate; they decide nothing.

Everything acks at once: a command's reply *is* its ack; a button acks first and its reply goes out on the
background executor; launches, stops and uploads never run on the ack path. A /train card (or an edited
one) that must first resolve a git REF (`git ls-remote`, up to RESOLVE_TIMEOUT_S) is drawn on the executor
too: the command is acked with a one-line "Resolving…" and the card, or the sentence that says why there is
none, follows through the command's response_url (a modal's, as an ephemeral message). Slack's retries
(x-slack-retry-num > 0; Socket Mode's first delivery is 0) are acknowledged and dropped.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from slack_bolt import Ack, App, BoltRequest, BoltResponse, Respond
from slack_bolt.error import BoltUnhandledRequestError
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError

from bot import slack_home
from bot.slack_chat import SlackChat
from handlers import blocks as bk
from handlers import cards, router, train
from handlers.chat import ChatUnavailable, Reply
from handlers.context import CommandContext, Services
from handlers.home import HomeRefresher
from jobs.errors import TrainbotError
from jobs.records import Actor
from jobs.settings import Settings

log = logging.getLogger(__name__)

GROUPS_TTL_SECONDS = 600.0
TRAIN_COMMAND = "/train"  # its card may wait on a git host (own code): see train.resolving_note


class GroupDirectory:
    """Which Slack user groups a user is in (TRAINBOT_ALLOWED_USERS and TRAINBOT_ADMINS may name S... IDs).

    Asked only when the settings name a group; cached for ten minutes; an error means no groups."""

    def __init__(self, client: WebClient, settings: Settings, *, ttl: float = GROUPS_TTL_SECONDS) -> None:
        configured = (*settings.trainbot_allowed_users, *settings.trainbot_admins)
        self._enabled = any(item.startswith("S") for item in configured)
        self._client = client
        self._ttl = ttl
        self._lock = threading.Lock()
        self._members: dict[str, tuple[str, ...]] = {}
        self._fetched = float("-inf")

    def groups_of(self, user: str) -> tuple[str, ...]:
        if not self._enabled:
            return ()
        with self._lock:
            if time.monotonic() - self._fetched > self._ttl:
                self._refresh()
            return self._members.get(user, ())

    def _refresh(self) -> None:
        try:
            response = self._client.usergroups_list(include_users=True)
        except (SlackApiError, SlackClientError, OSError) as exc:
            log.warning("could not list user groups: %s", type(exc).__name__)
            return
        members: dict[str, list[str]] = {}
        for group in response.get("usergroups") or []:
            for user in group.get("users") or []:
                members.setdefault(user, []).append(group["id"])
        self._members = {user: tuple(ids) for user, ids in members.items()}
        self._fetched = time.monotonic()


def create_app(settings: Settings, services: Services, *, client: WebClient, chat: SlackChat | None = None,
               http: bool = True, verify_token: bool = True, home: HomeRefresher | None = None) -> App:
    """The Bolt app for HTTP (`http=True`: signed requests) or Socket Mode, on the injected WebClient."""
    secret = settings.slack_signing_secret.get_secret_value() if settings.slack_signing_secret else ""
    app = App(
        client=client,
        signing_secret=secret or "socket-mode",
        request_verification_enabled=http,
        token_verification_enabled=verify_token,
        # Listeners finish before the response goes back: they are short (the slow work is handed to
        # services.run_later), and the ack body is the command's reply.
        process_before_response=True,
        logger=logging.getLogger("slack_bolt"),
        # A request no listener takes reaches on_bolt_error (one line) instead of Bolt's multi-line warning.
        raise_error_for_unhandled_request=True,
    )
    app.error(on_bolt_error)
    surface = SlackSurface(services, chat or SlackChat(client), GroupDirectory(client, settings))
    app.middleware(ignore_retries)
    for command in router.SLASH_COMMANDS:
        app.command(command)(surface.command_listener())
    slack_home.register(app, surface, home or HomeRefresher(services, surface.chat))
    app.action(re.compile(".+"))(surface.on_action)
    app.view(re.compile(".+"))(surface.on_view)
    return app


def on_bolt_error(error: Exception, body: dict[str, Any]) -> BoltResponse:
    """Bolt's one error handler: a request nothing listens to is 404 in one log line; anything else is a
    bug in a listener, logged with its traceback once."""
    if isinstance(error, BoltUnhandledRequestError):
        kind = body.get("command") or body.get("type") or "unknown"
        log.info("no listener for a Slack request (%s)", bk.truncate(str(kind), 80))
        return BoltResponse(status=404, body="")
    log.error("a Slack listener failed", exc_info=error)
    return BoltResponse(status=500, body="")


def ignore_retries(request: BoltRequest, next: Callable[[], BoltResponse]) -> BoltResponse:  # noqa: A002
    """Slack redelivers what it thinks was not acked in time; the first delivery already acted."""
    retry = request.headers.get("x-slack-retry-num", ["0"])
    if retry and retry[0].isdigit() and int(retry[0]) > 0:
        reason = request.headers.get("x-slack-retry-reason", [""])[0]
        log.info("ignored Slack retry %s (%s)", retry[0], reason)
        return BoltResponse(status=200, body="")
    return next()


class SlackSurface:
    """Turns Slack payloads into handler calls and handler replies into Slack responses."""

    def __init__(self, services: Services, chat: SlackChat, groups: GroupDirectory) -> None:
        self.services = services
        self.chat = chat
        self.groups = groups

    def context(self, user: str, channel: str, *, trigger_id: str | None = None) -> CommandContext:
        actor = Actor(user_id=user, channel_id=channel or None, groups=self.groups.groups_of(user), via="slack")
        return CommandContext(actor=actor, channel_id=channel, services=self.services, chat=self.chat,
                              trigger_id=trigger_id)

    # -- slash commands -------------------------------------------------------------------------

    def command_listener(self) -> Callable[..., None]:
        def listener(ack: Ack, body: dict[str, Any], respond: Respond) -> None:
            ctx = self.context(body.get("user_id", ""), body.get("channel_id", ""))
            command, text = body.get("command", ""), body.get("text", "") or ""
            note = train.resolving_note(ctx, text) if command == TRAIN_COMMAND else None
            if note is not None:  # the card waits on a git host: Slack waits 3 s for the ack
                ack(text=note, response_type="ephemeral")
                self.services.run_later(lambda: self._respond(ctx, router.run_command(ctx, command, text), respond))
                return
            reply = router.run_command(ctx, command, text)
            ack(text=reply.text, blocks=reply.blocks or None, response_type=_response_type(reply))

        return listener

    def _respond(self, ctx: CommandContext, reply: Reply, respond: Respond) -> None:
        """A command's reply drawn after its ack: through its response_url, as the ack would have carried it;
        to the user alone (chat.postEphemeral) when that URL does not take it."""
        try:
            answered = respond(text=reply.text, blocks=reply.blocks or None, response_type=_response_type(reply))
            if answered.status_code == 200:
                return
            log.warning("the response_url of %s answered HTTP %s", ctx.actor.user_id, answered.status_code)
        except (SlackClientError, OSError, ValueError) as exc:  # ValueError: no response_url
            log.warning("the response_url of %s failed: %s", ctx.actor.user_id, type(exc).__name__)
        self._answer(ctx, reply, None)

    # -- buttons ----------------------------------------------------------------------------------

    def on_action(self, ack: Ack, body: dict[str, Any], action: dict[str, Any], respond: Respond) -> None:
        ack()
        user = (body.get("user") or {}).get("id", "")
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id", "")
        ctx = self.context(user, channel, trigger_id=body.get("trigger_id"))
        reply = router.run_action(ctx, action.get("action_id", ""), action.get("value", "") or "")
        if reply is None:
            return
        from_ephemeral = bool((body.get("container") or {}).get("is_ephemeral"))
        self.services.run_later(lambda: self._answer(ctx, reply, respond if from_ephemeral else None))

    def _answer(self, ctx: CommandContext, reply: Reply, respond: Respond | None) -> None:
        """A button's reply: it replaces the ephemeral card it came from, or goes to the presser alone."""
        try:
            if respond is not None:
                respond(text=reply.text, blocks=reply.blocks or None, replace_original=True,
                        response_type="ephemeral")
            else:
                self.chat.post_ephemeral(ctx.channel_id, ctx.actor.user_id, reply.text, blocks=reply.blocks or None)
        except (ChatUnavailable, SlackApiError, SlackClientError, OSError) as exc:
            log.warning("could not answer %s: %s", ctx.actor.user_id, type(exc).__name__)

    # -- modal submissions ------------------------------------------------------------------------

    def on_view(self, ack: Ack, body: dict[str, Any], view: dict[str, Any]) -> None:
        user = (body.get("user") or {}).get("id", "")
        try:
            channel = train.modal_channel(view.get("private_metadata", ""))
        except TrainbotError as exc:
            ack(response_action="errors", errors={train.OPTIONS_FIELD: exc.user_message()})
            return
        ctx = self.context(user, channel)
        callback, values = view.get("callback_id", ""), modal_values(view)
        if callback == cards.EDIT_CALLBACK and train.resolving_note(ctx, train.command_from_fields(values)):
            ack()  # the card waits on a git host; a REF it cannot resolve is answered with the card's sentence
            self.services.run_later(lambda: self._answer(ctx, _submitted(ctx, callback, values), None))
            return
        try:
            reply = router.run_submission(ctx, callback, values)
        except train.FieldErrors as exc:
            ack(response_action="errors", errors=exc.errors)
            return
        ack()
        self.services.run_later(lambda: self._answer(ctx, reply, None))


def _submitted(ctx: CommandContext, callback: str, values: dict[str, str]) -> Reply:
    """A submission answered after the modal closed: its field errors become the reply's sentence."""
    try:
        return router.run_submission(ctx, callback, values)
    except train.FieldErrors as exc:
        return Reply(text=bk.truncate(exc.user_message(), bk.MAX_TEXT))


def _response_type(reply: Reply) -> str:
    return "ephemeral" if reply.ephemeral else "in_channel"


def modal_values(view: dict[str, Any]) -> dict[str, str]:
    """block id -> the text typed into its (single) input."""
    values: dict[str, str] = {}
    for block_id, inputs in ((view.get("state") or {}).get("values") or {}).items():
        for state in inputs.values():
            values[block_id] = state.get("value") or ""
    return values

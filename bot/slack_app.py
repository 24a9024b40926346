"""The Bolt app: slash commands, buttons and modal submissions, each turned into the same handler call
the console makes (handlers.router). Adapters translate; they decide nothing.

Everything acks at once: a command's reply *is* its ack; a button acks first and its reply goes out on the
background executor; launches, stops and uploads never run on the ack path. A /train card (or an edited
one) that must first resolve a git REF (`git ls-remote`, up to RESOLVE_TIMEOUT_S) or read a pinned entry from a
commit not fetched yet is drawn on the code-host pool (bot/code_hosts.py, so a slow git host never holds the
executor): the command is acked with a one-line "Resolving…" and the card, or the sentence that says why there
is none, follows through the command's response_url (a modal's, as an ephemeral message).

Slack redelivers an event it is not sure arrived (the same event_id, x-slack-retry-num > 0; Socket Mode's
retry_attempt): a redelivery is dropped only when a delivery of that event_id reached a replica before
(jobs/store/inbound.py), so an event whose first delivery failed is still handled. A retry header on
anything without an event_id (Slack does not retry commands and interactions) is acknowledged and dropped.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Callable
from typing import Any

from slack_bolt import Ack, App, BoltContext, BoltRequest, BoltResponse, Respond
from slack_bolt.error import BoltUnhandledRequestError
from slack_sdk.errors import SlackApiError, SlackClientError

from bot import slack_home
from bot.slack_chat import SlackChat
from bot.slack_governor import GovernedWebClient
from bot.slack_people import GroupDirectory, home_teams, is_external, request_team
from handlers import blocks as bk
from handlers import cards, router, train
from handlers.chat import ChannelUnreachable, ChatUnavailable, Reply
from handlers.context import CommandContext, Services, run_waiting_on_code
from handlers.home import HomeRefresher
from jobs.errors import TrainbotError
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.inbound import InboundEvents

log = logging.getLogger(__name__)

ACK_WAIT_SECONDS = 3.0  # Slack's own limit on an ack: a card drawn off the ack path waits at most this for it
TRAIN_COMMAND = "/train"  # its card may wait on a git host (own code): see train.resolving_note


def create_app(settings: Settings, services: Services, *, client: GovernedWebClient, chat: SlackChat | None = None,
               http: bool = True, verify_token: bool = True, home: HomeRefresher | None = None) -> App:
    """The Bolt app for HTTP (`http=True`: signed requests) or Socket Mode, on the injected WebClient (governed:
    Bolt's own calls pace like the chat's)."""
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
    redeliveries = Redeliveries(InboundEvents(services.store, services.clock))
    app.error(lambda error, body: on_bolt_error(error, body, redeliveries))
    surface = SlackSurface(services, chat or SlackChat(client), GroupDirectory(client, settings))
    app.middleware(redeliveries)
    for command in router.SLASH_COMMANDS:
        app.command(command)(surface.command_listener())
    refresher = home or HomeRefresher(services, surface.chat)
    slack_home.register(app, slack_home.HomeTab(services, surface.chat, surface.groups.groups_of, refresher))
    app.action(re.compile(".+"))(surface.on_action)
    app.view(re.compile(".+"))(surface.on_view)
    return app


def on_bolt_error(error: Exception, body: dict[str, Any], redeliveries: Redeliveries) -> BoltResponse:
    """Bolt's one error handler: a request nothing listens to is 404 in one log line; anything else is a
    bug in a listener, logged with its traceback once (and an event it failed on is taken again when Slack
    redelivers it)."""
    if isinstance(error, BoltUnhandledRequestError):
        kind = body.get("command") or body.get("type") or "unknown"
        log.info("no listener for a Slack request (%s)", bk.truncate(str(kind), 80))
        return BoltResponse(status=404, body="")
    log.error("a Slack listener failed", exc_info=error)
    redeliveries.failed(body)
    return BoltResponse(status=500, body="")


class Redeliveries:
    """Bolt middleware: each event is handled once across replicas, and an event whose first delivery never
    got through is handled when Slack delivers it again (x-slack-retry-reason http_error, connection_failed)."""

    def __init__(self, inbound: InboundEvents) -> None:
        self._inbound = inbound

    def __call__(self, request: BoltRequest, next: Callable[[], None]) -> BoltResponse | None:  # noqa: A002
        retry = _retry_number(request)
        event_id = request.body.get("event_id") if request.body.get("type") == "event_callback" else None
        reason = request.headers.get("x-slack-retry-reason", [""])[0]
        if not isinstance(event_id, str) or not event_id:
            if retry > 0:
                log.info("ignored Slack retry %s of a request without an event_id (%s)", retry, reason)
                return BoltResponse(status=200, body="")
            next()
            return None
        if not self._inbound.claim(event_id):
            log.info("dropped Slack's delivery %s of event %s, received before (%s)", retry, event_id, reason)
            return BoltResponse(status=200, body="")
        if retry > 0:
            log.info("took Slack's delivery %s of event %s: its first never arrived (%s)", retry, event_id, reason)
        next()
        return None

    def failed(self, body: dict[str, Any]) -> None:
        """A listener failed on this delivery (answered 500): Slack's retry of it is to be taken."""
        event_id = body.get("event_id") if body.get("type") == "event_callback" else None
        if isinstance(event_id, str) and event_id:
            self._inbound.release(event_id)


def _retry_number(request: BoltRequest) -> int:
    retry = (request.headers.get("x-slack-retry-num") or ["0"])[0]
    return int(retry) if retry.isascii() and retry.isdigit() else 0


class SlackSurface:
    """Turns Slack payloads into handler calls and handler replies into Slack responses."""

    def __init__(self, services: Services, chat: SlackChat, groups: GroupDirectory) -> None:
        self.services = services
        self.chat = chat
        self.groups = groups

    def context(self, user: str, channel: str, *, trigger_id: str | None = None, body: dict[str, Any] | None = None,
                bolt: BoltContext | None = None) -> CommandContext:
        """The handlers' context of a request; ``body`` and ``bolt`` say its workspace (for the user groups of
        an org-wide install) and whether the person is from another organization (a Slack Connect channel)."""
        body = body or {}
        external = is_external(body, home_teams(bolt.authorize_result if bolt is not None else None))
        groups = () if external else self.groups.groups_of(user, request_team(body))
        actor = Actor(user_id=user, channel_id=channel or None, groups=groups, via="slack", external=external)
        return CommandContext(actor=actor, channel_id=channel, services=self.services, chat=self.chat,
                              trigger_id=trigger_id)

    # -- slash commands -------------------------------------------------------------------------

    def command_listener(self) -> Callable[..., None]:
        def listener(ack: Ack, body: dict[str, Any], respond: Respond, context: BoltContext) -> None:
            asked = self.context(body.get("user_id", ""), body.get("channel_id", ""), body=body, bolt=context)
            # Its response_url answers later, also where the bot cannot post (a DM between people).
            ctx = dataclasses.replace(asked, answer=lambda later: self._respond(asked, later, respond),
                                      conversation=str(body.get("channel_name") or ""))
            command, text = body.get("command", ""), body.get("text", "") or ""
            note = train.resolving_note(ctx, text) if command == TRAIN_COMMAND else None
            if note is not None:  # the card waits on a git host: Slack waits 3 s for the ack
                # Not Bolt's lazy listeners (issue 31): a lazy function runs on Bolt's listener executor, outside
                # the bounded pool for work that waits on git hosts, whose per-person refusal must be the ack's
                # own text (so it is asked before acking); and whether the ack carries the card or this note is
                # known per request, while lazy functions are fixed per command. The Event keeps the one
                # guarantee lazy would give: the card never overtakes the ack.
                acked = threading.Event()

                def draw() -> None:
                    acked.wait(ACK_WAIT_SECONDS)  # the card never overtakes the "Resolving…" ack
                    self._respond(ctx, router.run_command(ctx, command, text), respond)

                try:
                    run_waiting_on_code(self.services, ctx.actor.user_id, draw)
                except TrainbotError as exc:  # too much of this person's work waits on code hosts already
                    ack(text=exc.user_message(), response_type="ephemeral")
                    return
                ack(text=note, response_type="ephemeral")
                acked.set()
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

    def on_action(self, ack: Ack, body: dict[str, Any], action: dict[str, Any], respond: Respond,
                  context: BoltContext) -> None:
        ack()
        user = (body.get("user") or {}).get("id", "")
        channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id", "")
        from_ephemeral = bool((body.get("container") or {}).get("is_ephemeral"))
        ctx = self.context(user, channel, trigger_id=body.get("trigger_id"), body=body, bolt=context)
        if from_ephemeral:  # its response_url reaches the presser even where the bot cannot post
            ctx = dataclasses.replace(ctx, answer=lambda later: self._answer(ctx, later, respond))
        reply = router.run_action(ctx, action.get("action_id", ""), action.get("value", "") or "")
        if reply is None:
            return
        self.services.run_later(lambda: self._answer(ctx, reply, respond if from_ephemeral else None))

    def _answer(self, ctx: CommandContext, reply: Reply, respond: Respond | None) -> None:
        """A button's reply: it replaces the ephemeral card it came from, or goes to the presser alone (to
        their DM with the bot where the conversation takes no post from it)."""
        try:
            if respond is not None:
                respond(text=reply.text, blocks=reply.blocks or None, replace_original=True,
                        response_type="ephemeral")
                return
            try:
                self.chat.post_ephemeral(ctx.channel_id, ctx.actor.user_id, reply.text, blocks=reply.blocks or None)
            except ChannelUnreachable:
                self.chat.dm(ctx.actor.user_id, reply.text, blocks=reply.blocks or None)
        except (ChatUnavailable, SlackApiError, SlackClientError, OSError) as exc:
            log.warning("could not answer %s: %s", ctx.actor.user_id, type(exc).__name__)

    # -- modal submissions ------------------------------------------------------------------------

    def on_view(self, ack: Ack, body: dict[str, Any], view: dict[str, Any], context: BoltContext) -> None:
        user = (body.get("user") or {}).get("id", "")
        try:
            channel = train.modal_channel(view.get("private_metadata", ""))
        except TrainbotError as exc:
            ack(response_action="errors", errors={train.OPTIONS_FIELD: exc.user_message()})
            return
        ctx = self.context(user, channel, body=body, bolt=context)
        callback, values = view.get("callback_id", ""), modal_values(view)
        if callback == cards.EDIT_CALLBACK and train.resolving_note(ctx, train.command_from_fields(values)):
            try:  # the card waits on a git host; a REF it cannot resolve is answered with the card's sentence
                run_waiting_on_code(self.services, user, lambda: self._answer(ctx, _submitted(ctx, callback, values),
                                                                              None))
            except TrainbotError as exc:
                ack(response_action="errors", errors={train.OPTIONS_FIELD: exc.user_message()})
                return
            ack()
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
        return Reply(text=bk.truncate(bk.escape(exc.user_message()), bk.MAX_TEXT))


def _response_type(reply: Reply) -> str:
    return "ephemeral" if reply.ephemeral else "in_channel"


def modal_values(view: dict[str, Any]) -> dict[str, str]:
    """block id -> the text typed into its (single) input."""
    values: dict[str, str] = {}
    for block_id, inputs in ((view.get("state") or {}).get("values") or {}).items():
        for state in inputs.values():
            values[block_id] = state.get("value") or ""
    return values

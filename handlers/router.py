"""Command name -> handler and action id -> button handler: one table that Slack and the console share.

`run_command`, `run_action` and `run_submission` are where every `jobs.errors` exception becomes a
one-sentence (ephemeral) reply; refusals are audited here; nothing else ever reaches a person.

They are also the one gate of TRAINBOT_ALLOWED_USERS / TRAINBOT_ALLOWED_CHANNELS: every command (reads such as
/jobs and /schedule list, and help, included), every button and every modal is refused to an actor outside
them before its handler runs. The console and the CLI pass as admins (jobs.permissions).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from handlers import blocks as bk
from handlers import (
    cards,
    endpoints,
    home,
    jobs,
    logs,
    promotion,
    recipe,
    schedule,
    subscriptions,
    texts,
    train,
)
from handlers.chat import Reply
from handlers.context import CommandContext
from jobs.errors import PermissionDenied, TrainbotError
from jobs.planning.grammar import normalize_slack_text, plain_punctuation

log = logging.getLogger(__name__)

CommandHandler = Callable[[CommandContext, str], Reply]
ActionHandler = Callable[[CommandContext, str], "Reply | None"]
SubmissionHandler = Callable[[CommandContext, dict[str, str]], Reply]

COMMANDS: dict[str, CommandHandler] = {
    "train": train.handle_train,
    "jobs": jobs.handle_jobs,
    "job": jobs.handle_job,
    "stop": jobs.handle_stop,
    "deploy": endpoints.handle_deploy,
    "predict": endpoints.handle_predict,
    "undeploy": endpoints.handle_undeploy,
    "rollback": promotion.handle_rollback,
    "endpoint": promotion.handle_endpoint,
    "models": promotion.handle_models,
    "schedule": schedule.handle_schedule,
    "notify": subscriptions.handle_notify,
    "logs": logs.handle_logs,
    "home": home.handle_home,
    "recipe": recipe.handle_recipe,
}

ACTIONS: dict[str, ActionHandler] = {
    cards.ACTION_LAUNCH: train.on_launch,
    cards.ACTION_EDIT: train.on_edit,
    cards.ACTION_CANCEL: train.on_cancel,
    cards.ACTION_STOP: jobs.on_stop,
    cards.ACTION_DEPLOY: endpoints.on_deploy,
    cards.ACTION_LOGS: logs.on_logs,
    cards.ACTION_UNDEPLOY: home.on_undeploy,
    cards.ACTION_PROMOTE: promotion.on_promote,
    cards.ACTION_ROLLBACK: promotion.on_rollback,
}

SUBMISSIONS: dict[str, SubmissionHandler] = {
    cards.EDIT_CALLBACK: train.on_edit_submitted,
}

SLASH_COMMANDS = tuple(f"/{name}" for name in COMMANDS)


def run_command(ctx: CommandContext, name: str, text: str) -> Reply:
    """``text`` as Slack sends it (the console escapes what is typed as Slack does): read here, once, for every
    command alike (curly quotes, em-dashes, Slack's &lt; &gt; &amp;), so no handler reads it again."""
    name = name.lstrip("/").lower()
    handler = COMMANDS.get(name)
    if handler is None:
        return Reply(text=texts.UNKNOWN_COMMAND.format(name=bk.escape(bk.truncate(name, 80))))
    text = normalize_slack_text(text)
    try:
        _check_access(ctx)
        return handler(ctx, text)
    except Exception as exc:
        return reply_for_error(ctx, exc, name, text)


def run_action(ctx: CommandContext, action_id: str, value: str) -> Reply | None:
    handler = ACTIONS.get(action_id)
    if handler is None:
        return Reply(text=texts.UNKNOWN_ACTION)
    try:
        _check_access(ctx)
        return handler(ctx, value)
    except Exception as exc:
        return reply_for_error(ctx, exc, action_id, value)


def run_submission(ctx: CommandContext, callback_id: str, values: dict[str, str]) -> Reply:
    """A modal submission. train.FieldErrors passes through, for the surface to show on the fields."""
    handler = SUBMISSIONS.get(callback_id)
    if handler is None:
        return Reply(text=texts.UNKNOWN_ACTION)
    values = {name: plain_punctuation(value) for name, value in values.items()}  # a modal's text is not escaped
    try:
        _check_access(ctx)
        return handler(ctx, values)
    except train.FieldErrors:
        raise
    except Exception as exc:
        return reply_for_error(ctx, exc, callback_id, "")


def _check_access(ctx: CommandContext) -> None:
    """PermissionDenied (answered and audited by reply_for_error) unless the actor may use the bot here."""
    ctx.services.jobs.policy.check_can_use(ctx.actor)


def reply_for_error(ctx: CommandContext, exc: Exception, action: str, target: str) -> Reply:
    """The one place an exception becomes what a person reads (never a traceback, never a secret)."""
    if isinstance(exc, PermissionDenied):
        _audit_refusal(ctx, action, target, exc)
    if isinstance(exc, TrainbotError):
        log.info("%s by %s answered: %s", action, ctx.actor.user_id, type(exc).__name__)
        return Reply(text=bk.truncate(bk.escape(exc.user_message()), bk.MAX_TEXT))
    log.exception("%s by %s failed", action, ctx.actor.user_id)
    return Reply(text=texts.UNEXPECTED_ERROR)


def _audit_refusal(ctx: CommandContext, action: str, target: str, exc: PermissionDenied) -> None:
    try:
        ctx.services.store.audit(ctx.actor, f"{action}.refused", bk.truncate(target, 200),
                                 {"reason": exc.message, "channel": ctx.channel_id})
    except Exception:
        log.exception("could not audit a refusal of %s", ctx.actor.user_id)


@dataclass(frozen=True)
class Button:
    label: str
    action_id: str
    value: str


def buttons(blocks: Iterable[bk.Block]) -> list[Button]:
    """The buttons of a card, for surfaces that press them by label (the console)."""
    return [
        Button(label=element["text"]["text"], action_id=element["action_id"], value=element.get("value", ""))
        for element in bk.buttons_in(blocks)
    ]


def find_button(blocks: Iterable[bk.Block], label: str) -> Button | None:
    wanted = label.strip().lower()
    return next((b for b in buttons(blocks) if b.label.lower() == wanted), None)

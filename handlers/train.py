"""/train, its plan card and the card's buttons: Launch, Edit (a modal, or a re-prompt), Cancel.

Launch is carried out off the ack path (services.run_later): the card is posted in the channel at once
as "Launching…", the backend is called, and the card is updated in place. The request id drawn with the
plan card travels in the button value, so a double click or a Slack retry launches once. So does the commit
the card pinned for own code: Launch and Edit start from that commit and never ask the git host again, so
what launches is what the card showed even when the branch moved meanwhile.

Resolving a git REF asks the git host (``git ls-remote``), which can take longer than a chat surface may
wait for its acknowledgement: ``resolving_note`` tells a surface beforehand, so it can acknowledge at once
and draw the card off the ack path (bot/slack_app.py does).
"""

from __future__ import annotations

import json
import logging
import shlex
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from handlers import blocks as bk
from handlers import cards, texts
from handlers.chat import ChatUnavailable, ModalChat, Reply
from handlers.context import CommandContext
from handlers.live import job_card
from jobs.errors import BadInput, SpecError, TrainbotError
from jobs.planning.grammar import general_help, help_for, keys, tokenize
from jobs.planning.own_code import check_allowed, display, is_full_commit, unpinned_git
from jobs.planning.plan import LaunchPlan
from jobs.planning.pricing import spot_discount
from jobs.planning.spec import JobSpec

log = logging.getLogger(__name__)

MODAL_FIELDS = ("model", "dataset", "instance_type", "instance_count", "distribution", "spot", "max_run",
                "max_wait")
OPTIONS_FIELD = "options"
DRAFT_PREFIX = "draft:"


class FieldErrors(BadInput):
    """A modal submission that does not validate: one sentence per field (block id)."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__(" ".join(errors.values()))
        self.errors = errors


# ---------------------------------------------------------------- /train


def handle_train(ctx: CommandContext, text: str) -> Reply:
    text = text.strip()
    help_text = general_help() if not text else help_for(text)
    if help_text is not None:
        return Reply(text=f"```{bk.truncate(help_text, bk.MAX_TEXT - 6)}```")
    return plan_reply(ctx, text)


def resolving_note(ctx: CommandContext, text: str) -> str | None:
    """The line a surface acknowledges /train ``text`` with when drawing its card must first resolve a git REF
    over the network; None when the card needs no network or the text is answered at once (help, bad input,
    a refusal)."""
    text = text.strip()
    if not text or help_for(text) is not None:
        return None
    services = ctx.services
    try:
        services.jobs.policy.check_can_use(ctx.actor)
        spec = services.jobs.parse(text)
        if spec.code is not None:
            check_allowed(spec.code, services.settings.trainbot_code_sources)
    except TrainbotError:
        return None
    source = unpinned_git(spec.code, spec.code_commit)
    if source is None:
        return None
    return texts.RESOLVING_CODE.format(source=bk.escape(display(source.url, None, source.ref or "HEAD")))


def plan_reply(ctx: CommandContext, text: str) -> Reply:
    """The plan card for ``text`` with a fresh request id in its buttons."""
    services = ctx.services
    plan = services.jobs.plan(text)
    value = encode_value(ctx, uuid.uuid4().hex, text, commit=plan.spec.code_commit)
    backend = services.backend
    note = backend.scaling_note(plan) if backend is not None else None
    spec = plan.spec
    blocks = cards.plan_card(
        spec, plan.cost, command=f"/train {text}", value=value, scaling_note=note,
        max_job_usd=services.settings.trainbot_max_job_usd,
        spot_pct_if_on=None if spec.spot else spot_discount(spec.instance_type) * 100.0,
        forecast=plan.forecast, run_forecast=plan.run_forecast,
    )
    return Reply(text=cards.plan_fallback(spec, plan.cost, plan.forecast), blocks=blocks)


# ---------------------------------------------------------------- button values


@dataclass(frozen=True)
class CardButton:
    """What a plan card's buttons carry: the request id, the command, and the commit the card pinned."""

    request_id: str
    text: str
    commit: str | None = None  # own git code: the commit the card showed (never resolved again)


def encode_value(ctx: CommandContext, request_id: str, text: str, *, commit: str | None = None) -> str:
    """The request id, the command and the pinned commit in a button value; a command too long for one is
    kept in the store."""
    fields = {"r": request_id, "t": text} | ({"c": commit} if commit is not None else {})
    value = json.dumps(fields, separators=(",", ":"))
    if len(value) <= bk.MAX_BUTTON_VALUE:
        return value
    ctx.services.store.set_meta(DRAFT_PREFIX + request_id, text)
    fields.pop("t")
    return json.dumps(fields, separators=(",", ":"))


def decode_button(ctx: CommandContext, value: str) -> CardButton:
    try:
        data = json.loads(value)
        request_id = str(data["r"])
        text = data.get("t")
        commit = data.get("c")
    except (ValueError, TypeError, KeyError, AttributeError):
        raise BadInput(texts.STALE_BUTTON) from None
    if text is None:
        text = ctx.services.store.get_meta(DRAFT_PREFIX + request_id)
    if not isinstance(text, str) or not (commit is None or (isinstance(commit, str) and is_full_commit(commit))):
        raise BadInput(texts.STALE_BUTTON)
    return CardButton(request_id, text, commit)


def decode_value(ctx: CommandContext, value: str) -> tuple[str, str]:
    button = decode_button(ctx, value)
    return button.request_id, button.text


def card_plan(ctx: CommandContext, button: CardButton) -> LaunchPlan:
    """The plan the card showed: its command with the commit it pinned, so the git host is not asked again."""
    jobs = ctx.services.jobs
    if button.commit is None:
        return jobs.plan(button.text)
    spec = jobs.parse(button.text)
    if unpinned_git(spec.code, spec.code_commit) is not None:
        spec = spec.model_copy(update={"code_commit": button.commit})
    return jobs.plan(spec)


# ---------------------------------------------------------------- Launch


def on_launch(ctx: CommandContext, value: str) -> Reply | None:
    """Access is checked again at the click (router), not only when the card was drawn; launched off the
    ack path."""
    button = decode_button(ctx, value)
    request_id = button.request_id
    services = ctx.services
    existing = services.store.find_by_request(request_id)
    if existing is not None:
        return Reply(text=texts.ALREADY_LAUNCHED.format(lineage=existing.id))
    spec = card_plan(ctx, button).spec
    if not services.launch_guard.claim(request_id):
        return None  # the same click is being launched right now
    try:
        services.run_later(lambda: launch_now(ctx, request_id, spec))
    except Exception:
        services.launch_guard.release(request_id)
        raise
    return Reply(text=texts.LAUNCHING_EPHEMERAL.format(model=spec.model))


def launch_now(ctx: CommandContext, request_id: str, spec: JobSpec) -> None:
    """Post the card, launch ``spec`` (as the card planned it, commit included), attach the card to the
    lineage and update it. Runs in the background."""
    try:
        _launch_with_card(ctx, request_id, spec)
    finally:
        ctx.services.launch_guard.release(request_id)


def _launch_with_card(ctx: CommandContext, request_id: str, spec: JobSpec) -> None:
    title = texts.PLAN_TITLE.format(model=spec.model, count=spec.instance_count, instance=spec.instance_type)
    ts = _post_quietly(ctx, *cards.launching_card(title))
    try:
        lineage = ctx.services.jobs.launch(spec, actor=ctx.actor, request_id=request_id)
    except TrainbotError as exc:
        _refused(ctx, ts, title, exc.user_message())
        return
    except Exception:
        log.exception("launch of request %s failed", request_id)
        _refused(ctx, ts, title, texts.UNEXPECTED_ERROR)
        return
    if ts is None:
        return
    ctx.services.jobs.attach_message(lineage.id, ctx.channel_id, ts)
    lineage = ctx.services.jobs.get(lineage.id)
    card_text, card_blocks = job_card(ctx.services, lineage)
    _quietly(lambda: ctx.chat.update(ctx.channel_id, ts, card_text, blocks=card_blocks))


def _refused(ctx: CommandContext, ts: str | None, title: str, reason: str) -> None:
    if ts is not None:
        text, blocks = cards.refused_card(title, reason)
        _quietly(lambda: ctx.chat.update(ctx.channel_id, ts, text, blocks=blocks))
    _quietly(lambda: ctx.chat.post_ephemeral(ctx.channel_id, ctx.actor.user_id,
                                             texts.LAUNCH_REFUSED.format(reason=reason)))


def _post_quietly(ctx: CommandContext, text: str, blocks: list[bk.Block]) -> str | None:
    try:
        return ctx.chat.post(ctx.channel_id, text, blocks=blocks)
    except ChatUnavailable:
        log.warning("could not post the launch card in %s; launching without it", ctx.channel_id)
        return None


def _quietly(call: Callable[[], object]) -> None:
    try:
        call()
    except ChatUnavailable:
        log.warning("a chat call failed after a launch; the watcher's updates will follow")


# ---------------------------------------------------------------- Cancel and Edit


def on_cancel(ctx: CommandContext, value: str) -> Reply:
    return Reply(text=texts.CANCELLED)


def on_edit(ctx: CommandContext, value: str) -> Reply | None:
    """A modal with the plan's fields where the surface has modals; a re-prompt elsewhere."""
    button = decode_button(ctx, value)
    if ctx.trigger_id and isinstance(ctx.chat, ModalChat):
        spec = card_plan(ctx, button).spec
        ctx.chat.open_modal(ctx.trigger_id, edit_modal(spec, button.text, ctx.channel_id))
        return None
    return Reply(text=texts.EDIT_REPROMPT.format(command=button.text))


def other_options(text: str) -> str:
    """The tokens of ``text`` that the modal does not show as fields (the preset, hp.*, ...)."""
    table = keys()
    shown = {word for word, key in table.items() if key.name in MODAL_FIELDS}
    kept = [token for token in tokenize(text) if token.split("=", 1)[0].lower() not in shown]
    return shlex.join(kept)


def _field_values(spec: JobSpec) -> dict[str, str]:
    return {
        "model": spec.model, "dataset": spec.dataset, "instance_type": spec.instance_type,
        "instance_count": str(spec.instance_count), "distribution": spec.distribution,
        "spot": "yes" if spec.spot else "no", "max_run": str(spec.max_run),
        "max_wait": "" if spec.max_wait is None else str(spec.max_wait),
    }


def edit_modal(spec: JobSpec, text: str, channel: str) -> dict[str, Any]:
    values = _field_values(spec)
    inputs = [_input(name, values[name], optional=name == "max_wait") for name in MODAL_FIELDS]
    inputs.append(_input(OPTIONS_FIELD, other_options(text), optional=True))
    return {
        "type": "modal",
        "callback_id": cards.EDIT_CALLBACK,
        "private_metadata": json.dumps({"c": channel}),
        "title": bk.plain(texts.MODAL_TITLE, bk.MAX_MODAL_TITLE),
        "submit": bk.plain(texts.MODAL_SUBMIT, bk.MAX_MODAL_TITLE),
        "close": bk.plain(texts.MODAL_CLOSE, bk.MAX_MODAL_TITLE),
        "blocks": inputs[: bk.MAX_MODAL_BLOCKS],
    }


def _input(name: str, initial: str, *, optional: bool = False) -> bk.Block:
    element: bk.Block = {"type": "plain_text_input", "action_id": "value", "max_length": 3000}
    if initial:
        element["initial_value"] = bk.truncate(initial, 3000)
    return {"type": "input", "block_id": name, "optional": optional,
            "label": bk.plain(texts.MODAL_LABELS[name], 2000), "element": element}


def modal_channel(private_metadata: str) -> str:
    try:
        return str(json.loads(private_metadata)["c"])
    except (ValueError, TypeError, KeyError):
        raise BadInput(texts.STALE_BUTTON) from None


def command_from_fields(values: dict[str, str]) -> str:
    parts = [values.get(OPTIONS_FIELD, "").strip()]
    spot = values.get("spot", "").strip().lower()
    for name in MODAL_FIELDS:
        value = values.get(name, "").strip()
        if not value or (name == "max_wait" and spot in ("no", "false", "off", "0", "n")):
            continue
        parts.append(f"{name}={shlex.quote(value)}")
    return " ".join(part for part in parts if part)


def on_edit_submitted(ctx: CommandContext, values: dict[str, str]) -> Reply:
    """The modal's fields as a command: a fresh plan card (FieldErrors for the modal when it fails)."""
    text = command_from_fields(values)
    try:
        return plan_reply(ctx, text)
    except SpecError as exc:
        raise FieldErrors({_field_of(exc.user_message()): exc.user_message()}) from None


def _field_of(message: str) -> str:
    lowered = message.lower()
    for name in MODAL_FIELDS:
        if name in lowered:
            return name
    aliases = {word: key.name for word, key in keys().items() if key.name in MODAL_FIELDS}
    for word, name in aliases.items():
        if f" {word}" in lowered or lowered.startswith(word):
            return name
    return OPTIONS_FIELD

"""/train, its plan card and the card's buttons: Launch, Edit (a modal, or a re-prompt), Cancel.

Launch is carried out off the ack path (services.run_later): the card is posted in the channel at once
as "Launching…", the backend is called, and the card is updated in place. The request id drawn with the
plan card travels in the button value, so a double click or a Slack retry launches once. So does the commit
the card pinned for own code: Launch and Edit start from that commit and never ask the git host again, so
what launches is what the card showed even when the branch moved meanwhile.

Resolving a git REF asks the git host (``git ls-remote``), and so does reading a pinned entry from a commit
not fetched yet (the card says what the script saves): either can take longer than a chat surface may wait
for its acknowledgement. ``resolving_note`` tells a surface beforehand, so it can acknowledge at once and
draw the card off the ack path (bot/slack_app.py does).

A job's card and thread need a conversation that takes the bot's posts (handlers.chat.ReachChat). Where the
bot cannot post (a DM between people, a private channel it is not in) the plan card says how to fix that and
its Launch carries the job in a DM with the launcher. When that is not known yet at the ack, the card is drawn
at once and the check follows off the ack path: where the bot cannot post, a second card comes through the
surface's answer (the command's response_url). A Launch whose card cannot be posted launches nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import re
import shlex
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from handlers import blocks as bk
from handlers import cards, launch_card, texts
from handlers.chat import ChannelUnreachable, ChatUnavailable, ModalChat, ReachChat, Reply
from handlers.context import DIRECT, NOT_A_MEMBER, CommandContext, run_waiting_on_code
from handlers.live import job_card
from jobs.errors import BadInput, SpecError, TrainbotError
from jobs.planning.grammar import (
    HELP_KEY,
    HELP_USAGE,
    general_help,
    help_for,
    help_parts,
    keys,
    tokenize,
)
from jobs.planning.own_code import display, is_full_commit, parse_code, unpinned_git
from jobs.planning.plan import LaunchPlan
from jobs.planning.prices import spot_discount
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
    if help_text == general_help():
        return help_reply()
    if help_text is not None:
        return Reply(text=f"```{bk.truncate(bk.escape(help_text), bk.MAX_TEXT - 6)}```")
    return plan_reply(ctx, text)


def help_reply() -> Reply:
    """`/train help` in sections that each fit Slack's 3,000 characters: the usage, each part of the help
    (a part too long for one section goes on in the next), and how to ask about one key."""
    blocks: list[bk.Block] = [bk.header(texts.HELP_TITLE), bk.section(f"`{bk.escape(HELP_USAGE)}`"),
                              bk.context(bk.escape(HELP_KEY))]
    for title, lines in help_parts():
        for number, chunk in enumerate(_chunks([bk.escape(line) for line in lines], bk.MAX_TEXT - len(title) - 20)):
            heading = title if number == 0 else texts.HELP_CONTINUED.format(title=title)
            blocks.append(bk.section(f"*{heading}*\n```" + "\n".join(chunk) + "```"))
    blocks.append(bk.context(bk.escape(HELP_KEY)))
    return Reply(text=texts.HELP_FALLBACK.format(usage=HELP_USAGE, key=HELP_KEY),
                 blocks=bk.message(blocks, cut_note=texts.BLOCKS_CUT))


def _chunks(lines: list[str], limit: int) -> list[list[str]]:
    """Consecutive lines in groups of at most ``limit`` characters (a line longer than that, alone and cut)."""
    chunks: list[list[str]] = [[]]
    used = 0
    for line in lines:
        line = bk.truncate(line, limit)
        if chunks[-1] and used + len(line) + 1 > limit:
            chunks.append([])
            used = 0
        chunks[-1].append(line)
        used += len(line) + 1
    return chunks


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
        spec = services.jobs.check(text)  # the allowlist, and whether own code may run here at all
    except TrainbotError:
        return None
    if spec.code is None or not services.jobs.waits_on_code_host(spec):
        return None
    source = unpinned_git(spec.code, spec.code_commit)
    if source is None:  # pinned, but its entry is read from a commit not fetched yet
        pinned = parse_code(spec.code)
        return texts.READING_CODE.format(source=bk.escape(display(pinned.url, spec.code_commit or pinned.ref)))
    return texts.RESOLVING_CODE.format(source=bk.escape(display(source.url, None, source.ref or "HEAD")))


def plan_reply(ctx: CommandContext, text: str) -> Reply:
    """The plan card for ``text`` with a fresh request id in its buttons."""
    services = ctx.services
    plan = services.jobs.plan(text)
    reach = _reach_here(ctx)
    in_dm = reach is False or ctx.conversation == DIRECT
    value = encode_value(ctx, uuid.uuid4().hex, text, commit=plan.spec.code_commit, dm=in_dm)
    backend = services.backend
    note = backend.scaling_note(plan) if backend is not None else None
    spec = plan.spec
    blocks = cards.plan_card(
        # The command as it was read (the entrance unescaped Slack's text), escaped once.
        spec, plan.cost, command=f"/train {text}", value=value, scaling_note=note,
        max_job_usd=services.settings.trainbot_max_job_usd,
        spot_pct_if_on=None if spec.spot else spot_discount(spec.instance_type) * 100.0,
        forecast=plan.forecast, run_forecast=plan.run_forecast, in_dm=in_dm, from_dm=ctx.conversation == DIRECT,
    )
    if reach is None and ctx.answer is not None:
        services.run_later(lambda: _offer_dm_if_unreachable(ctx, text))
    return Reply(text=cards.plan_fallback(spec, plan.cost, plan.forecast), blocks=blocks)


def _reach_here(ctx: CommandContext) -> bool | None:
    """Whether a job's card can be posted where the person asked, as far as is known without asking the
    platform (None: not known yet); True on surfaces that cannot tell."""
    chat = ctx.chat
    if not isinstance(chat, ReachChat) or not ctx.channel_id:
        return True
    if ctx.conversation == NOT_A_MEMBER:  # Slack says so with the command itself: known at the ack
        return False
    if ctx.conversation == DIRECT:  # a DM: the job goes to the person's DM with the bot, whichever this is
        return False
    return chat.known_reach(ctx.channel_id)


def _offer_dm_if_unreachable(ctx: CommandContext, text: str) -> None:
    """After the ack, off its path: where it turns out the bot cannot post, a second plan card follows
    through the surface's answer (Slack: the command's response_url) saying how to fix that, its Launch
    carrying the job in a DM. (The first card's Launch would launch nothing there, and says so.)"""
    chat = ctx.chat
    if not isinstance(chat, ReachChat) or chat.can_post(ctx.channel_id) or ctx.answer is None:
        return
    try:
        ctx.answer(plan_reply(ctx, text))
    except TrainbotError as exc:
        ctx.answer(Reply(text=bk.truncate(exc.user_message(), bk.MAX_TEXT)))


# ---------------------------------------------------------------- button values


@dataclass(frozen=True)
class CardButton:
    """What a plan card's buttons carry: the request id, the command, and the commit the card pinned."""

    request_id: str
    text: str
    commit: str | None = None  # own git code: the commit the card showed (never resolved again)
    dm: bool = False  # the card was drawn where the bot cannot post: the job's card goes to the launcher's DM


def encode_value(ctx: CommandContext, request_id: str, text: str, *, commit: str | None = None,
                 dm: bool = False) -> str:
    """The request id, the command, the pinned commit and where the card goes in a button value; a command
    too long for one is kept in the store."""
    fields: dict[str, object] = {"r": request_id, "t": text}
    if commit is not None:
        fields["c"] = commit
    if dm:
        fields["d"] = 1
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
        dm = data.get("d", 0) == 1
    except (ValueError, TypeError, KeyError, AttributeError):
        raise BadInput(texts.STALE_BUTTON) from None
    if text is None:
        text = ctx.services.store.get_meta(DRAFT_PREFIX + request_id)
    if not isinstance(text, str) or not (commit is None or (isinstance(commit, str) and is_full_commit(commit))):
        raise BadInput(texts.STALE_BUTTON)
    return CardButton(request_id, text, commit, dm)


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
        launch = functools.partial(launch_now, ctx, request_id, spec, in_dm=button.dm)
        if spec.code is not None:  # it fetches the code first: never on the pool cards and buttons use
            run_waiting_on_code(services, ctx.actor.user_id, launch)
        else:
            services.run_later(launch)
    except Exception:
        services.launch_guard.release(request_id)
        raise
    launching = texts.LAUNCHING_IN_DM if button.dm else texts.LAUNCHING_EPHEMERAL
    return Reply(text=launching.format(model=spec.model_label))


def launch_now(ctx: CommandContext, request_id: str, spec: JobSpec, *, in_dm: bool = False) -> None:
    """Post the card (in the launcher's DM with ``in_dm``), launch ``spec`` (as the card planned it, commit
    included), attach the card to the lineage and update it. Runs in the background. Where the card cannot
    be posted nothing is launched: a job with no card has no thread for its progress and report."""
    title = texts.PLAN_TITLE.format(model=spec.model_label, count=spec.instance_count, instance=spec.instance_type)
    try:
        card_ctx = _card_context(ctx, in_dm)
        ts = _post_card(card_ctx, title, request_id, in_dm=in_dm)
        _launch_with_card(card_ctx, request_id, spec, title, ts)
    except _NoCard:
        pass
    finally:
        ctx.services.launch_guard.release(request_id)


class _NoCard(Exception):
    """The job's card cannot be posted, so nothing is launched; the person has been told why."""


def _card_context(ctx: CommandContext, in_dm: bool) -> CommandContext:
    """Where the job's card goes: the channel, or the launcher's DM with the bot."""
    if not in_dm:
        return ctx
    chat = ctx.chat
    try:
        if not isinstance(chat, ReachChat):
            raise ChatUnavailable("this chat has no direct messages")
        channel = chat.dm_channel(ctx.actor.user_id)
    except ChatUnavailable as exc:
        ctx.tell(texts.NO_DM_FOR_CARD.format(reason=exc))
        raise _NoCard from None
    return dataclasses.replace(ctx, channel_id=channel)


def _post_card(ctx: CommandContext, title: str, request_id: str, *, in_dm: bool) -> str | None:
    """The launching card's ts (posted once: handlers/launch_card.py); None when the chat is down for now in a
    channel that takes posts (the outbox posts the card, or finds it, when it delivers the job's first news);
    _NoCard where it cannot be posted at all."""
    text, blocks = cards.launching_card(title)
    try:
        return launch_card.post(ctx.chat, ctx.channel_id, text, blocks, request_id)
    except ChannelUnreachable:
        ctx.tell(texts.CANNOT_POST_HERE)
        raise _NoCard from None
    except ChatUnavailable as exc:
        if in_dm:
            ctx.tell(texts.NO_DM_FOR_CARD.format(reason=exc))
            raise _NoCard from None
        log.warning("could not post the launch card in %s; launching without it", ctx.channel_id)
        return None


def _launch_with_card(ctx: CommandContext, request_id: str, spec: JobSpec, title: str, ts: str | None) -> None:
    try:
        lineage = ctx.services.jobs.launch(spec, actor=ctx.actor, request_id=request_id)
    except TrainbotError as exc:
        _refused(ctx, ts, title, bk.escape(exc.user_message()))
        return
    except Exception:
        log.exception("launch of request %s failed", request_id)
        _refused(ctx, ts, title, texts.UNEXPECTED_ERROR)
        return
    if ts is None:
        launch_card.record_lost(ctx.services, lineage.id)  # the outbox looks for it or posts it, unwaited
        return
    ctx.services.jobs.attach_message(lineage.id, ctx.channel_id, ts)
    lineage = ctx.services.jobs.get(lineage.id)
    card_text, card_blocks = job_card(ctx.services, lineage)
    _quietly(lambda: ctx.chat.update(ctx.channel_id, ts, card_text, blocks=card_blocks))


def _refused(ctx: CommandContext, ts: str | None, title: str, reason: str) -> None:
    if ts is not None:
        text, blocks = cards.refused_card(title, reason)
        _quietly(lambda: ctx.chat.update(ctx.channel_id, ts, text, blocks=blocks))
    ctx.tell(texts.LAUNCH_REFUSED.format(reason=reason))


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
    return Reply(text=texts.EDIT_REPROMPT.format(command=bk.escape(button.text)))


def other_options(text: str) -> str:
    """The tokens of ``text`` that the modal does not show as fields (the preset, hp.*, ...)."""
    table = keys()
    shown = {word for word, key in table.items() if key.name in MODAL_FIELDS}
    kept = [token for token in tokenize(text) if token.split("=", 1)[0].lower() not in shown]
    return shlex.join(kept)


def _field_values(spec: JobSpec) -> dict[str, str]:
    return {
        "model": spec.model or "", "dataset": spec.dataset or "", "instance_type": spec.instance_type,
        "instance_count": str(spec.instance_count), "distribution": spec.distribution,
        "spot": "yes" if spec.spot else "no", "max_run": str(spec.max_run),
        "max_wait": "" if spec.max_wait is None else str(spec.max_wait),
    }


def edit_modal(spec: JobSpec, text: str, channel: str) -> dict[str, Any]:
    values = _field_values(spec)
    inputs = [_input(name, values[name], optional=name == "max_wait") for name in MODAL_FIELDS]
    inputs.append(_input(OPTIONS_FIELD, other_options(text), optional=True))
    return bk.modal_view(inputs, title=texts.MODAL_TITLE, callback_id=cards.EDIT_CALLBACK,
                         submit=texts.MODAL_SUBMIT, close=texts.MODAL_CLOSE,
                         private_metadata=json.dumps({"c": channel}))


def _input(name: str, initial: str, *, optional: bool = False) -> bk.Block:
    element: bk.Block = {"type": "plain_text_input", "action_id": "value", "max_length": bk.MAX_INPUT}
    if initial:
        element["initial_value"] = bk.truncate(initial, bk.MAX_INPUT)
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
        raise FieldErrors({field_of(exc): exc.user_message()}) from None


def field_of(exc: SpecError) -> str:
    """The modal field (block id) a refusal belongs under: the field the error is about when it says, else
    the modal field its sentence names first (as a whole word), else the options."""
    if exc.field is not None:
        return exc.field if exc.field in MODAL_FIELDS else OPTIONS_FIELD
    words = {word: key.param for word, key in keys().items() if key.target == "spec" and key.param in MODAL_FIELDS}
    words.update({name: name for name in MODAL_FIELDS})
    found = [(match.start(), words[match.group(1).lower()]) for match in _field_words(tuple(words)).finditer(exc.user_message())]
    return min(found)[1] if found else OPTIONS_FIELD


@functools.cache
def _field_words(words: tuple[str, ...]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(word) for word in sorted(words, key=len, reverse=True))
    return re.compile(rf"(?<![\w.])({alternatives})(?![\w])", re.IGNORECASE)

"""/jobs, /job ID, /stop ID and the card's Stop button."""

from __future__ import annotations

import logging

from handlers import blocks as bk
from handlers import cards, logs, texts
from handlers.chat import ChatUnavailable, Reply
from handlers.context import CommandContext
from handlers.live import job_card
from jobs.errors import InvalidState, TrainbotError
from jobs.lineage import Lineage

log = logging.getLogger(__name__)


def handle_jobs(ctx: CommandContext, text: str) -> Reply:
    active_only = text.strip().lower() in ("active", "running")
    lineages = ctx.services.jobs.list(active_only=active_only, limit=50)
    summary, blocks = cards.jobs_list(lineages)
    return Reply(text=summary, blocks=blocks)


def handle_job(ctx: CommandContext, text: str) -> Reply:
    ref = text.strip()
    if not ref:
        return Reply(text=texts.USAGE_JOB)
    lineage, withheld = logs.readable(ctx, ctx.services.jobs.get(ref))
    summary, blocks = job_card(ctx.services, lineage, detail=True)
    if withheld is not None:  # the card without its failure lines, and one sentence saying why
        blocks = bk.message([*blocks[:1], bk.context(bk.escape(withheld)), *blocks[1:]], cut_note=texts.BLOCKS_CUT)
    return Reply(text=summary, blocks=blocks)


def handle_stop(ctx: CommandContext, text: str) -> Reply:
    ref = text.strip()
    if not ref:
        return Reply(text=texts.USAGE_STOP)
    return _stop(ctx, ref)


def on_stop(ctx: CommandContext, value: str) -> Reply | None:
    return _stop(ctx, value)


def _stop(ctx: CommandContext, ref: str) -> Reply:
    """Refusals are answered at once; the backend call itself runs off the ack path."""
    services = ctx.services
    lineage = services.jobs.get(ref)
    services.jobs.policy.check_can_manage(ctx.actor, lineage, verb="stop")
    if lineage.status.is_terminal():
        raise InvalidState(texts.ALREADY_ENDED.format(lineage=lineage.id, status=lineage.status.phrase()))
    services.run_later(lambda: stop_now(ctx, lineage.id))
    return Reply(text=texts.STOPPING.format(lineage=lineage.id))


def stop_now(ctx: CommandContext, lineage_id: str) -> None:
    try:
        lineage = ctx.services.jobs.stop(lineage_id, actor=ctx.actor)
    except TrainbotError as exc:
        _tell(ctx, texts.STOP_FAILED.format(lineage=lineage_id, reason=bk.escape(exc.user_message())))
        return
    except Exception:
        log.exception("stopping %s failed", lineage_id)
        _tell(ctx, texts.STOP_FAILED.format(lineage=lineage_id, reason=texts.UNEXPECTED_ERROR))
        return
    refresh_card(ctx, lineage)


def refresh_card(ctx: CommandContext, lineage: Lineage) -> None:
    """Redraw the lineage's card in place, where it has one."""
    if not (lineage.channel and lineage.message_ts):
        return
    text, blocks = job_card(ctx.services, lineage)
    try:
        ctx.chat.update(lineage.channel, lineage.message_ts, text, blocks=blocks)
    except ChatUnavailable:
        log.warning("could not update the card of %s; the outbox will", lineage.id)


def _tell(ctx: CommandContext, text: str) -> None:
    try:
        ctx.chat.post_ephemeral(ctx.channel_id, ctx.actor.user_id, text)
    except ChatUnavailable:
        log.warning("could not tell %s: %s", ctx.actor.user_id, text)

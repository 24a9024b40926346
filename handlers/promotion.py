"""Promotions and rollbacks in chat: the Promote card (`/deploy JOB name=EXISTING`), the Promote and Rollback
buttons (on that card, on a schedule's line, on the "now serves" message), `/rollback ENDPOINT [REASON]`,
`/endpoint ENDPOINT` (its history) and `/models [LINE]` (the registry).

Every check (who may, which model, which caps) is answered at once; the backend calls run off the ack path
(services.run_later) and a refusal there is told to the person who pressed. What serves in the end reaches
the job's thread through the outbox when the watcher sees the update take.
"""

from __future__ import annotations

import json
import logging
import shlex
from typing import Any

from handlers import blocks as bk
from handlers import cards, texts
from handlers.chat import Reply
from handlers.context import CommandContext, run_telling_failures
from jobs.endpoints import texts as endpoint_texts
from jobs.endpoints.history import render_history
from jobs.endpoints.promotion_plan import PromotionPlan, Side
from jobs.errors import BadInput
from jobs.planning.grammar import plain_punctuation
from jobs.planning.prices import usd
from jobs.registry import text as registry_text
from jobs.releases import texts as release_texts

log = logging.getLogger(__name__)

USAGE_ROLLBACK = "Usage: /rollback ENDPOINT [why]: back to the model it served before (its owner or an admin)."
USAGE_ENDPOINT = "Usage: /endpoint ENDPOINT: which model served when, promoted or rolled back by whom."
USAGE_MODELS = "Usage: /models [LINE]: the registry's model lines, or one line's versions."
BUTTON_PROMOTE = "Promote"
BUTTON_ROLLBACK = "Rollback"
CARD_NOW = "Serving now"
CARD_NEW = "Would serve"
PROMOTE_FAILED = "Promoting into {name} failed: {reason}"
ROLLING_BACK_FAILED = "Rolling {name} back failed: {reason}"
PROMOTED_BY_BUTTON = "Promoting {lineage} into {name}: its thread says when it serves."
BAD_BUTTON = "That button's value is not one trainbot made; run the command again."
MAX_REASON = 300
KINDS = (release_texts.RELEASE, endpoint_texts.ENDPOINT_PROMOTED, endpoint_texts.ENDPOINT_ROLLED_BACK,
         endpoint_texts.ENDPOINT_UPDATE_FAILED)


# ---------------------------------------------------------------- the Promote card and button


def promote_card(plan: PromotionPlan) -> list[bk.Block]:
    """The current and the new model side by side: lineage, package, metrics, instances, cost an hour. A new
    model that is worse on a quality metric is said so, and its Promote button asks first (Slack's confirm)."""
    blocks = [bk.section(bk.escape(plan.headline())), *bk.fields(_pairs(plan.current, plan.new))]
    if plan.framework_note:
        blocks.append(bk.context(f":information_source: {bk.escape(plan.framework_note)}"))
    worse = plan.regression_sentence()
    if worse:
        blocks.append(bk.context(f":warning: {bk.escape(worse)}"))
    blocks.append(bk.actions([promote_button(plan)]))
    return blocks


def promote_button(plan: PromotionPlan) -> bk.Block:
    worse = plan.regression_sentence()
    element = bk.button(BUTTON_PROMOTE, cards.ACTION_PROMOTE, plan.button_value(), style="danger" if worse else "primary")
    if worse:
        element["confirm"] = bk.confirm(endpoint_texts.PROMOTE_CONFIRM_TITLE, worse,
                                        yes=endpoint_texts.PROMOTE_CONFIRM_YES, no=endpoint_texts.PROMOTE_CONFIRM_NO)
    return element


def _pairs(current: Side, new: Side) -> list[tuple[str, str]]:
    pairs = [(CARD_NOW, _side_head(current)), (CARD_NEW, _side_head(new))]
    names = sorted(set(current.metrics) | set(new.metrics))[:3]
    for name in names:
        pairs += [(bk.escape(name), _metric(current, name)), (bk.escape(name), _metric(new, name))]
    pairs += [("Runs on", bk.escape(current.where)), ("Runs on", bk.escape(new.where)),
              ("Cost", _hourly(current)), ("Cost", _hourly(new))]
    return pairs  # an even count: bk.fields' sections of 10 keep "now" left and "new" right


def _side_head(side: Side) -> str:
    package = f"\n{bk.escape(side.package)} ({registry_text.APPROVAL_WORDS.get(side.approval or '', '?')})" \
        if side.package else ""
    return f"{side.lineage_id}{package}"


def _metric(side: Side, name: str) -> str:
    value = side.metrics.get(name)
    return "-" if value is None else f"{value:g}"


def _hourly(side: Side) -> str:
    if side.hourly_usd is None:
        return "per request (serverless)"
    return "free (this machine)" if side.hourly_usd == 0 else f"{usd(side.hourly_usd)}/h"


def offer(ctx: CommandContext, job: str, endpoint: str, options: dict[str, str]) -> Reply:
    """`/deploy JOB name=EXISTING`: the card, nothing started."""
    plan = _promotions(ctx).plan(job, endpoint, options=options, actor=ctx.actor)
    return Reply(text=plan.summary(), blocks=promote_card(plan))


def on_promote(ctx: CommandContext, value: str) -> Reply | None:
    """A Promote button: its value names the job, the endpoint and the options (checked again here: the
    presser must own the endpoint or be an admin)."""
    fields = _decode(value, ("job", "endpoint"))
    options = fields.get("options") if isinstance(fields.get("options"), dict) else {}
    plan = _promotions(ctx).plan(str(fields["job"]), str(fields["endpoint"]),
                                 options={str(k): str(v) for k, v in (options or {}).items()}, actor=ctx.actor)
    worse = plan.regression_sentence()
    if worse and fields.get("ok") != 1:  # a button that did not ask (a schedule's line): a second step asks
        return Reply(text=endpoint_texts.PROMOTE_ASKS_FIRST.format(sentence=worse), blocks=promote_card(plan))

    def promote() -> None:
        _promotions(ctx).promote(plan, actor=ctx.actor)

    ctx.services.run_later(lambda: run_telling_failures(ctx, promote, PROMOTE_FAILED, plan.name))
    return Reply(text=PROMOTED_BY_BUTTON.format(lineage=plan.lineage.id, name=plan.name))


# ---------------------------------------------------------------- rollback


def handle_rollback(ctx: CommandContext, text: str) -> Reply:
    words = _words(text)
    if not words:
        return Reply(text=USAGE_ROLLBACK)
    reason = bk.truncate(" ".join(words[1:]), MAX_REASON)
    return _rollback(ctx, words[0], reason, expected=None)


def on_rollback(ctx: CommandContext, value: str) -> Reply | None:
    """The Rollback button of a "now serves" message: only while that model still serves."""
    fields = _decode(value, ("endpoint", "revision"))
    return _rollback(ctx, str(fields["endpoint"]), "the Rollback button", expected=int(fields["revision"]))


def _rollback(ctx: CommandContext, name: str, reason: str, *, expected: int | None) -> Reply:
    current, target = _promotions(ctx).check_rollback(name, actor=ctx.actor, expected=expected)

    def roll_back() -> None:
        _promotions(ctx).rollback(name, actor=ctx.actor, reason=reason, expected=expected)

    ctx.services.run_later(lambda: run_telling_failures(ctx, roll_back, ROLLING_BACK_FAILED, current.endpoint))
    kept = _promotions(ctx).package_kept(current.lineage_id, ctx.actor)
    return Reply(text=" ".join(filter(None, (endpoint_texts.ROLLING_BACK.format(
        name=current.endpoint, lineage=target.lineage_id, current=current.lineage_id), kept))))


# ---------------------------------------------------------------- reading


def handle_endpoint(ctx: CommandContext, text: str) -> Reply:
    words = _words(text)
    if len(words) != 1:
        return Reply(text=USAGE_ENDPOINT)
    promotions = _promotions(ctx)
    endpoint, revisions = promotions.history(words[0])
    lines = render_history(endpoint, revisions, promotions.package_label)
    body = bk.escape("\n".join(lines[1:]))
    return Reply(text=bk.fallback("\n".join(lines)),
                 blocks=[bk.section(f"*{bk.escape(lines[0])}*"), bk.section(body or " ")])


def handle_models(ctx: CommandContext, text: str) -> Reply:
    words = _words(text)
    if len(words) > 1:
        return Reply(text=USAGE_MODELS)
    registry = ctx.services.registry
    if registry is None:
        return Reply(text=texts.NOT_AVAILABLE.format(feature="The model registry"))
    group = words[0] if words else None
    deployed = ctx.services.endpoints.serving() if ctx.services.endpoints is not None else {}
    if group is not None:
        lines = registry_text.render_packages(group, registry.list(group), deployed)
    else:  # the lines, then the newest versions of any line
        newest = registry.list(limit=15)
        lines = registry_text.render_groups(registry.groups())
        lines += ["", *registry_text.render_packages(None, newest, deployed)] if newest else []
    summary = "\n".join(lines)
    return Reply(text=bk.fallback(summary), blocks=[bk.section(bk.escape(summary))])


# ---------------------------------------------------------------- the outbox's messages


def render(kind: str, payload: dict[str, Any]) -> tuple[str, list[bk.Block]]:
    """A schedule's line and the promotion messages: the text, with the button a person may want next."""
    text = str(payload.get("text") or kind)
    blocks: list[bk.Block] = [bk.section(bk.escape(text))]
    endpoint, lineage = str(payload.get("endpoint") or ""), str(payload.get("lineage_id") or "")
    if kind == release_texts.RELEASE and payload.get("offer") and endpoint and lineage:
        value = json.dumps({"job": lineage, "endpoint": endpoint, "options": {}}, separators=(",", ":"))
        blocks.append(bk.actions([bk.button(BUTTON_PROMOTE, cards.ACTION_PROMOTE, value, style="primary")]))
    elif kind == endpoint_texts.ENDPOINT_PROMOTED and endpoint and payload.get("revision") or kind == release_texts.RELEASE and payload.get("revision") and endpoint:
        value = json.dumps({"endpoint": endpoint, "revision": int(payload["revision"])}, separators=(",", ":"))
        blocks.append(bk.actions([cards.rollback_button(BUTTON_ROLLBACK, value, endpoint, lineage or "the model now")]))
    return bk.fallback(text), blocks


# ---------------------------------------------------------------- helpers


def _promotions(ctx: CommandContext) -> Any:
    if ctx.services.endpoints is None:
        raise BadInput(texts.NOT_AVAILABLE.format(feature="Endpoints"))
    return ctx.services.endpoints.promotions


def _decode(value: str, keys: tuple[str, ...]) -> dict[str, Any]:
    try:
        fields = json.loads(value)
    except ValueError:
        fields = None
    if not isinstance(fields, dict) or any(key not in fields for key in keys):
        raise BadInput(BAD_BUTTON)
    if "revision" in keys and not isinstance(fields["revision"], int):
        raise BadInput(BAD_BUTTON)
    return fields


def _words(text: str) -> list[str]:
    try:
        return shlex.split(plain_punctuation(text))
    except ValueError:
        raise BadInput("The command has an unbalanced quote: close it.") from None

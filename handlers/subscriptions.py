"""/notify: subscribe this channel to job events, unsubscribe, list, and a person's DM default.

/notify on [EVENTS] [user=@someone | schedule=NAME | preset=NAME]   (default events: failed, gave-up, regression)
/notify off [the same filter]     /notify list     /notify dm on|off
Changing a channel's subscriptions is said in the channel (everyone there will read the messages);
listing and DM settings answer the person alone.
"""

from __future__ import annotations

from handlers import blocks as bk
from handlers import texts
from handlers.cards import mention
from handlers.chat import Reply
from handlers.context import CommandContext
from handlers.routing import notifications
from jobs.errors import NotFound
from jobs.notifications.rules import USAGE, Filter, NotifyCommand, parse_notify
from jobs.notifications.store import Subscription


def handle_notify(ctx: CommandContext, text: str) -> Reply:
    command = parse_notify(text, me=ctx.actor.user_id)
    if command.verb == "help":
        return Reply(text=USAGE)
    if command.verb == "list":
        return _list(ctx)
    if command.verb == "dm":
        assert command.dm is not None
        notifications(ctx.services).set_dm_default(ctx.actor, command.dm)
        return Reply(text=texts.NOTIFY_DM_ON if command.dm else texts.NOTIFY_DM_OFF)
    if command.verb == "on":
        return _on(ctx, command)
    return _off(ctx, command.filter if command.filter.kind else None)


def _on(ctx: CommandContext, command: NotifyCommand) -> Reply:
    done = notifications(ctx.services).subscribe(ctx.actor, ctx.channel_id, command.events, command.filter)
    what = _what(command.filter)
    events = ", ".join(done.subscription.events)
    text = texts.NOTIFY_ON.format(events=events, what=what)
    if done.before is not None:
        text = texts.NOTIFY_REPLACED.format(events=events, what=what, old=", ".join(done.before))
    if done.others:
        who = ", ".join(dict.fromkeys(mention(s.created_by) for s in done.others))
        text += texts.NOTIFY_OTHERS_KEPT.format(who=who)
    return Reply(text=text + _schedule_note(ctx, command.filter), ephemeral=False)


def _off(ctx: CommandContext, flt: Filter | None) -> Reply:
    result = notifications(ctx.services).unsubscribe(ctx.actor, ctx.channel_id, flt)
    if not result.removed and not result.kept:
        return Reply(text=texts.NOTIFY_OFF_NONE.format(what=f" for {_what(flt)}" if flt else ""))
    text = texts.NOTIFY_OFF.format(count=len(result.removed))
    if result.kept:
        who = ", ".join(dict.fromkeys(mention(s.created_by) for s in result.kept))
        text += texts.NOTIFY_OFF_KEPT.format(count=len(result.kept), who=who)
    return Reply(text=text, ephemeral=not result.removed)


def _list(ctx: CommandContext) -> Reply:
    service = notifications(ctx.services)
    subscriptions = service.list(ctx.channel_id)
    dm = service.dm_default(ctx.actor.user_id)
    state = texts.NOTIFY_DM_DEFAULT if dm is None else ("on" if dm else "off")
    lines = [texts.NOTIFY_LIST_HEAD, *map(_line, subscriptions)] if subscriptions else [texts.NOTIFY_LIST_EMPTY]
    lines.append(texts.NOTIFY_DM_STATE.format(state=state))
    return Reply(text=bk.truncate("\n".join(lines), bk.MAX_TEXT))


def _line(subscription: Subscription) -> str:
    return texts.NOTIFY_LIST_LINE.format(events=", ".join(subscription.events), what=_what(subscription.filter),
                                         who=mention(subscription.created_by))


def _what(flt: Filter | None) -> str:
    if flt is None or not flt.kind:
        return "every job"
    if flt.kind == "user":
        return f"jobs launched by {mention(flt.value)}"
    return f"jobs of {flt.kind} {bk.escape(flt.value)}"


def _schedule_note(ctx: CommandContext, flt: Filter) -> str:
    schedules = ctx.services.schedules
    if flt.kind != "schedule" or schedules is None:
        return ""
    try:
        schedules.get(flt.value)
    except NotFound:
        return texts.NOTIFY_NO_SCHEDULE.format(name=bk.escape(flt.value))
    return ""

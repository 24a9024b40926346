"""/schedule: add, list, pause, resume, remove and run nightly retrains (the same for Slack and the console)."""

from __future__ import annotations

import logging

from handlers import blocks as bk
from handlers.chat import ChatUnavailable, Reply
from handlers.context import CommandContext, run_waiting_on_code
from jobs.errors import TrainbotError
from jobs.schedules.service import ScheduleService

log = logging.getLogger(__name__)

HELP = (
    "Nightly retrains:\n"
    '- /schedule add NAME cron="0 2 * * *" [tz=Europe/Berlin] [overlap=skip|queue] [threshold=1] '
    "[endpoint=NAME [deploy_if_better=yes]] <train arguments, e.g. distilbert-spot data=s3://bucket/fresh/ or "
    "revision=v2>: each run is compared with the previous one; endpoint= offers it to that endpoint with a "
    "Promote button, and deploy_if_better=yes promotes a better one without a click. An endpoint that serves "
    "another task is refused; one that does not exist yet is taken with a warning (deploy a run there to make it)\n"
    "- /schedule list\n"
    "- /schedule pause|resume|remove NAME\n"
    "- /schedule run NAME (now)"
)
NOT_SET_UP = "Schedules are not set up on this bot yet."
USAGE_NAME = "Usage: /schedule {verb} NAME; /schedule list shows the names."
UNKNOWN_VERB = "Unknown /schedule command {verb!r}: use add, list, pause, resume, remove or run (or help)."
ADDED = "Schedule {name} added: cron {cron!r} ({tz}), next run {next_run}; it trains on {data}."
ENDPOINT_AUTO = "A run better than the one before is promoted into {endpoint} without a click."
ENDPOINT_OFFER = "Each run is offered to {endpoint} with a Promote button."
DONE = {"pause": "Schedule {name} paused.", "resume": "Schedule {name} resumed; next run {next_run}.",
        "remove": "Schedule {name} removed."}
STARTING = "Starting schedule {name} now; its card follows in this channel."
RUN_STARTED = "Schedule {name} started {lineage}."
RUN_FAILED = "Schedule {name} could not start: {reason}"


def handle_schedule(ctx: CommandContext, text: str) -> Reply:
    """Every refusal is one ephemeral sentence; nothing raises out of here."""
    verb, _, rest = text.strip().partition(" ")
    verb = verb.lower()
    if verb in ("", "help"):
        return Reply(text=HELP)
    service: ScheduleService | None = ctx.services.schedules
    if service is None:
        return Reply(text=NOT_SET_UP)
    try:
        return _dispatch(ctx, service, verb, rest.strip())
    except TrainbotError as exc:
        return Reply(text=bk.escape(exc.user_message()))


def _dispatch(ctx: CommandContext, schedules: ScheduleService, verb: str, rest: str) -> Reply:
    if verb == "list":
        return _list(schedules)
    if verb not in ("add", "pause", "resume", "remove", "run"):
        return Reply(text=UNKNOWN_VERB.format(verb=bk.escape(verb[:40])))
    name, _, args = rest.partition(" ")
    if not name:
        return Reply(text=USAGE_NAME.format(verb=verb if verb != "add" else 'add NAME cron="0 2 * * *"'))
    if verb == "add":
        return _add(ctx, schedules, name, args)
    if verb == "run":
        return _run(ctx, schedules, name)
    if verb == "remove":
        schedules.remove(name, actor=ctx.actor)
        return Reply(text=DONE[verb].format(name=name))
    schedule = getattr(schedules, verb)(name, actor=ctx.actor)
    return Reply(text=DONE[verb].format(name=name, next_run=schedule.next_run_text()))


def _add(ctx: CommandContext, schedules: ScheduleService, name: str, args: str) -> Reply:
    schedule = schedules.add_from_text(name, args, actor=ctx.actor, channel=ctx.channel_id)
    text = ADDED.format(name=schedule.name, cron=schedule.cron, tz=schedule.tz,
                        next_run=schedule.next_run_text(), data=schedule.data_text())
    if schedule.endpoint:
        text += " " + (ENDPOINT_AUTO if schedule.deploy_if_better else ENDPOINT_OFFER).format(endpoint=schedule.endpoint)
    warning = schedules.endpoint_warning(schedule)
    if warning:
        text += f"\n:warning: {bk.escape(warning)}"
    return Reply(text=text, ephemeral=False)


def _list(schedules: ScheduleService) -> Reply:
    summary = schedules.render_list()
    return Reply(text=summary, blocks=[bk.section(bk.escape(summary))])


def _run(ctx: CommandContext, schedules: ScheduleService, name: str) -> Reply:
    # Unknown names are refused at once; the launch (a backend call) runs off the 3 s ack path.
    schedule = schedules.get(name)
    if _own_code(ctx, schedule.text):  # it resolves a git REF and fetches: on the code-host pool
        run_waiting_on_code(ctx.services, ctx.actor.user_id, lambda: _run_now(ctx, schedules, name))
    else:
        ctx.services.run_later(lambda: _run_now(ctx, schedules, name))
    return Reply(text=STARTING.format(name=name))


def _own_code(ctx: CommandContext, text: str) -> bool:
    try:
        return ctx.services.jobs.parse(text).code is not None
    except TrainbotError:
        return False  # the run says what is wrong with it


def _run_now(ctx: CommandContext, schedules: ScheduleService, name: str) -> None:
    try:
        lineage = schedules.run_now(name, actor=ctx.actor)
        text = RUN_STARTED.format(name=name, lineage=lineage.id)
    except TrainbotError as exc:
        text = RUN_FAILED.format(name=name, reason=bk.escape(exc.user_message()))
    except Exception:
        log.exception("running schedule %s failed", name)
        text = RUN_FAILED.format(name=name, reason="something went wrong on our side; it has been logged.")
    try:
        ctx.chat.post_ephemeral(ctx.channel_id, ctx.actor.user_id, text)
    except ChatUnavailable:
        log.warning("could not tell %s about schedule %s: %s", ctx.actor.user_id, name, text)

"""The operator's `trainbot` commands: schedules, recipes, the store's schema, and EventBridge's setup."""

from __future__ import annotations

import argparse
import sys

from bot.cli_support import cli_actor, command_text, configure_logging, runtime_for, usage
from jobs.settings import Settings


def add_operator_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    _add_schedule_commands(sub)
    _add_recipe_commands(sub)
    _add_db_commands(sub)
    _add_events_commands(sub)


def _add_schedule_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    schedule = sub.add_parser("schedule", help="nightly retrains", description="Nightly retrains.")
    schedule.set_defaults(run=lambda args, settings: usage(schedule))
    verbs = schedule.add_subparsers(title="schedule commands", metavar="VERB")
    add = verbs.add_parser("add", help='add NAME cron="0 2 * * *" [tz=Europe/Berlin] [endpoint=NAME '
                                       '[deploy_if_better=yes]] TEXT... (an endpoint serving another task is '
                                       'refused; one that does not exist yet is taken with a warning)')
    add.add_argument("name")
    add.add_argument("text", nargs=argparse.REMAINDER, help="cron=EXPR [tz=ZONE] and the /train arguments")
    add.set_defaults(run=_cmd_schedule_add)
    verbs.add_parser("list", help="schedules with their next run and last result").set_defaults(
        run=_cmd_schedule_list
    )
    for verb in ("pause", "resume", "remove", "run"):
        cmd = verbs.add_parser(verb, help=f"{verb} a schedule")
        cmd.add_argument("name")
        cmd.set_defaults(run=_cmd_schedule_verb, verb=verb)


def _add_recipe_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    recipe = sub.add_parser("recipe", help="team recipes for /train NAME", description="Team recipes.")
    recipe.set_defaults(run=lambda args, settings: usage(recipe))
    verbs = recipe.add_subparsers(title="recipe commands", metavar="VERB")
    save = verbs.add_parser("save", help="save NAME TEXT...: name a validated /train command")
    save.add_argument("name")
    save.add_argument("text", nargs=argparse.REMAINDER, help="the /train arguments, e.g. bert-squad spot=yes")
    save.set_defaults(run=_cmd_recipe, verb="save")
    verbs.add_parser("list", help="every recipe (saved and from TRAINBOT_RECIPES_FILE)").set_defaults(
        run=_cmd_recipe, verb="list", name=None
    )
    for verb in ("show", "remove"):
        cmd = verbs.add_parser(verb, help=f"{verb} a recipe")
        cmd.add_argument("name")
        cmd.set_defaults(run=_cmd_recipe, verb=verb)


def _add_db_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    db = sub.add_parser("db", help="the store's schema: upgrade, current",
                        description="The store's schema (Alembic revisions; every bot also upgrades at start).")
    db.set_defaults(run=lambda args, settings: usage(db))
    verbs = db.add_subparsers(title="db commands", metavar="VERB")
    verbs.add_parser("upgrade", help="apply the revisions the store lacks (under a lock)").set_defaults(
        run=_cmd_db_upgrade
    )
    verbs.add_parser("current", help="the store's revision, and whether it is the newest").set_defaults(
        run=_cmd_db_current
    )


def _add_events_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    events = sub.add_parser("events", help="SageMaker's job changes pushed by EventBridge: setup",
                            description="SageMaker's job and endpoint changes pushed to the bot by EventBridge.")
    events.set_defaults(run=lambda args, settings: usage(events))
    verbs = events.add_subparsers(title="events commands", metavar="VERB")
    setup = verbs.add_parser("setup", help="create (or update) the SQS queue and the EventBridge rule; "
                                          "prints the queue URL for TRAINBOT_EVENTS_QUEUE")
    setup.add_argument("--queue", help="the queue's name (default: TRAINBOT_EVENTS_QUEUE, else "
                                       "trainbot-sagemaker-events)")
    setup.set_defaults(run=_cmd_events_setup)


# --- recipes ------------------------------------------------------------------------------


def _cmd_recipe(args: argparse.Namespace, settings: Settings) -> int:
    from bot.wiring import recipe_book
    from jobs.recipes import text as recipe_text

    configure_logging(settings)
    book = recipe_book(settings)
    if args.verb == "list":
        print(recipe_text.render_list(book.list(), book.file_problems()))
    elif args.verb == "show":
        print(recipe_text.render_recipe(book.show(args.name)))
    elif args.verb == "remove":
        book.remove(args.name, actor=cli_actor())
        print(recipe_text.REMOVED.format(name=args.name))
    else:
        recipe, replaced = book.save(args.name, command_text(args.text), actor=cli_actor())
        print((recipe_text.REPLACED if replaced else recipe_text.SAVED).format(name=recipe.name, text=recipe.text))
    return 0


# --- schedules ------------------------------------------------------------------------------


def _cmd_schedule_add(args: argparse.Namespace, settings: Settings) -> int:
    runtime = runtime_for(settings)
    schedules = runtime.require_schedules()
    schedule = schedules.add_from_text(args.name, command_text(args.text), actor=cli_actor(), channel=None)
    print(f"schedule {schedule.name} added; next run {schedule.next_run_text()}")
    warning = schedules.endpoint_warning(schedule)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _cmd_schedule_list(args: argparse.Namespace, settings: Settings) -> int:
    runtime = runtime_for(settings)
    print(runtime.require_schedules().render_list())
    return 0


def _cmd_schedule_verb(args: argparse.Namespace, settings: Settings) -> int:
    runtime = runtime_for(settings)
    schedules = runtime.require_schedules()
    if args.verb == "run":
        lineage = schedules.run_now(args.name, actor=cli_actor())
        print(lineage.id)
        return 0
    getattr(schedules, args.verb)(args.name)
    print(f"schedule {args.name}: {args.verb}d" if args.verb != "remove" else f"schedule {args.name} removed")
    return 0


# --- the store's schema ---------------------------------------------------------------------


def _cmd_db_upgrade(args: argparse.Namespace, settings: Settings) -> int:
    from bot.scheduler import scheduler_tables
    from jobs.clock import SystemClock
    from jobs.store.store import Store

    configure_logging(settings)
    store = Store(settings.database_url, clock=SystemClock())
    applied = store.migrate(foreign=scheduler_tables(store.engine))
    where = store.engine.url.render_as_string(hide_password=True)
    if applied:
        print(f"{where}: applied {', '.join(applied)}; now at {store.schema_revision()} (the newest)")
    else:
        print(f"{where}: {_revision_text(store.schema_revision())}; nothing to apply")
    return 0


def _cmd_db_current(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.clock import SystemClock
    from jobs.store.store import Store

    store = Store(settings.database_url, clock=SystemClock())
    where = store.engine.url.render_as_string(hide_password=True)
    print(f"{where}: {_revision_text(store.schema_revision())}")
    return 0


def _revision_text(revision: str | None) -> str:
    from jobs.store.migrate import head_revision, is_known

    head = head_revision()
    if revision == head:
        return f"at revision {head}, the newest"
    if revision is None:
        return f"no revision yet (new, or made by the first release); `trainbot db upgrade` brings it to {head}"
    if not is_known(revision):
        return f"at revision {revision}, newer than this trainbot knows ({head}): a newer bot migrated it"
    return f"at revision {revision}, behind {head}; `trainbot db upgrade` (or any bot's start) applies the rest"


# --- events ---------------------------------------------------------------------------------


def _cmd_events_setup(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.backends.sagemaker.events import MAX_RECEIVES, setup_from_settings
    from jobs.settings import EVENTS_POLL_SECONDS

    configure_logging(settings)
    done = setup_from_settings(settings, args.queue)
    print(f"rule {done.rule_arn} sends SageMaker's job and endpoint state changes to the queue; a message "
          f"the bot cannot read goes to {done.dead_letter_url} after {MAX_RECEIVES} receives. Set "
          f"TRAINBOT_EVENTS_QUEUE to the URL below; the full poll then only reconciles, every "
          f"{EVENTS_POLL_SECONDS:g} s unless TRAINBOT_POLL_SECONDS is set.", file=sys.stderr)
    print(done.queue_url)
    return 0

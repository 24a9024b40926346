"""The `trainbot` command. Commands that take TEXT read it with the same grammar as Slack.

Exit codes: 0 done, 2 bad input, 1 anything else. An error is one line on stderr, never a
traceback; the traceback of an unexpected error goes to the log file under TRAINBOT_HOME.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from jobs.errors import BadInput, TrainbotError
from jobs.records import Actor
from jobs.settings import Settings

if TYPE_CHECKING:
    from bot.wiring import Runtime
    from jobs.planning.reader import CommandReader

log = logging.getLogger(__name__)

Command = Callable[[argparse.Namespace, Settings], int]


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = Settings()
    except ValueError as exc:
        _error(f"the environment is not valid: {_first_pydantic_error(exc)}")
        return 2
    command: Command = getattr(args, "run", None) or _default_command
    try:
        return command(args, settings)
    except TrainbotError as exc:
        _error(exc.user_message())
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`trainbot jobs | head`): not an error. Point stdout at devnull so
        # the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # the last line of defence: one line for the person, the trace to the log
        logfile = _log_unexpected(settings)
        _error(f"unexpected {type(exc).__name__}: {exc} (details in {logfile})")
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainbot",
        description="Run Hugging Face training on SageMaker from Slack, or locally in a terminal.",
        epilog="With no command: `serve` when Slack tokens are set, else `console`.",
    )
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    def add(name: str, run: Command, help_text: str, *, text: bool = False) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        cmd.set_defaults(run=run)
        if text:
            cmd.add_argument("text", nargs=argparse.REMAINDER, help="the /train arguments, e.g. bert-squad spot=yes")
        return cmd

    add("parse", _cmd_parse, "print the JobSpec of a /train command as JSON", text=True)
    plan = add("plan", _cmd_plan, "show what would be launched and what it costs (no network)", text=True)
    plan.add_argument("--json", action="store_true", help="one JSON object: spec, estimator arguments, cost")
    add("launch", _cmd_launch, "launch on the configured backend; prints the lineage id last", text=True)
    jobs_cmd = add("jobs", _cmd_jobs, "list jobs, newest first")
    jobs_cmd.add_argument("--all", action="store_true", help="include ended jobs beyond the recent ones")
    status = add("status", _cmd_status, "the report of a job (lineage id or SageMaker job name)")
    status.add_argument("job")
    status.add_argument("--json", action="store_true")
    stop = add("stop", _cmd_stop, "stop a job (lineage id or SageMaker job name)")
    stop.add_argument("job")
    logs = add("logs", _cmd_logs, "the last lines of a job's log, every host's labelled (lineage id or job name)")
    logs.add_argument("job")
    logs.add_argument("--lines", "-n", default=None, metavar="N", help="lines per host (default 40, at most 500)")
    watch = add("watch", _cmd_watch, "watch jobs, recover spot jobs and report (--once: one cycle)")
    watch.add_argument("--once", action="store_true")
    deploy = add("deploy", _cmd_deploy, "deploy a completed job to an endpoint; prints its name last")
    deploy.add_argument("job")
    deploy.add_argument("options", nargs="*", help="key=value, e.g. instance_type=ml.g5.xlarge serverless=yes")
    undeploy = add("undeploy", _cmd_undeploy, "delete an endpoint and its config (models are kept)")
    undeploy.add_argument("name")
    predict = add("predict", _cmd_predict, "ask an endpoint: question=... context=... or text=...")
    predict.add_argument("name")
    predict.add_argument("inputs", nargs="*", help="key=value")
    _add_schedule_commands(sub)
    _add_recipe_commands(sub)
    _add_db_commands(sub)
    _add_events_commands(sub)
    serve = add("serve", _cmd_serve, "run the Slack bot with the watcher and scheduler")
    serve.add_argument("--http", action="store_true", help="HTTP at /slack/events instead of Socket Mode")
    serve.add_argument("--port", type=int, default=3000)
    console = add("console", _cmd_console, "the bot in this terminal, on the local backend")
    console.add_argument("--script", type=Path, help="read commands from FILE as if typed; exit when its jobs end")
    add("demo", _cmd_demo, "the three recipes scaled down, locally, with a summary table")
    return parser


def _add_schedule_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    schedule = sub.add_parser("schedule", help="nightly retrains", description="Nightly retrains.")
    schedule.set_defaults(run=lambda args, settings: _usage(schedule))
    verbs = schedule.add_subparsers(title="schedule commands", metavar="VERB")
    add = verbs.add_parser("add", help='add NAME cron="0 2 * * *" [tz=Europe/Berlin] TEXT...')
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
    recipe.set_defaults(run=lambda args, settings: _usage(recipe))
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
    db.set_defaults(run=lambda args, settings: _usage(db))
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
    events.set_defaults(run=lambda args, settings: _usage(events))
    verbs = events.add_subparsers(title="events commands", metavar="VERB")
    setup = verbs.add_parser("setup", help="create (or update) the SQS queue and the EventBridge rule; "
                                          "prints the queue URL for TRAINBOT_EVENTS_QUEUE")
    setup.add_argument("--queue", help="the queue's name (default: TRAINBOT_EVENTS_QUEUE, else "
                                       "trainbot-sagemaker-events)")
    setup.set_defaults(run=_cmd_events_setup)


# --- commands that need no backend -------------------------------------------------------


def _cmd_parse(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.planning.grammar import help_for

    text = _text(args.text)
    help_text = help_for(text)
    if help_text is not None:
        print(help_text)
        return 0
    spec = _reader(settings).parse(text)
    print(json.dumps(spec.model_dump(mode="json"), indent=2))
    return 0


def _cmd_recipe(args: argparse.Namespace, settings: Settings) -> int:
    from bot.wiring import recipe_book
    from jobs.recipes import text as recipe_text

    _configure_logging(settings)
    book = recipe_book(settings)
    if args.verb == "list":
        print(recipe_text.render_list(book.list(), book.file_problems()))
    elif args.verb == "show":
        print(recipe_text.render_recipe(book.show(args.name)))
    elif args.verb == "remove":
        book.remove(args.name, actor=_cli_actor())
        print(recipe_text.REMOVED.format(name=args.name))
    else:
        recipe, replaced = book.save(args.name, _text(args.text), actor=_cli_actor())
        print((recipe_text.REPLACED if replaced else recipe_text.SAVED).format(name=recipe.name, text=recipe.text))
    return 0


def _reader(settings: Settings) -> CommandReader:
    """The grammar with this bot's recipes (read from its database and TRAINBOT_RECIPES_FILE)."""
    from bot.wiring import command_reader, recipe_book

    _configure_logging(settings)
    return command_reader(settings, recipe_book(settings))


def _cmd_plan(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.planning.grammar import help_for
    from jobs.planning.plan import render_plan_text

    words, trailing_json = _pop_flag(args.text, "--json")  # `plan bert-squad --json` as well
    as_json = args.json or trailing_json
    text = _text(words)
    help_text = help_for(text)
    if help_text is not None:
        print(help_text)
        return 0
    runtime = _runtime(settings, with_backend=False)
    plan = runtime.jobs.plan(text)
    if as_json:
        print(json.dumps(plan.to_json(), indent=2, default=str))
    else:
        print(render_plan_text(plan))
    return 0


# --- jobs -----------------------------------------------------------------------------------


def _cmd_launch(args: argparse.Namespace, settings: Settings) -> int:
    runtime = _runtime(settings)
    lineage = runtime.jobs.launch(_text(args.text), actor=_cli_actor())
    print(f"launched {lineage.latest_attempt.job_name if lineage.latest_attempt else lineage.id} "
          f"on {lineage.backend}", file=sys.stderr)
    print(lineage.id)
    return 0


def _cmd_jobs(args: argparse.Namespace, settings: Settings) -> int:
    runtime = _runtime(settings)
    lineages = runtime.jobs.list(limit=500 if args.all else 50)
    if not lineages:
        print("No jobs yet. Try: trainbot launch distilbert-spot")
        return 0
    print(f"{'JOB':<32} {'STATUS':<12} {'ATTEMPT':>7}  {'INSTANCE':<18} {'BY':<16} CREATED")
    for lineage in lineages:
        attempt = lineage.latest_attempt
        print(
            f"{lineage.id:<32} {lineage.status.value:<12} {len(lineage.attempts):>7}  "
            f"{(attempt.instance_type if attempt else lineage.spec.instance_type):<18} "
            f"{lineage.launched_by[:16]:<16} {lineage.created_at:%Y-%m-%d %H:%M}"
        )
    return 0


def _cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.lifecycle.forecasts import forecast_of, with_forecast
    from jobs.lifecycle.progress import read_live
    from jobs.reporting.reports import build_report

    runtime = _runtime(settings)
    lineage = runtime.jobs.get(args.job)
    report = build_report(lineage, runtime.backend, now=runtime.clock.now())
    report = with_forecast(report, forecast_of(runtime.store, runtime.clock, lineage.id))
    live = read_live(runtime.store, runtime.backend, runtime.clock, lineage)
    if args.json:
        data = report.to_json()
        data["progress"] = live.to_json() if live else None
        print(json.dumps(data, indent=2, default=str))
        return 0
    lines = report.to_text().splitlines()
    if live is not None:
        lines.insert(1, f"  progress: {live.words()}")
    print("\n".join(lines))
    return 0


def _cmd_stop(args: argparse.Namespace, settings: Settings) -> int:
    runtime = _runtime(settings)
    lineage = runtime.jobs.stop(args.job, actor=_cli_actor())
    print(f"{lineage.id}: stop requested")
    return 0


def _cmd_logs(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.reporting.logs import attempt_for, check_lines, read_job_logs

    lines = check_lines(args.lines)
    runtime = _runtime(settings)
    lineage = runtime.jobs.get(args.job)
    print(read_job_logs(lineage, attempt_for(lineage, args.job), runtime.backend, lines).to_text())
    return 0


def _cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    runtime = _runtime(settings)
    if args.once:
        print(runtime.watch_cycle())
        return 0
    if runtime.events is not None:
        print(f"acting on job changes as EventBridge pushes them; a full poll every {settings.watch_seconds:g} s; "
              "Ctrl-C to stop", file=sys.stderr)
    else:
        print(f"watching every {settings.trainbot_poll_seconds:g} s; Ctrl-C to stop", file=sys.stderr)
    runtime.run_watcher_until_signalled()
    return 0


# --- endpoints ------------------------------------------------------------------------------


def _cmd_deploy(args: argparse.Namespace, settings: Settings) -> int:
    runtime = _runtime(settings)
    endpoint = runtime.require_endpoints().deploy(
        args.job, options=_key_values(args.options), actor=_cli_actor()
    )
    print(f"deploying {endpoint.name} (follow it with `trainbot status {args.job}`)", file=sys.stderr)
    print(endpoint.name)
    return 0


def _cmd_undeploy(args: argparse.Namespace, settings: Settings) -> int:
    runtime = _runtime(settings)
    runtime.require_endpoints().undeploy(args.name, actor=_cli_actor())
    print(f"{args.name}: endpoint and its config deleted; the model is kept")
    return 0


def _cmd_predict(args: argparse.Namespace, settings: Settings) -> int:
    runtime = _runtime(settings)
    answer = runtime.require_endpoints().predict(args.name, _key_values(args.inputs), actor=_cli_actor())
    print(json.dumps(answer, indent=2, default=str))
    return 0


# --- schedules ------------------------------------------------------------------------------


def _cmd_schedule_add(args: argparse.Namespace, settings: Settings) -> int:
    runtime = _runtime(settings)
    schedule = runtime.require_schedules().add_from_text(
        args.name, _text(args.text), actor=_cli_actor(), channel=None
    )
    print(f"schedule {schedule.name} added; next run {schedule.next_run_text()}")
    return 0


def _cmd_schedule_list(args: argparse.Namespace, settings: Settings) -> int:
    runtime = _runtime(settings)
    print(runtime.require_schedules().render_list())
    return 0


def _cmd_schedule_verb(args: argparse.Namespace, settings: Settings) -> int:
    runtime = _runtime(settings)
    schedules = runtime.require_schedules()
    if args.verb == "run":
        lineage = schedules.run_now(args.name, actor=_cli_actor())
        print(lineage.id)
        return 0
    getattr(schedules, args.verb)(args.name)
    print(f"schedule {args.name}: {args.verb}d" if args.verb != "remove" else f"schedule {args.name} removed")
    return 0


# --- the store's schema ---------------------------------------------------------------------


def _cmd_db_upgrade(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.clock import SystemClock
    from jobs.store.store import Store

    _configure_logging(settings)
    store = Store(settings.database_url, clock=SystemClock())
    applied = store.migrate()
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
    from jobs.backends.sagemaker_events import setup_from_settings
    from jobs.settings import EVENTS_POLL_SECONDS

    _configure_logging(settings)
    done = setup_from_settings(settings, args.queue)
    print(f"rule {done.rule_arn} sends SageMaker's job and endpoint state changes to the queue. Set "
          f"TRAINBOT_EVENTS_QUEUE to the URL below; the full poll then only reconciles, every "
          f"{EVENTS_POLL_SECONDS:g} s unless TRAINBOT_POLL_SECONDS is set.", file=sys.stderr)
    print(done.queue_url)
    return 0


# --- surfaces -------------------------------------------------------------------------------


def _cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from bot.serve import serve

    return serve(_runtime(settings), http=args.http, port=args.port)


def _cmd_console(args: argparse.Namespace, settings: Settings) -> int:
    from bot.console import run_console

    return run_console(_runtime(settings, force_local=True), script=args.script)


def _cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from bot.demo import run_demo

    return run_demo(_runtime(settings, force_local=True))


def _default_command(args: argparse.Namespace, settings: Settings) -> int:
    if settings.has_slack:
        args.http, args.port = False, 3000
        return _cmd_serve(args, settings)
    args.script = None
    return _cmd_console(args, settings)


# --- helpers --------------------------------------------------------------------------------


def _runtime(settings: Settings, *, with_backend: bool = True, force_local: bool = False) -> Runtime:
    from bot.wiring import build_runtime

    _configure_logging(settings)
    return build_runtime(settings, with_backend=with_backend, force_local=force_local)


def _text(words: Sequence[str]) -> str:
    # The shell already split the words; join them back as a shell would quote them so the
    # Slack grammar sees exactly what the person meant (`hp.note="two words"` stays one token).
    if len(words) == 1 and _is_whole_command(words[0]):
        return words[0]
    return shlex.join(words)


def _is_whole_command(word: str) -> bool:
    """`trainbot plan "bert-squad spot=yes"` or `"model=m dataset=squad"`: the whole command as one argument,
    as typed in Slack. A single key=value whose value has spaces (`"hp.note=two words"`) is not: its second
    word is no key=value."""
    parts = word.split()
    return len(parts) > 1 and ("=" not in parts[0] or "=" in parts[1])


def _pop_flag(words: Sequence[str], flag: str) -> tuple[list[str], bool]:
    kept = [word for word in words if word != flag]
    return kept, len(kept) != len(words)


def _key_values(pairs: Sequence[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise BadInput(f"`{pair}` is not key=value; write it like instance_type=ml.g5.xlarge.")
        values[key.strip()] = value
    return values


def _cli_actor() -> Actor:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "operator"
    return Actor(user_id=f"cli:{user}", via="cli", display=user)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _error(message: str) -> None:
    print(f"trainbot: {message}", file=sys.stderr)


def _first_pydantic_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())).upper()
        return f"{where}: {first.get('msg', exc)}"
    return str(exc)


def _configure_logging(settings: Settings) -> None:
    if logging.getLogger().handlers:
        return
    settings.trainbot_home.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(settings.trainbot_home / "trainbot.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])


def _log_unexpected(settings: Settings) -> Path:
    logfile = settings.trainbot_home / "trainbot.log"
    try:
        _configure_logging(settings)
        log.exception("unexpected error")
    except OSError:
        pass
    return logfile

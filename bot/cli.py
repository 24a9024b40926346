"""The `trainbot` command. Commands that take TEXT read it with the same grammar as Slack.

Exit codes: 0 done, 2 bad input, 1 anything else. An error is one line on stderr, never a
traceback; the traceback of an unexpected error goes to the log file under TRAINBOT_HOME.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from bot.cli_endpoints import add_endpoint_commands
from bot.cli_operator import add_operator_commands
from bot.cli_support import cli_actor, command_text, configure_logging, key_values, pop_flag, runtime_for
from jobs.errors import TrainbotError
from jobs.settings import Settings

if TYPE_CHECKING:
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
    jobs_cmd.add_argument("--json", action="store_true", help="a JSON array, one object a job (fields in the README)")
    status = add("status", _cmd_status, "the report of a job (lineage id or SageMaker job name), refreshed "
                 "with one describe while it has not ended; without JOB, every job's")
    status.add_argument("job", nargs="?", help="a lineage id or SageMaker job name (default: every job, as `jobs`)")
    status.add_argument("--all", action="store_true", help="without JOB: include ended jobs beyond the recent ones")
    status.add_argument("--json", action="store_true", help="one JSON object (a JSON array without JOB)")
    stop = add("stop", _cmd_stop, "stop a job (lineage id or SageMaker job name)")
    stop.add_argument("job")
    capacity = add("capacity", _cmd_capacity, "take a running local spot job's capacity away (a simulated reclaim; "
                   "the watcher relaunches it from its checkpoints)")
    capacity.add_argument("job")
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
    add_endpoint_commands(sub)
    add_operator_commands(sub)
    serve = add("serve", _cmd_serve, "run the Slack bot with the watcher and scheduler")
    serve.add_argument("--http", action="store_true", help="HTTP at /slack/events instead of Socket Mode")
    serve.add_argument("--port", type=int, default=3000)
    console = add("console", _cmd_console, "the bot in this terminal, on the local backend")
    console.add_argument("--script", type=Path, help="read commands from FILE as if typed; exit when its jobs end")
    add("demo", _cmd_demo, "the three recipes scaled down, locally, with a summary table")
    return parser


# --- commands that need no backend -------------------------------------------------------


def _cmd_parse(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.planning.grammar import help_for

    text = command_text(args.text)
    help_text = help_for(text)
    if help_text is not None:
        print(help_text)
        return 0
    spec = _reader(settings).parse(text)
    print(json.dumps(spec.model_dump(mode="json"), indent=2))
    return 0


def _reader(settings: Settings) -> CommandReader:
    """The grammar with this bot's recipes (read from its database and TRAINBOT_RECIPES_FILE)."""
    from bot.wiring import command_reader, recipe_book

    configure_logging(settings)
    return command_reader(settings, recipe_book(settings))


def _cmd_plan(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.planning.grammar import help_for
    from jobs.planning.plan_text import render_plan_text

    words, trailing_json = pop_flag(args.text, "--json")  # `plan bert-squad --json` as well
    as_json = args.json or trailing_json
    text = command_text(words)
    help_text = help_for(text)
    if help_text is not None:
        print(help_text)
        return 0
    runtime = runtime_for(settings, with_backend=False)
    plan = runtime.jobs.plan(text)
    if as_json:
        print(json.dumps(plan.to_json(), indent=2, default=str))
    else:
        print(render_plan_text(plan))
    return 0


# --- jobs -----------------------------------------------------------------------------------


def _cmd_launch(args: argparse.Namespace, settings: Settings) -> int:
    runtime = runtime_for(settings)
    lineage = runtime.jobs.launch(command_text(args.text), actor=cli_actor())
    print(f"launched {lineage.latest_attempt.job_name if lineage.latest_attempt else lineage.id} "
          f"on {lineage.backend}", file=sys.stderr)
    print(lineage.id)
    return 0


def _cmd_jobs(args: argparse.Namespace, settings: Settings) -> int:
    from bot.cli_status import job_json

    runtime = runtime_for(settings)
    lineages = runtime.jobs.list(limit=500 if args.all else 50)
    if args.json:
        print(json.dumps([job_json(lineage) for lineage in lineages], indent=2))
        return 0
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
    from bot.cli_status import job_status

    runtime = runtime_for(settings)
    refs = [args.job] if args.job else [lineage.id for lineage in runtime.jobs.list(limit=500 if args.all else 50)]
    statuses = [job_status(runtime, ref) for ref in refs]
    if args.json:
        found = [status.to_json() for status in statuses]
        print(json.dumps(found[0] if args.job else found, indent=2, default=str))
    elif not statuses:
        print("No jobs yet. Try: trainbot launch distilbert-spot")
    else:
        print("\n\n".join(status.to_text(runtime.clock.now()) for status in statuses))
    return 0


def _cmd_stop(args: argparse.Namespace, settings: Settings) -> int:
    runtime = runtime_for(settings)
    lineage = runtime.jobs.stop(args.job, actor=cli_actor())
    print(f"{lineage.id}: stop requested")
    return 0


def _cmd_capacity(args: argparse.Namespace, settings: Settings) -> int:
    runtime = runtime_for(settings)
    attempt = runtime.jobs.take_capacity(args.job, actor=cli_actor())
    print(f"spot capacity taken from {attempt.job_name} (simulated reclaim: its processes were killed, as a "
          "reclaimed instance's are); `trainbot watch` relaunches it from its checkpoints")
    return 0


def _cmd_logs(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.reporting.logs import attempt_for, check_lines, read_job_logs

    lines = check_lines(args.lines)
    runtime = runtime_for(settings)
    lineage = runtime.jobs.get(args.job)
    print(read_job_logs(lineage, attempt_for(lineage, args.job), runtime.backend, lines).to_text())
    return 0


def _cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    runtime = runtime_for(settings)
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
    from jobs.endpoints.texts import EXISTS_PROMOTE_INSTEAD
    from jobs.errors import InvalidState

    runtime = runtime_for(settings)
    endpoints, options = runtime.require_endpoints(), key_values(args.options)
    existing = endpoints.promotion_target(options)
    if existing is not None:  # in place is a promotion: the CLI asks for it by name
        raise InvalidState(EXISTS_PROMOTE_INSTEAD.format(name=existing, lineage=endpoints.get(existing).lineage_id))
    endpoint = endpoints.deploy(args.job, options=options, actor=cli_actor())
    print(f"deploying {endpoint.name} (follow it with `trainbot status {args.job}`)", file=sys.stderr)
    print(endpoint.name)
    return 0


def _cmd_undeploy(args: argparse.Namespace, settings: Settings) -> int:
    runtime = runtime_for(settings)
    runtime.require_endpoints().undeploy(args.name, actor=cli_actor())
    print(f"{args.name}: endpoint and its config deleted; the model is kept")
    return 0


def _cmd_predict(args: argparse.Namespace, settings: Settings) -> int:
    runtime = runtime_for(settings)
    answer = runtime.require_endpoints().predict(args.name, key_values(args.inputs), actor=cli_actor())
    print(json.dumps(answer, indent=2, default=str))
    return 0


# --- surfaces -------------------------------------------------------------------------------


def _cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from bot.serve import serve

    return serve(runtime_for(settings), http=args.http, port=args.port)


def _cmd_console(args: argparse.Namespace, settings: Settings) -> int:
    from bot.console import run_console

    return run_console(runtime_for(settings, force_local=True, trusted_terminal=True), script=args.script)


def _cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    from bot.demo import demo_home, demo_settings, run_demo

    home = demo_home(settings)
    print(f"demo home: {home} (its own store: your TRAINBOT_HOME, jobs and schedules are left alone; remove the "
          "folder when done)", file=sys.stderr)
    return run_demo(runtime_for(demo_settings(settings, home), force_local=True, trusted_terminal=True))


def _default_command(args: argparse.Namespace, settings: Settings) -> int:
    if settings.has_slack:
        args.http, args.port = False, 3000
        return _cmd_serve(args, settings)
    args.script = None
    return _cmd_console(args, settings)


# --- helpers --------------------------------------------------------------------------------


def _error(message: str) -> None:
    print(f"trainbot: {message}", file=sys.stderr)


def _first_pydantic_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())).upper()
        return f"{where}: {first.get('msg', exc)}"
    return str(exc)


def _log_unexpected(settings: Settings) -> Path:
    logfile = settings.trainbot_home / "trainbot.log"
    try:
        configure_logging(settings)
        log.exception("unexpected error")
    except OSError:
        pass
    return logfile

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


# --- commands that need no backend -------------------------------------------------------


def _cmd_parse(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.planning.grammar import help_for, parse_command

    text = _text(args.text)
    help_text = help_for(text)
    if help_text is not None:
        print(help_text)
        return 0
    spec = parse_command(text, max_instances=settings.trainbot_max_instances)
    print(json.dumps(spec.model_dump(mode="json"), indent=2))
    return 0


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


def _cmd_watch(args: argparse.Namespace, settings: Settings) -> int:
    runtime = _runtime(settings)
    if args.once:
        print(runtime.watch_cycle())
        return 0
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
    """`trainbot plan "bert-squad spot=yes"`: the whole command as one argument, as typed in Slack. A
    single key=value whose value has spaces (`"hp.note=two words"`) starts with a key, so it is not."""
    parts = word.split()
    return len(parts) > 1 and "=" not in parts[0]


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

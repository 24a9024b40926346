"""`trainbot promote JOB ENDPOINT`, `trainbot rollback ENDPOINT`, `trainbot models [LINE] [--json]` and
`trainbot endpoint ENDPOINT [--json]`: what the Promote and Rollback buttons, /models and /endpoint do.

A refusal (permissions, caps, the endpoint's state) is one sentence on stderr and exit 2. Promote and
rollback return once the update is asked for; `trainbot endpoint ENDPOINT` (or `trainbot watch --once`)
follows it.
"""

from __future__ import annotations

import argparse
import json
import sys

from bot.cli_support import cli_actor, key_values, runtime_for
from jobs.endpoints.history import history_json, render_history
from jobs.endpoints.promotion_plan import rollout_words
from jobs.endpoints.texts import PROMOTE_ANYWAY_CLI
from jobs.errors import InvalidState
from jobs.registry import text as registry_text
from jobs.settings import Settings


def add_endpoint_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    promote = sub.add_parser("promote", help="promote a completed job's model into an endpoint in place "
                                             "(what the Promote button does)")
    promote.add_argument("job")
    promote.add_argument("endpoint")
    promote.add_argument("options", nargs="*", help="key=value: instance_type=, instance_count=, alarm=yes|NAME, "
                                                    "canary=PERCENT")
    promote.add_argument("--yes", action="store_true", help="promote even a model that is worse than what the "
                                                           "endpoint serves (without it, such a promotion is refused)")
    promote.set_defaults(run=_cmd_promote)
    rollback = sub.add_parser("rollback", help="return an endpoint to the model it served before, in place")
    rollback.add_argument("endpoint")
    rollback.add_argument("reason", nargs="*", help="why (kept with the rejected model package)")
    rollback.set_defaults(run=_cmd_rollback)
    models = sub.add_parser("models", help="the registry: model lines, or one line's versions")
    models.add_argument("group", nargs="?", metavar="LINE")
    models.add_argument("--json", action="store_true")
    models.set_defaults(run=_cmd_models)
    endpoint = sub.add_parser("endpoint", help="an endpoint's history: which model served when, and who put it there")
    endpoint.add_argument("endpoint")
    endpoint.add_argument("--json", action="store_true")
    endpoint.set_defaults(run=_cmd_endpoint)


def _cmd_promote(args: argparse.Namespace, settings: Settings) -> int:
    promotions = runtime_for(settings).require_endpoints().promotions
    plan = promotions.plan(args.job, args.endpoint, options=key_values(args.options), actor=cli_actor())
    worse = plan.regression_sentence()
    if worse and not args.yes:
        raise InvalidState(PROMOTE_ANYWAY_CLI.format(sentence=worse, job=args.job, name=plan.name))
    revision = promotions.promote(plan, actor=cli_actor())
    print(f"promoting {plan.lineage.id} into {plan.name} as config {revision.config_name} (it serves "
          f"{plan.current.lineage_id} now){rollout_words(plan.update.rollout)}; `trainbot endpoint {plan.name}` "
          "follows it", file=sys.stderr)
    print(plan.name)
    return 0


def _cmd_rollback(args: argparse.Namespace, settings: Settings) -> int:
    promotions = runtime_for(settings).require_endpoints().promotions
    revision = promotions.rollback(args.endpoint, actor=cli_actor(), reason=" ".join(args.reason))
    print(f"rolling {revision.endpoint} back to {revision.lineage_id} (config {revision.config_name}); "
          f"`trainbot endpoint {revision.endpoint}` follows it", file=sys.stderr)
    print(revision.endpoint)
    return 0


def _cmd_models(args: argparse.Namespace, settings: Settings) -> int:
    runtime = runtime_for(settings)
    registry = runtime.registry
    deployed = runtime.endpoints.serving() if runtime.endpoints is not None else {}
    packages = registry.list(args.group, limit=500)
    if args.json:
        print(json.dumps(registry_text.packages_json(packages, deployed), indent=2))
    elif args.group:
        print("\n".join(registry_text.render_packages(args.group, packages, deployed)))
    else:
        print("\n".join(registry_text.render_groups(registry.groups())))
        if packages:
            print("\n".join(["", *registry_text.render_packages(None, packages[:20], deployed)]))
    return 0


def _cmd_endpoint(args: argparse.Namespace, settings: Settings) -> int:
    runtime = runtime_for(settings)
    promotions = runtime.require_endpoints().promotions
    runtime.endpoints.poll_once()  # what it serves now, not at the last watch cycle
    endpoint, revisions = promotions.history(args.endpoint)
    if args.json:
        print(json.dumps(history_json(endpoint, revisions, promotions.package_label), indent=2))
    else:
        print("\n".join(render_history(endpoint, revisions, promotions.package_label)))
    return 0

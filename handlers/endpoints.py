"""/deploy JOB [key=value ...], /predict NAME key=value ..., /undeploy NAME, and the card's Deploy button.

Every check (who may, which job, which options, which inputs) is answered at once; the backend calls run
off the ack path (services.run_later) and their outcome is told to the person who asked. The endpoint's
links and snippets reach the job's thread through the outbox when the watcher sees it in service.
"""

from __future__ import annotations

import logging
import shlex
from typing import Any

from handlers import blocks as bk
from handlers import promotion, texts
from handlers.chat import Reply
from handlers.context import CommandContext, run_telling_failures
from jobs.endpoints import texts as endpoint_texts
from jobs.endpoints.service import DeployPlan
from jobs.errors import BadInput, TrainbotError
from jobs.planning.grammar import plain_punctuation
from jobs.planning.prices import hourly_usd, usd

log = logging.getLogger(__name__)

USAGE_DEPLOY = (
    "Usage: /deploy JOB [instance_type=ml.g4dn.xlarge] [instance_count=1] [serverless=yes memory_mb=2048] "
    "[name=NAME]. JOB is a completed job's id (/jobs lists them). name= of an endpoint that exists offers to "
    "promote JOB into it in place [alarm=yes|NAME] [canary=PERCENT]; /rollback NAME undoes that."
)
USAGE_PREDICT = (
    'Usage: /predict NAME question="..." context="..." (question answering), /predict NAME text="...", or '
    '/predict NAME prompt="..." [max_new_tokens=N] (text generation).'
)
USAGE_UNDEPLOY = "Usage: /undeploy NAME (the endpoint's name, as /deploy gave it)."
DEPLOY_FAILED = "Deploying {name} failed: {reason}"
ASKING = "Asking {name}…"
UNDEPLOYING = "Undeploying {name}: the endpoint and its config are being deleted (the model is kept)."
UNDEPLOY_FAILED = "Undeploying {name} failed: {reason}"
FIELD_LABELS = {
    "job": "Job",
    "endpoint": "Endpoint",
    "where": "Runs on",
    "framework": "Image",
    "cost": "Cost",
}


def handle_deploy(ctx: CommandContext, text: str) -> Reply:
    words = _words(text)
    if not words:
        return Reply(text=USAGE_DEPLOY)
    service = _service(ctx)
    if service is None:
        return Reply(text=texts.NOT_AVAILABLE.format(feature="Deploying"))
    options = _key_values(words[1:], USAGE_DEPLOY)
    existing = service.promotion_target(options)
    if existing is not None:  # an endpoint that exists: promote into it in place, with a click
        return promotion.offer(ctx, words[0], existing, options)
    plan = service.plan(words[0], options=options, actor=ctx.actor)
    ctx.services.run_later(lambda: _start(ctx, plan))
    return Reply(text=plan.summary(), blocks=deploy_card(plan))


def on_deploy(ctx: CommandContext, value: str) -> Reply | None:
    """The card's Deploy button: its value is the lineage id; default options."""
    return handle_deploy(ctx, value)


def handle_predict(ctx: CommandContext, text: str) -> Reply:
    words = _words(text)
    if len(words) < 2:
        return Reply(text=USAGE_PREDICT)
    service = _service(ctx)
    if service is None:
        return Reply(text=texts.NOT_AVAILABLE.format(feature="Predicting"))
    name, inputs = words[0], _key_values(words[1:], USAGE_PREDICT)
    service.check_predict(name, inputs, actor=ctx.actor)
    ctx.services.run_later(lambda: _predict(ctx, name, inputs))
    return Reply(text=ASKING.format(name=bk.escape(name)))


def handle_undeploy(ctx: CommandContext, text: str) -> Reply:
    words = _words(text)
    if len(words) != 1:
        return Reply(text=USAGE_UNDEPLOY)
    service = _service(ctx)
    if service is None:
        return Reply(text=texts.NOT_AVAILABLE.format(feature="Undeploying"))
    endpoint = service.check_undeploy(words[0], actor=ctx.actor)
    ctx.services.run_later(lambda: _undeploy(ctx, endpoint.name))
    return Reply(text=UNDEPLOYING.format(name=endpoint.name))


# ---------------------------------------------------------------- off the ack path


def _start(ctx: CommandContext, plan: DeployPlan) -> None:
    run_telling_failures(ctx, lambda: _service(ctx).start(plan, actor=ctx.actor), DEPLOY_FAILED, plan.name)


def _predict(ctx: CommandContext, name: str, inputs: dict[str, str]) -> None:
    def ask() -> None:
        ctx.tell(answer_text(name, _service(ctx).predict(name, inputs, actor=ctx.actor)))

    run_telling_failures(ctx, ask, "{name}: {reason}", name)


def _undeploy(ctx: CommandContext, name: str) -> None:
    def undeploy() -> None:
        _service(ctx).undeploy(name, actor=ctx.actor)
        ctx.tell(endpoint_texts.UNDEPLOYED.format(name=name))

    run_telling_failures(ctx, undeploy, UNDEPLOY_FAILED, name)


# ---------------------------------------------------------------- rendering


def deploy_card(plan: DeployPlan) -> list[bk.Block]:
    """What will be deployed: the job, the endpoint, where, the image (and why, when it differs), the cost."""
    request = plan.request
    pairs = [
        (FIELD_LABELS["job"], f"{plan.lineage.id} ({plan.job_name})"),
        (FIELD_LABELS["endpoint"], request.name),
        (FIELD_LABELS["where"], plan.where),
        (
            FIELD_LABELS["framework"],
            request.framework.label() if request.framework else "the installed transformers",
        ),
        (FIELD_LABELS["cost"], _cost(plan)),
    ]
    blocks = [bk.section(bk.escape(plan.headline())), *bk.fields(pairs)]
    if plan.framework_note:
        blocks.append(bk.context(f":information_source: {bk.escape(plan.framework_note)}"))
    return blocks


def _cost(plan: DeployPlan) -> str:
    request = plan.request
    if plan.backend == "local":
        return "free (this machine)"
    if request.serverless:
        return "per request (serverless)"
    try:
        return f"{usd(hourly_usd(request.instance_type) * request.instance_count)}/h while up"
    except (TrainbotError, KeyError):
        return "see the SageMaker price list"


def answer_text(name: str, answer: dict[str, Any]) -> str:
    score = answer.get("score")
    shown = bk.escape(str(answer.get("answer")))
    if isinstance(score, int | float):
        return endpoint_texts.ANSWER.format(name=name, answer=shown, score=f"{score:.2f}")
    return endpoint_texts.ANSWER_NO_SCORE.format(name=name, answer=shown)


# ---------------------------------------------------------------- reading the text


def _service(ctx: CommandContext) -> Any:
    return ctx.services.endpoints


def _words(text: str) -> list[str]:
    try:
        return shlex.split(plain_punctuation(text))
    except ValueError:
        raise BadInput(
            'The command has an unbalanced quote: close it, e.g. question="What is it?".'
        ) from None


def _key_values(words: list[str], usage: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"`{word}` is not key=value. {usage}")
        values[key.strip()] = value
    return values

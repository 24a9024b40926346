"""Every sentence and snippet the endpoint features show people, together so they read as one voice.

The ready message carries what a person needs to use the endpoint without the bot: the console link, the
invocation URL, and ready-to-paste `aws sagemaker-runtime invoke-endpoint` and boto3 snippets (a curl
line and a urllib snippet for local endpoints).
"""

from __future__ import annotations

import json
from typing import Any

from jobs.endpoints.port import EndpointAccess
from jobs.wording import Counted

ENDPOINT_READY = "endpoint_ready"  # the endpoint answers: links and snippets
ENDPOINT_FAILED = "endpoint_failed"  # the backend could not bring it up
ENDPOINTS_IDLE = "endpoints_idle"  # the daily note of endpoints nobody has asked for a while
ENDPOINT_PROMOTED = "endpoint_promoted"  # an update in place took: what serves now (a Rollback button)
ENDPOINT_ROLLED_BACK = "endpoint_rolled_back"  # a rollback took: what serves again
ENDPOINT_UPDATE_FAILED = "endpoint_update_failed"  # an update did not take; the previous model still serves
KINDS = (ENDPOINT_READY, ENDPOINT_FAILED, ENDPOINTS_IDLE, ENDPOINT_PROMOTED, ENDPOINT_ROLLED_BACK,
         ENDPOINT_UPDATE_FAILED)

EXAMPLES: dict[str, Any] = {
    "question-answering": {"question": "What is the city?", "context": "The city is Paris."},
    "text-classification": "A wonderful, brilliant film.",
    "text-generation": "What colour is the sky?",
}
PREDICT_HINTS = {
    "question-answering": 'question="..." context="..."',
    "text-classification": 'text="..."',
    "text-generation": 'prompt="..."',
}

NO_TASK = (
    "{lineage} ran its own code without task=, so the bot cannot tell the endpoint what it serves: "
    "deploy it with its own handler (entry_point=inference.py [source_dir=DIR], or code/inference.py in the "
    "model), or launch it with task=question-answering, task=text-classification or task=text-generation."
)
HANDLER_NEEDS_CODE = (
    "entry_point= names a handler in the job's own code, and {lineage} ran the bot's scripts: deploy it without "
    "entry_point=, or train with code= that holds the handler."
)
DEPLOYING = "Deploying {lineage} as endpoint {name} on {where}{framework}."
DEPLOY_FOLLOW = "The job's thread says when it is ready."
DEPLOYED_FRAMEWORK = " with {label}"
READY_HEAD = ":rocket: Endpoint {name} is in service ({where}, from {lineage})."
READY_TRY = (
    "Try it here: `/predict {name} {hint}`. It costs {cost} while it is up: `/undeploy {name}` when done."
)
FAILED = ":x: Endpoint {name} (from {lineage}) failed to come up: {reason} Nothing is left running; fix it and /deploy again."
IDLE_HEAD = Counted(":money_with_wings: {count:endpoint} idle for more than {hours:g} h, still costing money:")
IDLE_LINE = "• {name} (from {lineage}, {where}): idle {idle}, {hourly}/h, {total} so far. `/undeploy {name}`"
UNDEPLOYED = "{name}: endpoint and its config deleted; the model is kept."
ROLLOUT_ONLY_PROMOTING = (
    "alarm= and canary= apply when promoting into an endpoint that exists (/deploy JOB name=EXISTING): "
    "drop them to deploy a new endpoint."
)

# ---------------------------------------------------------------- promotions and rollbacks
PROMOTING = "Promoting {lineage} into endpoint {name} in place (it serves {current} now){rollout}."
PROMOTE_FOLLOW = "Name and URL stay the same; the job's thread says when the new model serves."
#: A promotion that makes the endpoint worse on a quality metric (jobs/comparison.py) asks first.
PROMOTION_REGRESSES = "{lineage} is worse than {current}, which {name} serves now: {changes}."
PROMOTE_ANYWAY_CLI = "Not promoted: {sentence} Add --yes to promote it anyway: trainbot promote {job} {name} --yes"
PROMOTE_CONFIRM_TITLE = "Promote a worse model?"
PROMOTE_CONFIRM_YES = "Promote anyway"
PROMOTE_CONFIRM_NO = "Keep what serves"
PROMOTE_ASKS_FIRST = "{sentence} Promote it anyway? The card asks before it promotes."
ROLLING_BACK = "Rolling endpoint {name} back to {lineage} (it serves {current} now)."
#: The verb of the refusal when a person may not serve a lineage's model (PromotionService.plan).
SERVE_VERB = "deploy or promote"
#: Said when an endpoint owner's rollback takes out another person's model: its package is not rejected.
PACKAGE_KEPT = (
    "{lineage}'s model package is not rejected: only the person who launched it ({owner}) or an admin changes "
    "its approval."
)
ROLLOUT_CANARY = ": {percent}% of capacity first, the rest after {wait}s"
ROLLOUT_ALL = ": all at once"
ROLLOUT_ALARM = ", rolled back by SageMaker if alarm {alarm} fires"
PROMOTED = (
    ":arrows_counterclockwise: Endpoint {name} now serves {lineage}{package}, promoted by {who}; it served "
    "{previous} before. Same name and URL."
)
ROLLED_BACK = (
    ":rewind: Endpoint {name} was rolled back by {who}: it serves {lineage}{package} again instead of "
    "{previous}{reason}."
)
UPDATE_FAILED = ":warning: Endpoint {name} did not take {lineage}: {reason} It still serves {previous}."
AUTO_ROLLED_BACK = "SageMaker rolled the update back (alarm {alarm} fired, or the new fleet failed its checks)."
ALREADY_SERVES = "Endpoint {name} already serves {lineage}: nothing to promote."
NOT_IN_SERVICE = "Endpoint {name} is {status}: it can be promoted into once it is in service."
UPDATE_UNDER_WAY = (
    "Endpoint {name} is being updated already (to {lineage}, asked by {who}): wait until its thread says it "
    "serves, then try again."
)
TASK_DIFFERS = (
    "Endpoint {name} serves {task}, but {lineage} is a {other} model: the applications calling it would break. "
    "Deploy it as a new endpoint with another name=."
)
NOTHING_TO_ROLL_BACK = (
    "Endpoint {name} has served only {lineage} since it was deployed, so there is nothing to roll back to."
)
NO_LONGER_SERVES = (
    "Endpoint {name} no longer serves {lineage} (it serves {current} now): /rollback {name} rolls back what "
    "serves now."
)
EXISTS_PROMOTE_INSTEAD = (
    "Endpoint {name} exists (it serves {lineage}): `trainbot promote JOB {name}` updates it in place."
)

ANSWER = "{name}: {answer} (score {score})"
ANSWER_NO_SCORE = "{name}: {answer}"


def where(instance_type: str, instance_count: int, serverless: bool, memory_mb: int, backend: str) -> str:
    if backend == "local":
        return "a local process on 127.0.0.1"
    if serverless:
        return f"serverless, {memory_mb} MB"
    return f"{instance_count} x {instance_type}"


def hours(value: float) -> str:
    return f"{value:.0f} h" if value >= 10 else f"{value:.1f} h"


def example_payload(task: str) -> dict[str, Any]:
    return {"inputs": EXAMPLES.get(task, EXAMPLES["text-classification"])}


def aws_cli_snippet(name: str, region: str, payload: dict[str, Any]) -> str:
    body = json.dumps(payload)
    return (
        f"aws sagemaker-runtime invoke-endpoint --region {region} --endpoint-name {name} "
        "--content-type application/json --accept application/json "
        f"--cli-binary-format raw-in-base64-out --body '{body}' /dev/stdout"
    )


def boto3_snippet(name: str, region: str, payload: dict[str, Any]) -> str:
    return "\n".join(
        [
            "import json, boto3",
            f'runtime = boto3.client("sagemaker-runtime", region_name="{region}")',
            f'response = runtime.invoke_endpoint(EndpointName="{name}", ContentType="application/json",',
            f"                                   Body=json.dumps({payload!r}))",
            'print(json.loads(response["Body"].read()))',
        ]
    )


def curl_snippet(url: str, payload: dict[str, Any]) -> str:
    return f"curl -s -X POST {url} -H 'Content-Type: application/json' -d '{json.dumps(payload)}'"


def urllib_snippet(url: str, payload: dict[str, Any]) -> str:
    return "\n".join(
        [
            "import json, urllib.request",
            f'request = urllib.request.Request("{url}", data=json.dumps({payload!r}).encode(),',
            '                                 headers={"Content-Type": "application/json"})',
            "print(json.loads(urllib.request.urlopen(request).read()))",
        ]
    )


def snippets(name: str, task: str, access: EndpointAccess) -> dict[str, str]:
    """`cli` and `python` snippets, ready to paste."""
    payload = example_payload(task)
    if access.region:
        return {
            "cli": aws_cli_snippet(name, access.region, payload),
            "python": boto3_snippet(name, access.region, payload),
        }
    return {
        "cli": curl_snippet(access.invocation_url, payload),
        "python": urllib_snippet(access.invocation_url, payload),
    }


def ready_text(
    *,
    name: str,
    lineage: str,
    where: str,
    task: str,
    cost: str,
    access: EndpointAccess,
    framework_note: str | None,
) -> str:
    code = snippets(name, task, access)
    lines = [
        READY_HEAD.format(name=name, where=where, lineage=lineage),
        f"Console: {access.console_url}",
        f"Invocation URL: {access.invocation_url}",
    ]
    if framework_note:
        lines.append(framework_note)
    lines += [
        READY_TRY.format(name=name, hint=PREDICT_HINTS.get(task, 'text="..."'), cost=cost),
        "From a terminal:",
        f"```{code['cli']}```",
        "From Python:",
        f"```{code['python']}```",
    ]
    return "\n".join(lines)

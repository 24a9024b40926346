"""Every sentence and snippet the endpoint features show people, together so they read as one voice.

The ready message carries what a person needs to use the endpoint without the bot: the console link, the
invocation URL, and ready-to-paste `aws sagemaker-runtime invoke-endpoint` and boto3 snippets (a curl
line and a urllib snippet for local endpoints).
"""

from __future__ import annotations

import json
from typing import Any

from jobs.endpoints.port import EndpointAccess

ENDPOINT_READY = "endpoint_ready"  # the endpoint answers: links and snippets
ENDPOINT_FAILED = "endpoint_failed"  # the backend could not bring it up
ENDPOINTS_IDLE = "endpoints_idle"  # the daily note of endpoints nobody has asked for a while
KINDS = (ENDPOINT_READY, ENDPOINT_FAILED, ENDPOINTS_IDLE)

EXAMPLES: dict[str, Any] = {
    "question-answering": {"question": "What is the city?", "context": "The city is Paris."},
    "text-classification": "A wonderful, brilliant film.",
}
PREDICT_HINTS = {
    "question-answering": 'question="..." context="..."',
    "text-classification": 'text="..."',
}

NO_TASK = (
    "{lineage} ran its own code without task=, so the bot cannot tell the endpoint what it serves: "
    "launch it with task=question-answering or task=text-classification to deploy it."
)
DEPLOYING = "Deploying {lineage} as endpoint {name} on {where}{framework}."
DEPLOY_FOLLOW = "The job's thread says when it is ready."
DEPLOYED_FRAMEWORK = " with {label}"
READY_HEAD = ":rocket: Endpoint {name} is in service ({where}, from {lineage})."
READY_TRY = (
    "Try it here: `/predict {name} {hint}`. It costs {cost} while it is up: `/undeploy {name}` when done."
)
FAILED = ":x: Endpoint {name} (from {lineage}) failed to come up: {reason} Nothing is left running; fix it and /deploy again."
IDLE_HEAD = ":money_with_wings: {count} endpoint(s) idle for more than {hours:g} h, still costing money:"
IDLE_LINE = "• {name} (from {lineage}, {where}): idle {idle}, {hourly}/h, {total} so far. `/undeploy {name}`"
UNDEPLOYED = "{name}: endpoint and its config deleted; the model is kept."
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

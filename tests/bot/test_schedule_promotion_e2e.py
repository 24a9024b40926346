"""Issue 25's schedule test, over real surfaces: `/schedule add nightly ... deploy_if_better=yes endpoint=prod`
signed over HTTP; three nightly runs trained on (moto's) SageMaker; the watch cycle registering each model
in SageMaker's Model Registry and deciding what the endpoint serves; the lines the schedule's channel hears
on the loopback Slack.

- run 1: one package; nothing to compare with; `/deploy RUN1 name=prod` makes the endpoint;
- run 2, better: one package more, promoted without a click (UpdateEndpoint in place: the same endpoint
  name, a new config), Approved once it serves, and one line in the channel (with a Rollback button);
- run 3, worse: one package more, no promotion (no UpdateEndpoint), a line with a Promote button.

moto lacks UpdateEndpoint: its request is checked against botocore's service model with a Stubber
(tests/support/update_endpoint.py); everything else runs against moto.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.bot.promotion_rig import Bot, button, promotion_bot
from tests.support.moto_server import MotoAws, moto_aws, moto_server  # noqa: F401  (fixtures)

NIGHT = datetime(2026, 3, 2, 2, 0, tzinfo=timezone.utc)


@pytest.fixture
def bot(tmp_path: Path, moto_aws: MotoAws) -> Iterator[Bot]:  # noqa: F811
    with promotion_bot(tmp_path, moto_aws) as running:
        yield running


def nightly_run(bot: Bot, night: int, metrics: dict[str, float]) -> str:
    result = bot.runtime.schedules.fire("nightly", NIGHT + timedelta(days=night))
    assert result.outcome == "launched", result
    bot.finish_job(result.lineage.id, metrics)
    bot.cycle()  # the job ends; its package is registered; the promotion is decided (and asked for)
    bot.cycle()  # the update in place is seen to serve
    return result.lineage.id


def packages(bot: Bot) -> list[dict]:
    sagemaker = bot.aws.client("sagemaker")
    listed = sagemaker.list_model_packages(ModelPackageGroupName="nightly", SortBy="CreationTime",
                                           SortOrder="Ascending")["ModelPackageSummaryList"]
    return [sagemaker.describe_model_package(ModelPackageName=p["ModelPackageArn"]) for p in listed]


def test_better_runs_are_promoted_in_place_and_worse_ones_offered(bot: Bot, capsys: pytest.CaptureFixture[str]) -> None:
    added = bot.command("/schedule", 'add nightly cron="0 2 * * *" deploy_if_better=yes endpoint=prod bert-squad')
    assert added["text"].startswith("Schedule nightly added")
    schedule = bot.runtime.schedules.get("nightly")
    assert (schedule.endpoint, schedule.deploy_if_better) == ("prod", True)

    first = nightly_run(bot, 0, {"eval_f1": 80.0, "eval_exact_match": 70.0})
    [line] = bot.channel_lines()
    assert line.params["text"] == (f":information_source: Schedule nightly: {first} completed (its first run), but "
                                   f"prod does not exist yet: /deploy {first} name=prod makes it.")
    deployed = bot.command("/deploy", f"{first} name=prod")
    assert deployed["text"].startswith(f"Deploying {first} as endpoint prod")
    bot.cycle()
    sagemaker = bot.aws.client("sagemaker")
    first_config = sagemaker.describe_endpoint(EndpointName="prod")["EndpointConfigName"]

    second = nightly_run(bot, 1, {"eval_f1": 84.5, "eval_exact_match": 72.0})
    update = bot.updates.last_for("prod")
    assert update["EndpointName"] == "prod" and update["EndpointConfigName"] != first_config
    described = sagemaker.describe_endpoint(EndpointName="prod")
    assert described["EndpointConfigName"] == update["EndpointConfigName"]  # the same endpoint, a new config
    config = sagemaker.describe_endpoint_config(EndpointConfigName=described["EndpointConfigName"])
    model = sagemaker.describe_model(ModelName=config["ProductionVariants"][0]["ModelName"])
    assert model["PrimaryContainer"]["ModelDataUrl"].endswith(f"/{second}-1/output/model.tar.gz")
    lines = bot.channel_lines()
    assert len(lines) == 2
    promoted = lines[-1]
    assert promoted.params["text"].startswith(f":rocket: Schedule nightly: {second} beat {first}")
    assert "promoted into prod in place" in promoted.params["text"]
    assert button(promoted, "Rollback") is not None and button(promoted, "Promote") is None

    third = nightly_run(bot, 2, {"eval_f1": 79.0, "eval_exact_match": 72.0})
    assert len(bot.updates.requests) == 1  # a regression never promotes
    assert sagemaker.describe_endpoint(EndpointName="prod")["EndpointConfigName"] == update["EndpointConfigName"]
    lines = bot.channel_lines()
    assert len(lines) == 3
    regressed = lines[-1]
    assert f"{third} regressed against {second}" in regressed.params["text"]
    assert f"prod keeps serving {second}" in regressed.params["text"]
    offer = button(regressed, "Promote")
    assert offer is not None and json.loads(offer["value"]) == {"job": third, "endpoint": "prod", "options": {}}

    records = packages(bot)
    assert [p["CustomerMetadataProperties"]["trainbot:lineage_id"] for p in records] == [first, second, third]
    assert [p["ModelApprovalStatus"] for p in records] == ["PendingManualApproval", "Approved", "PendingManualApproval"]
    assert [p["ModelPackageVersion"] for p in records] == [1, 2, 3]
    assert records[1]["ApprovalDescription"].startswith("Approved by U_ALICE: promoted into prod: schedule nightly")
    thread = [c.params["text"] for c in bot.slack.calls_to("chat.postMessage")
              if "prod now serves" in str(c.params.get("text"))]
    assert len(thread) == 1 and f"prod now serves {second} (package nightly v2), promoted by U_ALICE's schedule" in thread[0]
    history = bot.command("/endpoint", "prod")["text"]
    assert f"promoted {second} (nightly v2) by U_ALICE" in history and f"deployed {first} (nightly v1)" in history

    with capsys.disabled():  # the figures the closing note quotes
        print("\n--- the schedule's channel ---")
        for call in lines:
            labels = [b["text"]["text"] for b in _buttons(call)]
            print(f"{call.params['text']}  {labels}")
        print(f"--- the thread of {second} ---\n{thread[0]}")
        print("--- /endpoint prod ---\n" + history)
        print("--- the registry (SageMaker Model Package Group 'nightly') ---")
        for p in records:
            metrics = {k.split(":")[-1]: v for k, v in p["CustomerMetadataProperties"].items() if ":metric:" in k}
            print(f"v{p['ModelPackageVersion']} {p['CustomerMetadataProperties']['trainbot:lineage_id']} "
                  f"{p['ModelApprovalStatus']} {metrics} image={p['InferenceSpecification']['Containers'][0]['Image']}"
                  f" approval={p.get('ApprovalDescription', '-')!r}")


def _buttons(call: object) -> list[dict]:
    from handlers.blocks import buttons_in

    blocks = call.params.get("blocks") or []  # type: ignore[attr-defined]
    return buttons_in(json.loads(blocks) if isinstance(blocks, str) else blocks)

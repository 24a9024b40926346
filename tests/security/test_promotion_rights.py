"""Issue 34, item 2: owning an endpoint is not the right to serve another person's model in it, nor to change
that model's package approval.

Mallory owns endpoint `mal-ep` (her own model in it) and may not deploy Alice's job. Through signed Slack
requests into the real bot: `/deploy ALICE_JOB name=mal-ep` is refused in one sentence instead of offering a
Promote card, a forged Promote button value naming Alice's job is refused, and nothing is updated or approved.
An admin may promote Alice's model into Mallory's endpoint (Alice's package is then Approved by the admin);
Mallory's `/rollback mal-ep` then changes her endpoint but leaves Alice's package Approved, says so in the ack
and in the thread, and is audited. A schedule's line offering its run for another person's endpoint is refused
to that endpoint's owner the same way, while a schedule's own promotion into its owner's endpoint still
promotes and approves.

On SageMaker (moto; UpdateEndpoint, which moto lacks, is checked against botocore's service model with a
Stubber: tests/support/update_endpoint.py) the package is the remote one, and its ModelApprovalStatus is read
back from moto. On the local backend the endpoint is a real model server on loopback swapping real tiny BERTs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from handlers import cards
from jobs.backends.local.offline_assets import build_tiny_bert
from jobs.endpoints.revisions import RevisionStatus
from jobs.records import Actor
from jobs.registry.port import Approval
from tests.bot.promotion_rig import Bot, button, promotion_bot
from tests.security.bot_rig import RealBot, real_bot
from tests.support.endpoints import completed_lineage
from tests.support.moto_server import MotoAws, moto_aws, moto_server  # noqa: F401  (fixtures)
from tests.support.slack_bot import block_action

pytestmark = pytest.mark.timeout(600)

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
MALLORY = Actor("U_MALLORY", channel_id="C_ML", via="slack")
ADMINS = "TRAINBOT_ADMINS: U_ADMIN"
NIGHT = datetime(2026, 3, 2, 2, 0, tzinfo=timezone.utc)


def may_not_serve(lineage: str) -> str:
    return (f"Only the person who launched {lineage} (U_ALICE) or an admin ({ADMINS}) may deploy or promote it; "
            "ask one of them.")


def kept(lineage: str) -> str:
    return (f"{lineage}'s model package is not rejected: only the person who launched it (U_ALICE) or an admin "
            "changes its approval.")


def promote_value(job: str, endpoint: str) -> str:
    """A Promote button's value as the bot makes it (handlers/promotion.py), naming any job."""
    return json.dumps({"job": job, "endpoint": endpoint, "options": {}}, separators=(",", ":"))


# ---------------------------------------------------------------- SageMaker (moto)


@pytest.fixture
def bot(tmp_path: Path, moto_aws: MotoAws) -> Iterator[Bot]:  # noqa: F811
    with promotion_bot(tmp_path, moto_aws, trainbot_admins=("U_ADMIN",)) as running:
        yield running


def trained(bot: Bot, actor: Actor, f1: float) -> str:
    lineage = bot.runtime.jobs.launch("bert-squad", actor=actor)
    bot.runtime.jobs.attach_message(lineage.id, "C_ML", f"1700000002.{len(bot.runtime.store.list_lineages()):06d}")
    bot.finish_job(lineage.id, {"eval_f1": f1})
    bot.cycle()
    return lineage.id


def remote_approval(bot: Bot, lineage: str) -> dict:
    package = bot.runtime.registry.find(lineage)
    assert package is not None and package.arn, lineage
    return bot.aws.client("sagemaker").describe_model_package(ModelPackageName=package.arn)


def test_an_endpoint_owner_cannot_serve_another_persons_model_on_sagemaker(bot: Bot) -> None:
    alices, mallorys = trained(bot, ALICE, 84.5), trained(bot, MALLORY, 80.0)
    assert bot.command("/deploy", f"{mallorys} name=mal-ep", user="U_MALLORY")["text"].startswith("Deploying")
    bot.cycle()
    sagemaker = bot.aws.client("sagemaker")
    mallorys_config = sagemaker.describe_endpoint(EndpointName="mal-ep")["EndpointConfigName"]

    refused = bot.command("/deploy", f"{alices} name=mal-ep", user="U_MALLORY")
    assert refused["text"] == may_not_serve(alices) and button(refused, "Promote") is None, refused
    told = bot.press(cards.ACTION_PROMOTE, promote_value(alices, "mal-ep"), user="U_MALLORY", ephemeral=True)
    assert told == [may_not_serve(alices)], told
    bot.cycle()
    assert bot.updates.requests == []
    assert remote_approval(bot, alices)["ModelApprovalStatus"] == "PendingManualApproval"
    assert bot.runtime.endpoints.promotions.revisions.history("mal-ep")[0].lineage_id == mallorys
    assert sagemaker.describe_endpoint(EndpointName="mal-ep")["EndpointConfigName"] == mallorys_config


def test_an_endpoint_owners_rollback_leaves_another_persons_package_approved_on_sagemaker(bot: Bot) -> None:
    alices, mallorys = trained(bot, ALICE, 84.5), trained(bot, MALLORY, 80.0)
    bot.command("/deploy", f"{mallorys} name=mal-ep", user="U_MALLORY")
    bot.cycle()
    sagemaker = bot.aws.client("sagemaker")
    mallorys_config = sagemaker.describe_endpoint(EndpointName="mal-ep")["EndpointConfigName"]

    card = bot.command("/deploy", f"{alices} name=mal-ep", user="U_ADMIN")  # an admin may serve it anywhere
    promote = button(card, "Promote")
    assert promote is not None, card
    bot.press(cards.ACTION_PROMOTE, promote["value"], user="U_ADMIN", ephemeral=True)
    bot.cycle()
    assert sagemaker.describe_endpoint(EndpointName="mal-ep")["EndpointConfigName"] != mallorys_config
    approved = remote_approval(bot, alices)
    assert approved["ModelApprovalStatus"] == "Approved"
    assert approved["ApprovalDescription"].startswith("Approved by U_ADMIN: promoted into mal-ep")

    ack = bot.command("/rollback", "mal-ep", user="U_MALLORY")  # her endpoint: she may roll it back
    assert ack["text"] == (f"Rolling endpoint mal-ep back to {mallorys} (it serves {alices} now). "
                           f"{kept(alices)}"), ack
    bot.cycle()
    assert sagemaker.describe_endpoint(EndpointName="mal-ep")["EndpointConfigName"] == mallorys_config
    after = remote_approval(bot, alices)
    assert after["ModelApprovalStatus"] == "Approved", after
    assert after["ApprovalDescription"] == approved["ApprovalDescription"]
    assert bot.runtime.registry.find(alices).approval is Approval.APPROVED
    audit = [(e.action, e.user, e.target) for e in bot.runtime.store.audit_log()]
    assert ("registry.approval_kept", "U_MALLORY", alices) in audit
    assert not any(action == "registry.rejected" for action, _, _ in audit)
    [rolled] = [c.params["text"] for c in bot.slack.calls_to("chat.postMessage")
                if "was rolled back by U_MALLORY" in str(c.params.get("text"))]
    assert rolled.endswith(kept(alices)), rolled


def test_a_schedules_offer_for_another_persons_endpoint_is_refused_to_its_owner(bot: Bot) -> None:
    mallorys = trained(bot, MALLORY, 70.0)
    bot.command("/deploy", f"{mallorys} name=mal-ep", user="U_MALLORY")
    bot.cycle()
    # Schedule names are package groups on the worker's shared moto server: names of this module's own.
    added = bot.command("/schedule", 'add alices-line cron="0 2 * * *" endpoint=mal-ep bert-squad', user="U_ALICE")
    assert added["text"].startswith("Schedule alices-line added"), added
    run = bot.runtime.schedules.fire("alices-line", NIGHT)
    assert run.outcome == "launched", run
    bot.finish_job(run.lineage.id, {"eval_f1": 90.0})
    bot.cycle()
    offers = [button(line, "Promote") for line in bot.channel_lines() if "Schedule alices-line" in line.params["text"]]
    [offer] = [o for o in offers if o is not None]
    assert json.loads(offer["value"])["job"] == run.lineage.id

    told = bot.press(cards.ACTION_PROMOTE, offer["value"], user="U_MALLORY", ephemeral=True)
    assert told == [may_not_serve(run.lineage.id)], told
    bot.cycle()
    assert bot.updates.requests == []
    assert remote_approval(bot, run.lineage.id)["ModelApprovalStatus"] == "PendingManualApproval"


def test_a_schedules_own_promotion_still_promotes_and_approves(bot: Bot) -> None:
    """The scheduled path runs as the schedule's owner through the same checks: their own model, their own
    endpoint, so it is promoted without a click and its package approved."""
    bot.command("/schedule", 'add mallorys-line cron="0 2 * * *" deploy_if_better=yes endpoint=mal-ep bert-squad',
                user="U_MALLORY")
    runs = []
    for night, f1 in enumerate((80.0, 84.5)):
        run = bot.runtime.schedules.fire("mallorys-line", NIGHT + timedelta(days=night))
        bot.finish_job(run.lineage.id, {"eval_f1": f1})
        bot.cycle()
        runs.append(run.lineage.id)
        if night == 0:
            bot.command("/deploy", f"{run.lineage.id} name=mal-ep", user="U_MALLORY")
            bot.cycle()
    bot.cycle()
    assert len(bot.updates.requests) == 1
    approved = remote_approval(bot, runs[1])
    assert approved["ModelApprovalStatus"] == "Approved"
    assert approved["ApprovalDescription"].startswith("Approved by U_MALLORY: promoted into mal-ep")


# ---------------------------------------------------------------- the local backend


@pytest.fixture
def local_bot(tmp_path: Path) -> Iterator[RealBot]:
    with real_bot(tmp_path, trainbot_admins=("U_ADMIN",)) as rig:
        yield rig


def press(bot: RealBot, value: str, *, user: str, action: str = cards.ACTION_PROMOTE) -> list[str]:
    """A signed button press; what the presser was told (ephemeral posts and response_url posts)."""
    before = len(bot.slack.calls)
    status, _ = bot.bot.post(block_action(action, value, user=user, response_url=bot.slack.response_url("press")))
    assert status == 200
    bot.settle()
    told = [c for c in bot.slack.calls[before:] if c.method in ("chat.postEphemeral", "response")]
    return [str(c.params.get("text", "")) for c in told]


def follow(bot: RealBot, endpoint: str, done: str, *, timeout: float = 240) -> None:
    """Watch cycles of the endpoints (and the outbox) until the endpoint's newest revision is ``done``."""
    promotions = bot.runtime.endpoints.promotions
    deadline = time.monotonic() + timeout
    while True:
        bot.runtime.endpoints.poll_once()
        bot.deliver()
        newest = promotions.revisions.history(endpoint, limit=1)[0]
        if newest.status.value == done:
            return
        assert newest.status is not RevisionStatus.FAILED, newest.failure_reason
        assert time.monotonic() < deadline, f"{endpoint} is still {newest.status.value}"
        time.sleep(0.1)


def test_an_endpoint_owner_cannot_serve_or_approve_another_persons_model_locally(local_bot: RealBot,
                                                                                  tmp_path: Path) -> None:
    bot, store = local_bot, local_bot.runtime.store
    for lineage, actor, seed in (("alice-qa", ALICE, 1), ("mallory-qa", MALLORY, 2)):
        model = build_tiny_bert(tmp_path / "models" / lineage, seed=seed)
        completed_lineage(store, lineage, backend="local", model_artifacts=str(model), actor=actor)
    assert bot.command("/deploy", "mallory-qa name=mal-ep", user="U_MALLORY")["text"].startswith("Deploying")
    bot.settle()
    follow(bot, "mal-ep", "serving")
    registry = bot.runtime.registry
    try:
        refused = bot.command("/deploy", "alice-qa name=mal-ep", user="U_MALLORY")
        assert refused["text"] == may_not_serve("alice-qa") and "blocks" not in refused, refused
        assert press(bot, promote_value("alice-qa", "mal-ep"), user="U_MALLORY") == [may_not_serve("alice-qa")]
        [serving] = bot.runtime.endpoints.promotions.revisions.history("mal-ep")
        assert serving.lineage_id == "mallory-qa"
        package = registry.find("alice-qa")
        assert package is None or package.approval is Approval.PENDING

        bot.command("/deploy", "alice-qa name=mal-ep", user="U_ADMIN")
        press(bot, promote_value("alice-qa", "mal-ep"), user="U_ADMIN")
        follow(bot, "mal-ep", "serving")
        assert bot.runtime.endpoints.get("mal-ep").lineage_id == "alice-qa"
        approved = registry.find("alice-qa")
        assert approved is not None and (approved.approval, approved.approval_by) == (Approval.APPROVED, "U_ADMIN")

        ack = bot.command("/rollback", "mal-ep", user="U_MALLORY")
        assert ack["text"].endswith(kept("alice-qa")), ack
        bot.settle()
        follow(bot, "mal-ep", "serving")
        assert bot.runtime.endpoints.get("mal-ep").lineage_id == "mallory-qa"
        after = registry.find("alice-qa")
        assert after is not None and (after.approval, after.approval_by) == (Approval.APPROVED, "U_ADMIN")
    finally:
        bot.runtime.endpoints.undeploy("mal-ep", actor=Actor("U_ADMIN", channel_id="C_ML", via="slack"))

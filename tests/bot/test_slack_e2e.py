"""The whole path, over real surfaces: `/train bert-squad spot=yes` signed over HTTP -> plan card -> Launch ->
CreateTrainingJob on moto -> status changes made in moto -> watcher cycles -> thread replies and card
updates on the fake Slack -> the final report with the loss-curve PNG uploaded (files_upload_v2)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import update

from bot.serve import SlackParts
from bot.wiring import Runtime, build_runtime
from handlers import cards
from handlers.blocks import buttons_in
from handlers.notify import deliver_due
from jobs.planning.plan import checkpoint_uri
from jobs.settings import Settings
from jobs.store.schema import outbox
from tests.support.moto_server import (  # noqa: F401  (fixtures)
    BUCKET,
    ROLE_ARN,
    CallRecorder,
    MotoAws,
    ago,
    moto_aws,
    moto_server,
    sagemaker_backend,
    set_training_job_state,
    set_training_job_times,
    training_job,
)
from tests.support.slack_api import BOT_TOKEN, SlackApiServer
from tests.support.slack_bot import (
    BackgroundWork,
    HttpBot,
    block_action,
    served_runtime,
    slash_command,
)

SECRET = "e2e-signing-secret"


@dataclass
class E2E:
    slack: SlackApiServer
    runtime: Runtime
    parts: SlackParts
    bot: HttpBot
    work: BackgroundWork
    creates: CallRecorder
    aws: MotoAws

    def cycle(self) -> int:
        """One watcher cycle and the steps after each ending, then the outbox delivered to the fake Slack."""
        self.runtime.watcher.poll_once()
        self.runtime.endings.process_due()
        return deliver_due(self.parts.services, self.parts.chat)


@pytest.fixture
def e2e(tmp_path: Path, moto_aws: MotoAws) -> Iterator[E2E]:  # noqa: F811
    slack = SlackApiServer().start()
    settings = Settings(
        slack_bot_token=BOT_TOKEN, slack_signing_secret=SECRET, slack_api_url=slack.base_url,
        trainbot_home=tmp_path, trainbot_role_arn=ROLE_ARN, trainbot_bucket=BUCKET, trainbot_backend="sagemaker",
        trainbot_relaunch_backoff_seconds=0, trainbot_allowed_users=("U_ALICE",),
    )
    creates = CallRecorder("CreateTrainingJob")
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[creates]))
    runtime = build_runtime(settings, backend=backend)
    try:
        with served_runtime(runtime, secret=SECRET) as (parts, bot, work):
            yield E2E(slack, runtime, parts, bot, work, creates, moto_aws)
    finally:
        slack.stop()


def put_loss_curve(aws: MotoAws, job_name: str) -> None:
    cloudwatch = aws.client("cloudwatch")
    start = datetime.now(timezone.utc) - timedelta(minutes=20)
    cloudwatch.put_metric_data(Namespace="/aws/sagemaker/TrainingJobs", MetricData=[
        {"MetricName": "loss", "Dimensions": [{"Name": "TrainingJobName", "Value": job_name}],
         "Timestamp": start + timedelta(minutes=minute), "Value": 3.0 / (1 + minute)}
        for minute in range(0, 20, 2)
    ])


def launch_from_slack(e2e: E2E, text: str) -> str:
    status, body = e2e.bot.post(slash_command("/train", text, response_url=e2e.slack.response_url()))
    card = json.loads(body)
    assert status == 200 and card["response_type"] == "ephemeral"
    value = next(b["value"] for b in buttons_in(card["blocks"]) if b["action_id"] == cards.ACTION_LAUNCH)
    status, _ = e2e.bot.post(block_action(cards.ACTION_LAUNCH, value, response_url=e2e.slack.response_url()))
    assert status == 200
    e2e.work.settle()
    lineage = e2e.runtime.store.list_lineages()[0]
    assert lineage.message_ts is not None
    return lineage.id


def thread(e2e: E2E, ts: str) -> list[str]:
    return [c.params["text"] for c in e2e.slack.calls_to("chat.postMessage") if c.params.get("thread_ts") == ts]


def test_train_to_final_report(e2e: E2E) -> None:
    lineage_id = launch_from_slack(e2e, "bert-squad spot=yes")
    job = f"{lineage_id}-1"
    sent = e2e.creates.by_name(job)
    assert sent["EnableManagedSpotTraining"] is True
    assert sent["CheckpointConfig"]["S3Uri"] == checkpoint_uri(BUCKET, lineage_id)
    card_ts = e2e.runtime.store.get_lineage(lineage_id).message_ts
    assert card_ts is not None

    set_training_job_state(job, "InProgress", "Training")
    e2e.cycle()
    set_training_job_state(job, "InProgress", "Interrupted")
    e2e.cycle()
    set_training_job_times(job, started=ago(25 * 60))  # so the curve lies within the job's run
    put_loss_curve(e2e.aws, job)
    set_training_job_state(job, "Completed", "Completed", billable_seconds=300, training_seconds=1000,
                           final_metrics={"eval_f1": 88.5, "eval_exact_match": 81.2},
                           model_artifacts=f"s3://{BUCKET}/{job}/output/model.tar.gz")
    e2e.cycle()

    replies = thread(e2e, card_ts)
    assert any("Training" in text for text in replies)
    assert any("reclaimed" in text for text in replies)
    assert any("completed" in text and "70%" in text for text in replies), replies
    report = [c for c in e2e.slack.calls_to("chat.postMessage") if "Final report" in json.dumps(c.params)]
    assert len(report) == 1 and "88.5" in json.dumps(report[0].params["blocks"])
    updates = [c for c in e2e.slack.calls_to("chat.update") if c.params["ts"] == card_ts]
    assert len(updates) >= 4
    last = updates[-1].params
    assert "completed" in last["text"]
    assert [b["text"]["text"] for b in buttons_in(last["blocks"])] == ["Deploy"]
    uploaded, = e2e.slack.calls_to("upload")
    assert uploaded.params["data"].startswith(b"\x89PNG")
    completed, = e2e.slack.calls_to("files.completeUploadExternal")
    assert completed.params["channel_id"] == "C_ML" and completed.params["thread_ts"] == card_ts
    assert e2e.cycle() == 0  # nothing twice


def test_user_code_failure_reaches_the_thread_and_the_launcher(e2e: E2E) -> None:
    lineage_id = launch_from_slack(e2e, "distilbert-spot")
    job = f"{lineage_id}-1"
    set_training_job_state(job, "Failed", "Failed", failure_reason="AlgorithmError: ExecuteUserScriptError")
    e2e.cycle()
    card_ts = e2e.runtime.store.get_lineage(lineage_id).message_ts
    assert card_ts is not None
    assert any("AlgorithmError" in text for text in thread(e2e, card_ts))
    opened, = e2e.slack.calls_to("conversations.open")
    assert opened.params["users"] == "U_ALICE"
    dm = [c for c in e2e.slack.calls_to("chat.postMessage") if c.params["channel"] == "DU_ALICE"]
    assert len(dm) == 1 and lineage_id in dm[0].params["text"]
    assert training_job(job).training_job_status == "Failed"


def test_a_slack_outage_delays_notifications_and_never_drops_them(e2e: E2E) -> None:
    lineage_id = launch_from_slack(e2e, "distilbert-spot")
    set_training_job_state(f"{lineage_id}-1", "InProgress", "Training")
    e2e.slack.set_down(True)
    assert e2e.cycle() == 0
    assert e2e.runtime.store.outbox.due_notifications() == []  # deferred, with a backoff
    e2e.slack.set_down(False)
    with e2e.runtime.store.engine.begin() as conn:  # jump over the backoff rather than sleep through it
        conn.execute(update(outbox).values(next_try_at=datetime(2000, 1, 1, tzinfo=timezone.utc)))
    assert e2e.cycle() >= 1
    card_ts = e2e.runtime.store.get_lineage(lineage_id).message_ts
    assert card_ts is not None and any("Training" in text for text in thread(e2e, card_ts))

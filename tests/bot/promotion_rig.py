"""The whole bot for the promotion scenarios: the real Bolt app over signed HTTP against the loopback Slack
Web API, the runtime built as `trainbot serve` builds it on the SageMaker backend, on moto. UpdateEndpoint,
which moto lacks, goes through tests/support/update_endpoint.py (checked against botocore's service model
with a Stubber, then carried out on moto's endpoint)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.serve import SlackParts
from bot.wiring import Runtime, build_runtime
from handlers.blocks import buttons_in
from handlers.notify import deliver_due
from jobs.settings import Settings
from tests.support.moto_server import BUCKET, ROLE_ARN, MotoAws, sagemaker_backend, set_training_job_state
from tests.support.slack_api import BOT_TOKEN, ApiCall, SlackApiServer
from tests.support.slack_bot import (
    BackgroundWork,
    HttpBot,
    block_action,
    served_runtime,
    slash_command,
)
from tests.support.update_endpoint import UpdateEndpointStub

SECRET = "promotion-signing-secret"
CHANNEL = "C_ML"


@dataclass
class Bot:
    slack: SlackApiServer
    runtime: Runtime
    parts: SlackParts
    http: HttpBot
    work: BackgroundWork
    aws: MotoAws
    updates: UpdateEndpointStub

    def cycle(self) -> str:
        """One watch cycle (jobs, the steps after completion, endpoints), then the outbox to Slack."""
        summary = self.runtime.watch_cycle()
        self.work.settle(timeout=120)
        deliver_due(self.parts.services, self.parts.chat)
        return summary

    def command(self, command: str, text: str, *, user: str = "U_ALICE") -> dict[str, Any]:
        status, body = self.http.post(slash_command(command, text, user=user, channel=CHANNEL,
                                                    response_url=self.slack.response_url()))
        assert status == 200, body
        self.work.settle(timeout=120)
        return json.loads(body) if body else {}

    def press(self, action_id: str, value: str, *, user: str, ephemeral: bool = False) -> list[str]:
        """Press a button as `user`; what that user was told (ephemeral messages and response_url posts)."""
        before = len(self.slack.calls)
        status, _ = self.http.post(block_action(action_id, value, user=user, channel=CHANNEL,
                                                response_url=self.slack.response_url(), ephemeral=ephemeral))
        assert status == 200
        self.work.settle(timeout=120)
        told = [c for c in self.slack.calls[before:] if c.method in ("chat.postEphemeral", "response")]
        return [str(c.params.get("text", "")) for c in told if c.params.get("user", user) == user]

    def finish_job(self, lineage_id: str, metrics: dict[str, float]) -> None:
        job = f"{lineage_id}-1"
        set_training_job_state(job, "Completed", final_metrics=metrics,
                               model_artifacts=f"s3://{BUCKET}/trainbot/{lineage_id}/output/{job}/output/model.tar.gz")

    def channel_lines(self) -> list[ApiCall]:
        """Top-level posts in the channel that are not job cards: the schedule's lines."""
        return [c for c in self.slack.calls_to("chat.postMessage")
                if c.params.get("channel") == CHANNEL and not c.params.get("thread_ts")
                and str(c.params.get("text", "")).startswith(":")]


def button(call: ApiCall | dict[str, Any], label: str) -> dict[str, Any] | None:
    params = call.params if isinstance(call, ApiCall) else call
    blocks = params.get("blocks") or []
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    return next((b for b in buttons_in(blocks) if b["text"]["text"] == label), None)


@contextmanager
def promotion_bot(tmp_path: Path, aws: MotoAws, **settings: Any) -> Iterator[Bot]:
    slack = SlackApiServer().start()
    config = Settings(
        slack_bot_token=BOT_TOKEN, slack_signing_secret=SECRET, slack_api_url=slack.base_url,
        trainbot_home=tmp_path, trainbot_role_arn=ROLE_ARN, trainbot_bucket=BUCKET, trainbot_backend="sagemaker",
        aws_region=aws.region, **settings,
    )
    updates = UpdateEndpointStub()
    runtime = build_runtime(config, backend=sagemaker_backend(aws), aws_session=updates.attach(aws.boto_session()))
    try:
        with served_runtime(runtime, secret=SECRET) as (parts, http, work):
            yield Bot(slack, runtime, parts, http, work, aws, updates)
    finally:
        slack.stop()

"""Issue 34, item 6: a job's log and failure lines reach its launcher, its channel or an admin, nobody else, and
`/logs` can neither flood its launcher's thread nor hold the launcher's messages back.

The real bot (`serve --http` on the local backend) against the loopback Slack API; Alice's job, launched by
signed requests in her channel, prints secrets into its log and fails with one in its error line. Bob, an
allowed user in another channel: his `/logs`, the Logs button and `/job` are answered with one sentence and
none of the lines, and his channel's `/notify on failed` gets the line without the failure reason. Carol in
Alice's channel, Alice and an admin elsewhere read the log. `/logs` is limited per person
(TRAINBOT_MAX_LOGS_PER_MINUTE, counted in the store) and its uploads go at the chat governor's CHANGE
priority, below a job's ending: tests/jobs/test_rate_limits.py shows that calls of that priority, however
many, leave the ending its slot.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.web import SlackResponse

from bot.slack_governor import SlackGovernor
from handlers import cards
from handlers.blocks import buttons_in
from handlers.logs import LOGS_BURST
from jobs.clock import SystemClock
from jobs.lineage import Lineage, LineageStatus
from jobs.rate_limits import MemoryLedger, Priority, current_priority
from tests.security.bot_rig import RealBot, real_bot
from tests.support.slack_bot import block_action, slash_command

pytestmark = pytest.mark.timeout(400)

SCRIPT = """
import sys
for i in range(400):
    print(f"[trainbot-test] line {i} SECRET-LOG-LINE api_key=sk-{i:04d} " + "x" * 60)
print("RuntimeError: SECRET-FAILURE-LINE token=sk-9999")
sys.exit(1)
"""
SECRETS = ("SECRET-LOG-LINE", "SECRET-FAILURE-LINE")


@pytest.fixture
def bot(tmp_path: Path) -> Iterator[RealBot]:
    with real_bot(tmp_path, job_script=SCRIPT, trainbot_local_data_dirs=(tmp_path,),
                  trainbot_admins=("U_ADMIN",)) as rig:
        yield rig


@pytest.fixture
def slow_logs_bot(tmp_path: Path) -> Iterator[RealBot]:
    """One /logs every two minutes a person (two at once): a flood of a test's length gets two."""
    with real_bot(tmp_path, job_script=SCRIPT, trainbot_local_data_dirs=(tmp_path,),
                  trainbot_max_logs_per_minute=0.5) as rig:
        yield rig


def post(bot: RealBot, fields: dict[str, Any]) -> str:
    status, body = bot.bot.post(fields)
    assert status == 200, body
    return body


def failed_job(bot: RealBot) -> Lineage:
    """Alice's job, launched from her channel C_ALICE with /train and Launch, ended failed with its report."""
    ack = json.loads(post(bot, slash_command("/train", "distilbert-spot", channel="C_ALICE")))
    launch = next(b["value"] for b in buttons_in(ack["blocks"]) if b["action_id"] == cards.ACTION_LAUNCH)
    post(bot, block_action(cards.ACTION_LAUNCH, launch, channel="C_ALICE", response_url=bot.slack.response_url()))
    bot.settle()
    lineage = bot.runtime.jobs.list()[0]
    ended = bot.watch_until(lineage.id, lambda lin: lin.status is LineageStatus.FAILED)
    assert "SECRET-FAILURE-LINE" in (ended.latest_attempt.failure_reason if ended.latest_attempt else "")
    for _ in range(3):  # the thread's report, then the routed lines
        bot.deliver()
    return ended


def sent_since(bot: RealBot, mark: int) -> str:
    return json.dumps([c.params for c in bot.slack.calls[mark:]], default=str)


def reads_the_log(bot: RealBot, lineage: Lineage, *, user: str, channel: str) -> bool:
    """``user`` asks for the log from ``channel``; whether its lines reached Slack (an ephemeral or a file)."""
    mark = len(bot.slack.calls)
    post(bot, slash_command("/logs", f"{lineage.id} 400", user=user, channel=channel))
    bot.settle()
    return "SECRET-LOG-LINE" in sent_since(bot, mark)


def test_a_channel_subscribed_by_someone_else_gets_the_failure_without_its_reason(bot: RealBot) -> None:
    post(bot, slash_command("/notify", "on failed", user="U_BOB", channel="C_BOB"))
    post(bot, slash_command("/notify", "on failed", user="U_ALICE", channel="C_ALERTS"))  # her own alerts
    lineage = failed_job(bot)
    [routed] = [c for c in bot.slack.calls_to("chat.postMessage") if c.params.get("channel") == "C_BOB"]
    assert not any(s in routed.params["text"] for s in SECRETS), routed.params["text"]
    assert f"{lineage.id}* failed: the reason is in its thread" in routed.params["text"]
    [alerts] = [c for c in bot.slack.calls_to("chat.postMessage") if c.params.get("channel") == "C_ALERTS"]
    assert "SECRET-FAILURE-LINE" in alerts.params["text"]


def test_only_the_launcher_the_jobs_channel_and_admins_read_its_log_and_failure(bot: RealBot) -> None:
    lineage = failed_job(bot)
    refusal = (f"The log and failure lines of {lineage.id} are shown only to the person who launched it (U_ALICE), "
               "anyone in its channel (C_ALICE) or an admin (TRAINBOT_ADMINS: U_ADMIN); ask one of them.")
    mark = len(bot.slack.calls)
    acks = [post(bot, slash_command("/logs", f"{lineage.id} 400", user="U_BOB", channel="C_BOB")),
            post(bot, slash_command("/job", lineage.id, user="U_BOB", channel="C_BOB"))]
    post(bot, block_action(cards.ACTION_LOGS, lineage.id, user="U_BOB", channel="C_BOB", ephemeral=False,
                           response_url=bot.slack.response_url("bob")))
    bot.settle()
    bot.deliver()
    leaked = [s for s in SECRETS if s in sent_since(bot, mark) or any(s in ack for ack in acks)]
    assert leaked == [], leaked
    assert json.loads(acks[0])["text"] == refusal
    job = json.loads(acks[1])
    assert lineage.id in job["text"] and refusal in json.dumps(job["blocks"])
    told = [c.params.get("text") for c in bot.slack.calls[mark:] if c.method in ("response", "chat.postEphemeral")]
    assert refusal in told, told
    refused = [e for e in bot.runtime.store.audit_log() if e.user == "U_BOB" and e.action.endswith(".refused")]
    assert len(refused) == 2  # /logs and the Logs button

    assert reads_the_log(bot, lineage, user="U_ALICE", channel="C_ALICE")
    assert reads_the_log(bot, lineage, user="U_CAROL", channel="C_ALICE")  # in the job's own channel
    assert reads_the_log(bot, lineage, user="U_ADMIN", channel="C_OPS")
    assert "SECRET-FAILURE-LINE" in post(bot, slash_command("/job", lineage.id, user="U_CAROL", channel="C_ALICE"))


class RecordingGovernor(SlackGovernor):
    """The real governor (unpaced, as the rig's), noting the priority each Web API call was made at."""

    def __init__(self) -> None:
        super().__init__(MemoryLedger(), SystemClock(), tiers={}, channel_pace=None)
        self.priorities: list[tuple[str, Priority]] = []

    def call(self, method: str, channel: str | None, send: Callable[[], SlackResponse]) -> SlackResponse:
        self.priorities.append((method, current_priority()))
        return super().call(method, channel, send)


def test_logs_are_limited_per_person_and_yield_to_the_launchers_messages(slow_logs_bot: RealBot) -> None:
    bot = slow_logs_bot
    lineage = failed_job(bot)
    governor = RecordingGovernor()
    bot.parts.client.governor = governor
    uploads_before = len(bot.slack.calls_to("files.completeUploadExternal"))
    started = time.monotonic()
    acks = [json.loads(post(bot, slash_command("/logs", f"{lineage.id} 400", channel="C_ALICE")))["text"]
            for _ in range(12)]
    elapsed = time.monotonic() - started
    bot.settle()
    allowed = LOGS_BURST + int(elapsed // 120)  # one more per two minutes the flood took
    fetching = [text for text in acks if text.startswith("Reading the last")]
    assert 1 <= len(fetching) <= allowed, acks
    limited = [text for text in acks if "TRAINBOT_MAX_LOGS_PER_MINUTE" in text]
    assert len(limited) == len(acks) - len(fetching)
    assert limited[0].startswith("You asked for logs more than 0.5 times a minute")
    uploads = bot.slack.calls_to("files.completeUploadExternal")[uploads_before:]
    assert len(uploads) == len(fetching)  # each one a file in the job's thread: the log is longer than a message
    assert all(u.params.get("thread_ts") == lineage.message_ts for u in uploads), [u.params for u in uploads]
    made = [(method, priority) for method, priority in governor.priorities if method.startswith("files.")]
    assert made and all(priority > Priority.ENDING for _, priority in made), made

"""The App Home, routed notifications, DMs and /logs from Slack: signed requests and events into the real Bolt
app over HTTP, the real watcher and outbox, and the loopback Slack Web API recording what went out
(views.publish, chat.postMessage, chat.getPermalink, conversations.open, the files_upload_v2 calls).
/logs reads the job's CloudWatch streams from moto."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bot.slack_app import create_app
from bot.slack_chat import SlackChat
from bot.wiring import build_endings, build_watcher
from handlers import cards
from handlers.blocks import buttons_in
from handlers.context import Services
from handlers.home import HomeRefresher
from handlers.notify import deliver_due
from jobs.endings.stage import EndingStage
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
from jobs.lineage import Lineage
from jobs.records import Actor, RemoteStatus
from jobs.settings import Settings
from jobs.store.store import Store
from tests.handlers.fakes import World, make_world
from tests.support.moto_server import MotoAws, moto_aws, moto_server, sagemaker_backend  # noqa: F401
from tests.support.slack_api import BOT_TOKEN, SlackApiServer
from tests.support.slack_bot import (
    BackgroundWork,
    HttpBot,
    block_action,
    home_action,
    home_opened,
    slash_command,
    unpaced_web_client,
)

SECRET = "test-signing-secret"
ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
BOB = Actor("U_BOB", channel_id="C_ML", via="slack")


@dataclass
class Rig:
    slack: SlackApiServer
    services: Services
    store: Store
    chat: SlackChat
    bot: HttpBot
    work: BackgroundWork
    home: HomeRefresher
    world: World | None = None
    watcher: Watcher | None = None
    endings: EndingStage | None = None

    def settle(self) -> None:
        self.work.settle()

    def deliver(self, rounds: int = 3) -> None:
        for _ in range(rounds):
            deliver_due(self.services, self.chat)

    def posts_to(self, channel: str) -> list[dict]:
        return [c.params for c in self.slack.calls_to("chat.postMessage") if c.params["channel"] == channel]


@contextlib.contextmanager
def running_bot(services: Services, settings: Settings, slack: SlackApiServer, work: BackgroundWork
                ) -> Iterator[tuple[SlackChat, HttpBot, HomeRefresher]]:
    client = unpaced_web_client(settings)
    chat = SlackChat(client)
    home = HomeRefresher(services, chat, min_interval=0.0)
    app = create_app(settings, services, client=client, chat=chat, http=True, home=home)
    bot = HttpBot(app, secret=SECRET).start()
    try:
        yield chat, bot, home
    finally:
        bot.stop()


@contextlib.contextmanager
def scripted_rig(tmp_path: Path, **settings: object) -> Iterator[Rig]:
    """The bot on the scripted backend peer, with the real watcher."""
    slack = SlackApiServer().start()
    work = BackgroundWork()
    world = make_world(tmp_path, run_later=work, slack_bot_token=BOT_TOKEN, slack_signing_secret=SECRET,
                       slack_api_url=slack.base_url, trainbot_admins=("U_ADMIN",), **settings)
    watcher = build_watcher(world.store, world.backend, world.clock, world.settings)
    endings = build_endings(world.store, world.backend, world.clock, world.settings)
    try:
        with running_bot(world.services, world.settings, slack, work) as (chat, bot, home):
            yield Rig(slack, world.services, world.store, chat, bot, work, home, world, watcher, endings)
    finally:
        work.shutdown()
        slack.stop()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with scripted_rig(tmp_path) as made:
        yield made


def launch_from_slack(rig: Rig, text: str, user: str = "U_ALICE") -> Lineage:
    status, body = rig.bot.post(slash_command("/train", text, user=user, response_url=rig.slack.response_url()))
    assert status == 200
    value = next(b["value"] for b in buttons_in(json.loads(body)["blocks"]) if b["action_id"] == cards.ACTION_LAUNCH)
    rig.bot.post(block_action(cards.ACTION_LAUNCH, value, user=user, response_url=rig.slack.response_url()))
    rig.slack.wait_calls("chat.update")
    rig.settle()
    assert rig.world is not None
    return next(ln for ln in rig.world.jobs.list() if ln.launched_by == user)


def cycle(rig: Rig) -> None:
    assert rig.world is not None and rig.watcher is not None
    rig.world.clock.advance(5)
    rig.watcher.poll_once()
    if rig.endings is not None:
        rig.endings.process_due()


# ---------------------------------------------------------------- the App Home


def test_opening_the_home_tab_publishes_the_persons_jobs_and_nobody_elses(rig: Rig) -> None:
    assert rig.world is not None
    alices = rig.world.jobs.launch("distilbert-spot", actor=ALICE)
    bobs = rig.world.jobs.launch("bert-squad", actor=BOB)
    status, _ = rig.bot.post_event(home_opened("U_ALICE"))
    assert status == 200
    published, = rig.slack.wait_calls("views.publish")
    view = published.params["view"]
    assert published.params["user_id"] == "U_ALICE" and view["type"] == "home"
    shown = json.dumps(view["blocks"])
    assert alices.id in shown and bobs.id not in shown
    assert "Your running jobs" in shown and "Team spend" in shown and "Live endpoints" in shown
    rig.bot.post_event(home_opened("U_ALICE", tab="messages"))
    rig.settle()
    assert len(rig.slack.calls_to("views.publish")) == 1  # the Messages tab is not the home


def test_the_home_is_republished_when_one_of_the_persons_jobs_changes_state(rig: Rig) -> None:
    assert rig.world is not None
    alices = rig.world.jobs.launch("distilbert-spot", actor=ALICE)
    bobs = rig.world.jobs.launch("bert-squad", actor=BOB)
    cycle(rig)  # both are seen training
    rig.bot.post_event(home_opened("U_ALICE"))
    rig.slack.wait_calls("views.publish")
    rig.settle()
    rig.world.backend.set_remote(f"{bobs.id}-1", RemoteStatus.FAILED, failure_reason="AlgorithmError: x")
    cycle(rig)
    assert rig.home.tick() == []  # Bob's job changed; Alice's page stays as it is
    rig.world.backend.set_remote(f"{alices.id}-1", RemoteStatus.FAILED, failure_reason="AlgorithmError: boom")
    cycle(rig)
    assert rig.home.tick() == ["U_ALICE"]
    latest = rig.slack.published_views("U_ALICE")[-1]
    assert "failed" in json.dumps(latest["blocks"]) and bobs.id not in json.dumps(latest["blocks"])
    assert rig.home.tick() == []  # published once per change


def test_a_stop_pressed_on_the_home_tab_is_answered_by_dm(rig: Rig) -> None:
    assert rig.world is not None
    lineage = rig.world.jobs.launch("distilbert-spot", actor=ALICE)
    status, _ = rig.bot.post(home_action(cards.ACTION_STOP, lineage.id))
    assert status == 200
    rig.slack.wait_calls("views.publish")
    rig.settle()
    opened, = rig.slack.calls_to("conversations.open")
    answer, = rig.posts_to("DU_ALICE")
    assert opened.params["users"] == "U_ALICE" and f"Stopping {lineage.id}" in answer["text"]
    assert rig.world.backend.stopped == [f"{lineage.id}-1"]


def test_the_home_honours_the_allowed_users_and_is_no_channel(tmp_path: Path) -> None:
    with scripted_rig(tmp_path, trainbot_allowed_users=("U_ALICE",), trainbot_allowed_channels=("C_ML",)) as rig:
        assert rig.world is not None
        lineage = rig.world.jobs.launch("distilbert-spot", actor=ALICE)
        rig.bot.post_event(home_opened("U_BOB"))
        refused, = rig.slack.wait_calls("views.publish")
        assert "not allowed to use trainbot" in json.dumps(refused.params["view"]["blocks"])
        assert lineage.id not in json.dumps(refused.params["view"]["blocks"])
        # The home tab is not a channel: TRAINBOT_ALLOWED_CHANNELS does not stop Alice's Stop there.
        rig.bot.post(home_action(cards.ACTION_STOP, lineage.id))
        rig.slack.wait_calls("views.publish", 2)
        rig.settle()
        assert f"Stopping {lineage.id}" in rig.posts_to("DU_ALICE")[0]["text"]
        assert rig.world.backend.stopped == [f"{lineage.id}-1"]
        rig.bot.post(home_action(cards.ACTION_STOP, lineage.id, user="U_BOB"))
        rig.slack.wait_calls("views.publish", 3)
        rig.settle()
        assert "not allowed" in rig.posts_to("DU_BOB")[0]["text"]


# ---------------------------------------------------------------- /notify and DMs


def test_a_subscribed_channel_gets_its_events_and_the_launcher_a_dm(rig: Rig) -> None:
    status, body = rig.bot.post(slash_command("/notify", "on completed failed", channel="C_ALERTS"))
    answer = json.loads(body)
    assert status == 200 and answer["response_type"] == "in_channel"
    assert answer["text"] == "This channel now gets completed, failed for every job."
    lineage = launch_from_slack(rig, "distilbert-spot notify=dm")
    assert lineage.spec.notify == "dm"
    cycle(rig)  # the backend has it: the first state line (launched, which C_ALERTS did not ask for)
    rig.deliver()
    assert rig.posts_to("C_ALERTS") == []
    assert rig.world is not None
    rig.world.backend.set_remote(f"{lineage.id}-1", RemoteStatus.COMPLETED, billable_seconds=600,
                                 training_seconds=2000, final_metrics={"eval_accuracy": 0.91})
    cycle(rig)
    rig.deliver()
    routed, = rig.posts_to("C_ALERTS")
    card = rig.world.jobs.get(lineage.id).message_ts
    permalink = f"https://test.slack.com/archives/C_ML/p{str(card).replace('.', '')}"
    assert routed["text"].startswith(f":white_check_mark: *{lineage.id}* completed: accuracy 0.91, cost $0.19")
    assert routed["text"].endswith(f"(<@U_ALICE>). <{permalink}|Thread>") and "thread_ts" not in routed
    assert rig.slack.calls_to("chat.getPermalink")[0].params["message_ts"] == card
    dm, = rig.posts_to("DU_ALICE")
    assert rig.slack.calls_to("conversations.open")[0].params["users"] == "U_ALICE"
    assert dm["text"].startswith(f"Your job *{lineage.id}* completed: accuracy 0.91. Cost $0.19, spot savings 70%.")
    assert permalink in dm["text"]
    rig.deliver()
    assert len(rig.posts_to("C_ALERTS")) == 1 and len(rig.posts_to("DU_ALICE")) == 1  # exactly once


def test_dm_off_silences_even_a_failure(rig: Rig) -> None:
    status, body = rig.bot.post(slash_command("/notify", "dm off", user="U_BOB"))
    assert status == 200 and "No more DMs" in json.loads(body)["text"]
    lineage = launch_from_slack(rig, "distilbert-spot", user="U_BOB")
    assert rig.world is not None
    rig.world.backend.set_remote(f"{lineage.id}-1", RemoteStatus.FAILED, failure_reason="AlgorithmError: boom")
    cycle(rig)
    rig.deliver()
    assert rig.slack.calls_to("conversations.open") == [] and "failed" in rig.posts_to("C_ML")[-1]["text"]


def test_a_failed_jobs_report_has_its_last_10_lines_and_its_card_a_logs_button(rig: Rig) -> None:
    lineage = launch_from_slack(rig, "distilbert-spot")
    assert rig.world is not None
    rig.world.backend.set_logs(f"{lineage.id}-1", [f"log line {i}" for i in range(1, 61)])
    rig.world.backend.set_remote(f"{lineage.id}-1", RemoteStatus.FAILED, failure_reason="AlgorithmError: boom")
    cycle(rig)
    rig.deliver()
    card = rig.world.jobs.get(lineage.id).message_ts
    report = next(p for p in rig.posts_to("C_ML") if p.get("thread_ts") == card and "AlgorithmError" in p["text"])
    shown = json.dumps(report["blocks"])
    assert "log line 51" in shown and "log line 60" in shown and "log line 50" not in shown
    redrawn = rig.slack.calls_to("chat.update")[-1].params
    logs, = [b for b in buttons_in(redrawn["blocks"]) if b["action_id"] == cards.ACTION_LOGS]
    status, _ = rig.bot.post(block_action(cards.ACTION_LOGS, logs["value"], ephemeral=False, message_ts=str(card)))
    assert status == 200
    rig.slack.wait_calls("chat.postEphemeral", 2)  # "Reading ...", then the lines
    rig.settle()
    reading, told = sorted((c.params for c in rig.slack.calls_to("chat.postEphemeral")), key=lambda p: "blocks" in p)
    assert reading["text"] == f"Reading the last 40 lines of {lineage.id}-1's log…"
    assert told["user"] == "U_ALICE" and "log line 21" in json.dumps(told["blocks"])


# ---------------------------------------------------------------- /logs on CloudWatch (moto)


LOG_GROUP = "/aws/sagemaker/TrainingJobs"


def put_logs(aws: MotoAws, job: str, host: int, lines: list[str]) -> None:
    logs = aws.client("logs")
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=LOG_GROUP)
    stream = f"{job}/algo-{host}-1700000000"
    logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
    start = int(datetime.now(timezone.utc).timestamp() * 1000)
    logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream,
                        logEvents=[{"timestamp": start + i, "message": line} for i, line in enumerate(lines)])


@pytest.fixture
def moto_rig(moto_aws: MotoAws, tmp_path: Path) -> Iterator[Rig]:  # noqa: F811
    from jobs.clock import SystemClock

    slack = SlackApiServer().start()
    work = BackgroundWork()
    clock = SystemClock()
    settings = Settings(trainbot_home=tmp_path, trainbot_bucket=moto_aws.bucket, trainbot_role_arn=moto_aws.role_arn,
                        slack_bot_token=BOT_TOKEN, slack_signing_secret=SECRET, slack_api_url=slack.base_url)
    store = Store(f"sqlite:///{tmp_path / 'bot.db'}", clock=clock)
    store.migrate()
    backend = sagemaker_backend(moto_aws)
    jobs = JobService(store=store, backend=backend, settings=settings, clock=clock,
                      new_lineage_id=lambda spec: f"logs-{time.time_ns() % 10**10}")
    services = Services(jobs=jobs, store=store, settings=settings, clock=clock, backend=backend, run_later=work)
    try:
        with running_bot(services, settings, slack, work) as (chat, bot, home):
            yield Rig(slack, services, store, chat, bot, work, home)
    finally:
        work.shutdown()
        slack.stop()


def test_logs_shows_every_hosts_stream_labelled_and_a_long_one_as_a_snippet(moto_rig: Rig, moto_aws: MotoAws) -> None:  # noqa: F811
    rig = moto_rig
    lineage = rig.services.jobs.launch("bert-squad", actor=ALICE)  # 2 x ml.p3.16xlarge: two hosts
    rig.services.jobs.attach_message(lineage.id, "C_ML", "1700000000.000042")
    job = f"{lineage.id}-1"
    for host in (1, 2):
        put_logs(moto_aws, job, host, [f"host {host} step {i} " + "·" * 80 for i in range(60)])

    status, body = rig.bot.post(slash_command("/logs", f"{lineage.id} 3"))
    assert status == 200 and json.loads(body)["text"] == f"Reading the last 3 lines of {job}'s log…"
    told, = rig.slack.wait_calls("chat.postEphemeral")
    rig.settle()
    shown = json.dumps(told.params["blocks"], ensure_ascii=False)
    assert "*algo-1* (3 lines)" in shown and "*algo-2* (3 lines)" in shown
    assert "host 2 step 59" in shown and "host 1 step 56" not in shown

    rig.bot.post(slash_command("/logs", job))  # 40 lines a host: longer than a message allows
    done, = rig.slack.wait_calls("files.completeUploadExternal")
    rig.settle()
    assert done.params["channel_id"] == "C_ML" and done.params["thread_ts"] == "1700000000.000042"
    uploaded = rig.slack.calls_to("upload")[0].params["data"].decode()
    assert uploaded.startswith("== algo-1 (40 lines) ==\nhost 1 step 20 ")
    assert "== algo-2 (40 lines) ==" in uploaded and "host 2 step 59" in uploaded
    note = rig.slack.calls_to("chat.postEphemeral")[-1].params["text"]
    assert note == f"{job}: 80 log lines of 2 hosts are longer than a message; they are in the file posted in the job's thread."


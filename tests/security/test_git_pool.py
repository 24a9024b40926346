"""Item 6: a slow git host slows only its own launch.

Four people press Launch on own code from a git "host" on loopback that accepts connections and never
answers (its TLS handshake never completes), through signed Slack requests into the app `trainbot serve
--http` builds, with SageMaker on moto. Their launches wait on git on the code-host pool; meanwhile another
person's plain /train card, its Launch, /logs and the home tab are served at once, because nothing that waits
on git runs on the background executor. A fifth own-code launch of someone who already has two waiting is
refused at once with one sentence. And git gives up on a silent host at its deadline, without asking it twice.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.code_hosts import CODE_HOST_TASKS_PER_USER
from bot.wiring import build_runtime
from handlers import cards, texts
from jobs.backends.code_sources import GitCodeSources
from jobs.errors import BackendError
from jobs.settings import Settings
from tests.security.rigs import ServedBot, launch_value, wait_until
from tests.support.moto_server import CallRecorder, MotoAws, moto_aws, moto_server, sagemaker_backend  # noqa: F401
from tests.support.slack_api import BOT_TOKEN, SlackApiServer
from tests.support.slack_bot import home_opened

SECRET = "git-pool-signing-secret"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
WAITING = ["U_ONE", "U_TWO", "U_THREE", "U_FOUR"]
SERVED_WITHIN_S = 30  # generous for a loaded machine; a held executor took minutes


class SilentHost:
    """A TCP server that accepts every connection, reads what it is sent, and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.connections: list[socket.socket] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, repo: str = "models") -> str:
        return f"https://127.0.0.1:{self.port}/team/{repo}.git"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._changed:
                self.connections.append(conn)
                self._changed.notify_all()

    def wait_connections(self, count: int, timeout: float = 30) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.connections) >= count, timeout):
                raise AssertionError(f"{len(self.connections)} of {count} git connections arrived")

    def close(self) -> None:
        self.sock.close()
        for conn in self.connections:  # git sees the end at once and gives up
            conn.close()


@dataclass
class Rig:
    served: ServedBot
    host: SilentHost
    creates: CallRecorder


@pytest.fixture
def rig(tmp_path: Path, moto_aws: MotoAws) -> Iterator[Rig]:  # noqa: F811
    host = SilentHost()
    slack = SlackApiServer().start()
    settings = Settings(
        slack_bot_token=BOT_TOKEN, slack_signing_secret=SECRET, slack_api_url=slack.base_url,
        trainbot_home=tmp_path / "home", trainbot_role_arn=moto_aws.role_arn, trainbot_bucket=moto_aws.bucket,
        trainbot_backend="sagemaker", trainbot_code_sources=(f"https://127.0.0.1:{host.port}/",),
    )
    creates = CallRecorder("CreateTrainingJob")
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[creates]), code_home=tmp_path / "home")
    served = ServedBot.start(build_runtime(settings, backend=backend), slack, secret=SECRET)
    try:
        yield Rig(served, host, creates)
    finally:
        host.close()
        served.stop()
        slack.stop()


def own_code_card(rig: Rig, user: str, repo: str) -> dict:
    """/train own code at a pinned commit: the card says what its entry saves, read from a checkout of that
    commit, so the ack says the card follows and the card is drawn off the ack path, waiting on the host."""
    return rig.served.command("/train", f"distilbert-spot code=git+{rig.host.url(repo)}@{COMMIT} entry=jobs/train.py",
                              user=user)


def test_launches_waiting_on_a_silent_git_host_hold_nothing_anyone_else_needs(rig: Rig) -> None:
    slack, runtime = rig.served.slack, rig.served.runtime
    for user in WAITING:  # each their own repository (one repository's fetches wait on each other)
        ack = own_code_card(rig, user, f"models-{user.lower()}")
        assert ack["text"].startswith("Reading ") and not ack.get("blocks"), ack  # at once, no card yet
    rig.host.wait_connections(len(WAITING))  # four fetches are in flight, each waiting on the silent host

    started = time.monotonic()
    blocks = rig.served.launch_card("distilbert-spot", user="U_BOB")  # a plain card: the ack itself
    value = launch_value(blocks)
    rig.served.press(cards.ACTION_LAUNCH, value, user="U_BOB")
    bob = wait_until(lambda: runtime.store.find_by_request(json.loads(value)["r"]), timeout=SERVED_WITHIN_S,
                     what="Bob's launch")
    wait_until(lambda: any(c.get("TrainingJobName") == f"{bob.id}-1" for c in rig.creates.calls),
               timeout=SERVED_WITHIN_S, what="Bob's CreateTrainingJob")

    rig.served.command("/logs", bob.id, user="U_BOB")
    slack.wait_for(lambda calls: any(c.method == "chat.postEphemeral" and _about_logs(c.params, f"{bob.id}-1")
                                     for c in calls), timeout=SERVED_WITHIN_S)
    status, _ = rig.served.bot.post_event(home_opened("U_BOB"))
    assert status == 200
    slack.wait_for(lambda calls: any(c.method == "views.publish" and c.params.get("user_id") == "U_BOB"
                                     for c in calls), timeout=SERVED_WITHIN_S)
    assert time.monotonic() - started < SERVED_WITHIN_S
    assert [c["TrainingJobName"] for c in rig.creates.calls] == [f"{bob.id}-1"]  # theirs still wait on git
    assert len(rig.host.connections) == len(WAITING)


def _about_logs(params: dict, job: str) -> bool:
    text = json.dumps(params)
    return job in text and ("Logs of" in text or "Could not read the logs" in text)


def test_a_person_with_two_launches_waiting_on_git_is_told_at_once(rig: Rig) -> None:
    for index in range(CODE_HOST_TASKS_PER_USER):
        own_code_card(rig, "U_ONE", f"models-{index}")
    rig.host.wait_connections(CODE_HOST_TASKS_PER_USER)

    refusal = texts.CODE_HOST_BUSY_USER.format(count=CODE_HOST_TASKS_PER_USER)
    assert own_code_card(rig, "U_ONE", "models-more")["text"] == refusal  # in the ack, at once
    assert len(rig.host.connections) == CODE_HOST_TASKS_PER_USER  # the third never reached git
    # A /train that must resolve a REF on that host is refused in its ack, for the same reason.
    ack = rig.served.command("/train", f"distilbert-spot code=git+{rig.host.url()}@main entry=jobs/train.py",
                             user="U_ONE")
    assert ack["text"] == refusal


def test_a_silent_host_is_given_up_at_the_deadline_and_not_asked_twice(tmp_path: Path) -> None:
    host = SilentHost()
    try:
        git = GitCodeSources(tmp_path / "home", timeout=3)
        started = time.monotonic()
        with pytest.raises(BackendError, match=r"^Could not fetch .*: git took longer than 3 s\.$"):
            git.checkout(host.url(), COMMIT)
        assert time.monotonic() - started < 15
        assert len(host.connections) == 1  # no second fetch of every branch after the shallow one timed out
    finally:
        host.close()

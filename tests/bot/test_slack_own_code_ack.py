"""/train with own code over real Slack HTTP: the command is acked before its git REF is resolved, the card
(or the sentence that says why there is none) follows through the response_url, and Launch runs the commit
the card showed even after the branch moved.

Everything is real: signed requests into the Bolt app `trainbot serve --http` builds (bot.serve.build_slack
on bot.wiring.build_runtime), the loopback Slack API, SageMaker on moto, and git on a repository the test
makes. Only the `git` on PATH is a wrapper around the real one that logs each `ls-remote` and holds it until
the test opens a gate, so "acked before resolved" is a fact of the order of events, not a timing."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.serve import SlackParts, build_slack
from bot.slack_chat import SlackChat
from bot.wiring import Runtime, build_runtime
from handlers import cards
from handlers.blocks import buttons_in
from jobs.settings import Settings
from tests.support.git_repos import GitRepo, make_repo
from tests.support.moto_server import (  # noqa: F401  (fixtures)
    CallRecorder,
    MotoAws,
    moto_aws,
    moto_server,
    sagemaker_backend,
)
from tests.support.slack_api import BOT_TOKEN, SlackApiServer
from tests.support.slack_bot import (
    BackgroundWork,
    HttpBot,
    block_action,
    slash_command,
    unpaced_web_client,
    view_submission,
)

SECRET = "own-code-signing-secret"
GATE_SECONDS = 10  # how long the wrapper holds ls-remote for a closed gate before it gives up waiting

WRAPPER = """#!/bin/sh
for arg in "$@"; do [ "$arg" = ls-remote ] && listing=yes; done
if [ -z "$listing" ]; then exec {git} "$@"; fi
echo started >> {log}
waited=0
while [ ! -e {gate} ] && [ $waited -lt {ticks} ]; do sleep 0.05; waited=$((waited + 1)); done
{git} "$@"
status=$?
echo done >> {log}
exit $status
"""


@dataclass
class GitGate:
    """The wrapper's log (one `started` and one `done` line per ls-remote) and the gate it waits on."""

    log: Path
    gate: Path

    def open(self) -> None:
        self.gate.touch()

    def lines(self) -> list[str]:
        return self.log.read_text().split() if self.log.exists() else []


@dataclass
class Rig:
    slack: SlackApiServer
    runtime: Runtime
    parts: SlackParts
    bot: HttpBot
    work: BackgroundWork
    creates: CallRecorder
    aws: MotoAws
    repo: GitRepo
    git: GitGate

    def train(self, text: str) -> dict:
        status, body = self.bot.post(slash_command("/train", text, response_url=self.slack.response_url("train")))
        assert status == 200
        return json.loads(body)

    def card(self, text: str) -> list[dict]:
        """The plan card's blocks, whether they came as the ack or after it."""
        ack = self.train(text)
        return ack.get("blocks") or self.responses()[-1]["blocks"]

    def responses(self, count: int = 1) -> list[dict]:
        self.slack.wait_calls("response", count)
        self.work.settle()
        return [call.params for call in self.slack.calls_to("response")]


@pytest.fixture
def rig(tmp_path: Path, moto_aws: MotoAws, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:  # noqa: F811
    repo = make_repo(tmp_path / "git", "team")
    gate = GitGate(tmp_path / "ls-remote.log", tmp_path / "gate")
    real_git = shutil.which("git")
    assert real_git is not None
    wrapper = tmp_path / "bin" / "git"
    wrapper.parent.mkdir()
    wrapper.write_text(WRAPPER.format(git=real_git, log=gate.log, gate=gate.gate, ticks=GATE_SECONDS * 20))
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}:{os.environ.get('PATH', '')}")

    slack = SlackApiServer().start()
    home = tmp_path / "home"
    settings = Settings(
        slack_bot_token=BOT_TOKEN, slack_signing_secret=SECRET, slack_api_url=slack.base_url,
        trainbot_home=home, trainbot_role_arn=moto_aws.role_arn, trainbot_bucket=moto_aws.bucket,
        trainbot_backend="sagemaker", trainbot_code_sources=(f"file://{tmp_path / 'git'}/",),
    )
    creates = CallRecorder("CreateTrainingJob")
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[creates]), code_home=home)
    runtime = build_runtime(settings, backend=backend)
    work = BackgroundWork()
    runtime.run_later = work  # type: ignore[method-assign]  # the same bounded pool, but waitable
    # Work that waits on git has a pool of its own (bot/code_hosts.py); here it goes to the waitable one too.
    runtime.code_hosts.submit = lambda user, job: work(job)  # type: ignore[method-assign]
    client = unpaced_web_client(settings)
    parts = build_slack(runtime, http=True, client=client, chat=SlackChat(client))
    bot = HttpBot(parts.app, secret=SECRET).start()
    try:
        yield Rig(slack, runtime, parts, bot, work, creates, moto_aws, repo, gate)
    finally:
        gate.open()  # a wrapper still waiting lets go
        bot.stop()
        work.shutdown()
        runtime.executor.shutdown()
        slack.stop()


def launch_value(blocks: list[dict]) -> str:
    return next(b["value"] for b in buttons_in(blocks) if b["action_id"] == cards.ACTION_LAUNCH)


def uploaded_script(aws: MotoAws, request: dict, name: str) -> str:
    submit = json.loads(request["HyperParameters"]["sagemaker_submit_directory"])
    bucket, _, key = submit.removeprefix("s3://").partition("/")
    body = aws.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        member = archive.extractfile(name)
        assert member is not None
        return member.read().decode()


def test_own_code_is_acked_before_its_ref_is_resolved_and_the_card_follows(rig: Rig) -> None:
    commit = rig.repo.commit({"jobs/train.py": "print('planned')\n"})

    ack = rig.train(f"distilbert-spot code=git+{rig.repo.url}@main entry=jobs/train.py")

    assert ack["response_type"] == "ephemeral" and "Resolving" in ack["text"] and "@main" in ack["text"]
    assert "blocks" not in ack
    assert "done" not in rig.git.lines()  # the ack came back while ls-remote was still held
    rig.git.open()
    card, = rig.responses()
    assert card["response_type"] == "ephemeral"
    assert f"@{commit[:7]} (main)" in json.dumps(card["blocks"])
    assert json.loads(launch_value(card["blocks"]))["c"] == commit
    assert rig.git.lines() == ["started", "done"]


def test_a_pinned_commit_is_read_after_the_ack_once_then_its_card_is_the_ack(rig: Rig) -> None:
    commit = rig.repo.commit({"jobs/train.py": "print('planned')\n"})
    text = f"distilbert-spot code=git+{rig.repo.url}@{commit} entry=jobs/train.py"

    first = rig.train(text)  # the card says what the entry saves: read from a checkout of that commit
    assert first["text"].startswith("Reading ") and not first.get("blocks"), first
    assert f"@{commit[:7]}" in json.dumps(rig.responses()[-1]["blocks"])

    again = rig.train(text)  # the commit is here now: nothing to ask the host
    assert f"@{commit[:7]}" in json.dumps(again["blocks"]) and launch_value(again["blocks"])
    assert rig.git.lines() == [] and len(rig.slack.calls_to("response")) == 1  # no ls-remote, no second answer


def test_a_ref_that_cannot_be_resolved_is_one_sentence_after_the_ack(rig: Rig) -> None:
    rig.repo.commit({"jobs/train.py": "print('planned')\n"})
    rig.git.open()
    missing = f"file://{rig.repo.bare.parent}/gone.git"

    first = rig.train(f"distilbert-spot code=git+{rig.repo.url}@no-such-branch entry=jobs/train.py")
    second = rig.train(f"distilbert-spot code=git+{missing}@main entry=jobs/train.py")

    assert "Resolving" in first["text"] and "Resolving" in second["text"]
    answers = rig.responses(2)
    for answer in answers:
        assert "blocks" not in answer or not answer["blocks"]
        assert "Traceback" not in answer["text"] and answer["text"].count("\n") == 0
    # The two resolve side by side on the background pool: their answers come in either order.
    unknown, = (a["text"] for a in answers if "no-such-branch" in a["text"])
    unreachable, = (a["text"] for a in answers if "gone" in a["text"])
    assert "has no branch or tag 'no-such-branch'" in unknown
    assert unreachable.startswith("Could not list the branches and tags of ")
    assert unreachable.endswith("gone.git' does not appear to be a git repository")


def test_a_source_outside_the_allowlist_is_refused_in_the_ack(rig: Rig) -> None:
    ack = rig.train("distilbert-spot code=git+https://github.com/other/repo.git@main entry=jobs/train.py")

    assert "not among the sources" in ack["text"] and rig.git.lines() == []


def test_launch_runs_the_commit_the_card_showed_after_the_branch_moved(rig: Rig) -> None:
    shown = rig.repo.commit({"jobs/train.py": "print('planned')\n"})
    rig.git.open()
    value = launch_value(rig.card(f"distilbert-spot code=git+{rig.repo.url}@main entry=jobs/train.py"))
    rig.repo.commit({"jobs/train.py": "print('moved on')\n"}, "main moves while the card is shown")

    status, _ = rig.bot.post(block_action(cards.ACTION_EDIT, value, response_url=rig.slack.response_url("edit")))
    assert status == 200
    status, _ = rig.bot.post(block_action(cards.ACTION_LAUNCH, value, response_url=rig.slack.response_url("launch")))
    assert status == 200
    rig.work.settle()

    lineage, = rig.runtime.store.list_lineages()
    assert lineage.spec.code_commit == shown
    sent = rig.creates.by_name(f"{lineage.id}-1")
    assert uploaded_script(rig.aws, sent, "train.py") == "print('planned')\n"
    assert rig.git.lines() == ["started", "done"]  # resolved once, for the card; Edit and Launch did not ask
    assert rig.slack.calls_to("views.open")


def test_an_edited_card_is_drawn_after_the_modal_closes(rig: Rig) -> None:
    commit = rig.repo.commit({"jobs/train.py": "print('planned')\n"})
    fields = {"options": f"distilbert-spot code=git+{rig.repo.url}@main entry=jobs/train.py", "spot": "no"}

    status, body = rig.bot.post(view_submission(cards.EDIT_CALLBACK, fields, json.dumps({"c": "C_ML"})))

    assert status == 200 and "errors" not in body
    assert "done" not in rig.git.lines()
    rig.git.open()
    posted, = rig.slack.wait_calls("chat.postEphemeral")
    rig.work.settle()
    assert posted.params["user"] == "U_ALICE"
    assert f"@{commit[:7]} (main)" in json.dumps(posted.params["blocks"])

"""Which /train texts must ask a git host before their card can be drawn (a surface acks those at once and
draws the card later), and the plan card's buttons carrying the commit the card pinned. The runtime
`trainbot` builds, real git on a repository the test makes; no network."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.wiring import Runtime, build_runtime
from handlers import cards, router, texts, train
from handlers.blocks import buttons_in
from handlers.context import CommandContext
from jobs.backends.code_sources import GitCodeSources
from jobs.records import Actor
from jobs.settings import Settings
from tests.handlers.fakes import RecordingChat, free_text_arguments
from tests.support.clock import FakeClock
from tests.support.git_repos import GitRepo, make_repo

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
MALLORY = Actor("U_MALLORY", channel_id="C_ML", via="slack")


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    repo = make_repo(tmp_path / "git", "team")
    repo.commit({"jobs/train.py": "print('hi')\n"})
    return repo


@pytest.fixture
def runtime(tmp_path: Path, repo: GitRepo) -> Iterator[Runtime]:
    settings = Settings(trainbot_home=tmp_path / "home", trainbot_backend="local", trainbot_code_sources=(repo.url,),
                        trainbot_allowed_users=("U_ALICE",))
    runtime = build_runtime(settings, clock=FakeClock())
    try:
        yield runtime
    finally:
        runtime.shutdown()


def ctx(runtime: Runtime, actor: Actor = ALICE) -> CommandContext:
    return CommandContext(actor=actor, channel_id="C_ML", services=runtime.services(), chat=RecordingChat())


def note_of(runtime: Runtime, text: str) -> str | None:
    return train.resolving_note(ctx(runtime), text)


def test_only_a_git_ref_or_a_commit_not_fetched_needs_the_network(runtime: Runtime, repo: GitRepo) -> None:
    commit = repo.commit({"jobs/train.py": "print('again')\n"})
    own = f"code=git+{repo.url}@main entry=jobs/train.py"

    note = train.resolving_note(ctx(runtime), f"distilbert-spot {own}")

    assert note == texts.RESOLVING_CODE.format(source=f"{repo.url.removesuffix('.git')}@main")
    assert train.resolving_note(ctx(runtime), f"distilbert-spot code=git+{repo.url} entry=jobs/train.py")
    pinned = f"distilbert-spot code=git+{repo.url}@{commit} entry=jobs/train.py"  # a full commit: its entry is
    assert note_of(runtime, pinned) == texts.READING_CODE.format(  # read from a checkout, fetched first
        source=f"{repo.url.removesuffix('.git')}@{commit[:7]}")
    GitCodeSources(runtime.settings.trainbot_home).checkout(repo.url, commit)
    for answered_at_once in (
        "distilbert-spot",  # no own code
        pinned,  # a full commit already checked out
        "distilbert-spot code=s3://bucket/code/team.tar.gz entry=train.py",  # not allowed: refused at once
        "distilbert-spot code=git+https://github.com/other/x.git@main entry=jobs/train.py",  # not allowed
        f"distilbert-spot {own} instances=zero",  # bad input
        "help code",
        "",
    ):
        assert train.resolving_note(ctx(runtime), answered_at_once) is None, answered_at_once
    assert train.resolving_note(ctx(runtime, MALLORY), f"distilbert-spot {own}") is None  # refused at once


def test_a_recipe_that_names_code_needs_the_network_too(runtime: Runtime, repo: GitRepo) -> None:
    runtime.recipes.save("team-qa", f"distilbert-spot code=git+{repo.url}@main entry=jobs/train.py", actor=ALICE)

    assert train.resolving_note(ctx(runtime), "team-qa max_run=2h") is not None


def test_the_card_buttons_carry_the_pinned_commit_even_for_a_long_command(runtime: Runtime, repo: GitRepo) -> None:
    commit = repo.commit({"jobs/train.py": "print('pinned')\n"})
    hyperparameters = " ".join(f"hp.{name}={'x' * 40}" for name in free_text_arguments()[:60])
    text = f"distilbert-spot code=git+{repo.url}@main entry=jobs/train.py {hyperparameters}"

    reply = router.run_command(ctx(runtime), "train", text)

    assert reply.blocks, reply.text
    value = next(b["value"] for b in buttons_in(reply.blocks) if b["action_id"] == cards.ACTION_LAUNCH)
    assert len(value) < 150 and json.loads(value)["c"] == commit
    button = train.decode_button(ctx(runtime), value)
    assert (button.text, button.commit) == (text, commit)
    repo.commit({"jobs/train.py": "print('moved')\n"})
    assert train.card_plan(ctx(runtime), button).spec.code_commit == commit


def test_a_button_value_with_a_forged_commit_is_a_stale_card(runtime: Runtime) -> None:
    value = json.dumps({"r": "r1", "t": "distilbert-spot", "c": "main; rm -rf /"})

    reply = router.run_action(ctx(runtime), cards.ACTION_LAUNCH, value)

    assert reply is not None and reply.text == texts.STALE_BUTTON

"""Issue 22, item 5: the code allowlist (TRAINBOT_CODE_SOURCES) compares what git will fetch.

A real git repository outside the allowed folder (``other/secret.git``) and an allowed one beside it; the
installed `trainbot` is asked to plan and to save a recipe with URLs that hop out of the allowed prefix
through percent-escapes. Git itself decodes a ``file://`` path, so ``team/%2e%2e/other`` is ``other`` to
it. Every such URL is refused with exit 2 and one sentence, and git never fetched the secret repository.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobs.errors import SpecError
from jobs.planning.own_code import check_allowed, normalised_source
from tests.security.cli import clean_env, one_sentence, trainbot
from tests.support.git_repos import make_repo

#: What a team's own script needs besides code= and entry= (issue 19 makes model= and dataset= optional).
OWN_CODE = ("entry=train.py", "model=bert-base-uncased", "dataset=imdb")
SCRIPT = "print('training')\n"
SECRET_MARK = "the-other-teams-secret-training-code"

#: Each hops from ``allowed/team/`` to ``allowed/other/secret.git`` as git (or a normalising proxy) reads it.
ESCAPES = ["%2e%2e", ".%2e", "%2e.", "%2E%2E", "%2e%2E"]


@pytest.fixture
def repos(tmp_path: Path) -> dict[str, str]:
    """The commit of each repository: the allowed team's and the other team's."""
    allowed = make_repo(tmp_path / "srv" / "allowed" / "team", "models")
    secret = make_repo(tmp_path / "srv" / "allowed" / "other", "secret")
    return {"allowed": allowed.commit({"train.py": SCRIPT}),
            "secret": secret.commit({"train.py": f"print({SECRET_MARK!r})\n"})}


def env_for(tmp_path: Path) -> dict[str, str]:
    return clean_env(tmp_path / "home", TRAINBOT_CODE_SOURCES=f"file://{tmp_path}/srv/allowed/team/")


def fetched_anything_of(home: Path) -> bool:
    """Whether git put the secret repository's objects (or its tree) under the bot's home."""
    cache = home / "code"
    return cache.is_dir() and any("secret" in str(path) for path in cache.rglob("*"))


@pytest.mark.parametrize("escape", ESCAPES)
def test_a_percent_escaped_dot_dot_hop_is_refused_before_git_runs(
    tmp_path: Path, repos: dict[str, str], escape: str
) -> None:
    env = env_for(tmp_path)
    code = f"code=git+file://{tmp_path}/srv/allowed/team/{escape}/other/secret.git@main"
    done = trainbot(env, "plan", code, *OWN_CODE, "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    assert ". or .. segments" in one_sentence(done)
    assert SECRET_MARK not in done.stdout and not fetched_anything_of(tmp_path / "home")


def test_an_escaped_separator_is_refused(tmp_path: Path, repos: dict[str, str]) -> None:
    env = env_for(tmp_path)
    code = f"code=git+file://{tmp_path}/srv/allowed/team/..%2fother/secret.git@main"
    done = trainbot(env, "plan", code, *OWN_CODE)
    assert done.returncode == 2 and "%2f" in one_sentence(done)
    assert not fetched_anything_of(tmp_path / "home")


def test_a_recipe_gets_the_same_check(tmp_path: Path, repos: dict[str, str]) -> None:
    env = env_for(tmp_path)
    code = f"code=git+file://{tmp_path}/srv/allowed/team/%2e%2e/other/secret.git@main"
    saved = trainbot(env, "recipe", "save", "sneaky", code, *OWN_CODE)
    assert saved.returncode == 2 and ". or .. segments" in one_sentence(saved)
    listed = trainbot(env, "recipe", "list")
    assert "sneaky" not in listed.stdout


def test_the_allowlist_compares_the_decoded_url_that_git_fetches(
    tmp_path: Path, repos: dict[str, str]
) -> None:
    """``%74eam`` is ``team`` to git: allowed (and fetched) as the allowed repository it is."""
    env = env_for(tmp_path)
    code = f"code=git+file://{tmp_path}/srv/allowed/%74eam/models.git@main"
    done = trainbot(env, "plan", code, *OWN_CODE, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["spec"]["code_commit"] == repos["allowed"]  # git resolved the allowed one


@pytest.mark.parametrize(
    "url",
    [
        "git+https://github.com/team/%2e%2e/other/repo.git",  # git sends it as is; a normalising proxy hops
        "git+https://github.com/team/.%2e/other/repo.git",
        "git+https://github.com/team/..%2fother/repo.git",
        "git+https://github.com/team%2f..%2fother/repo.git",
        "git+https://github.com/team/%252e%252e/other/repo.git",  # encoded twice
        "git+https://github.com/team//other/repo.git",
        "git+https://github.com/team/x%00.git",
        "git+ssh://git@github.com/team/%2E%2E/other/repo.git",
        "git+git@github.com:team/%2e%2e/other/repo.git",
        "git+https://github.c%6fm/team/repo.git",
    ],
)
def test_escaped_hops_over_every_scheme_are_refused(url: str) -> None:
    with pytest.raises(SpecError) as refused:
        check_allowed(url, ("https://github.com/team/", "ssh://git@github.com/team/", "git@github.com:team/"))
    said = refused.value.user_message()
    assert ("repository path" in said or "host" in said) and "\n" not in said, said


def test_scheme_and_host_compare_without_case() -> None:
    assert normalised_source("https://GitHub.COM/%74eam/repo.git") == "https://github.com/team/repo.git"
    check_allowed("git+https://GitHub.com/team/repo.git@main", ("https://github.com/team/",))
    with pytest.raises(SpecError, match="not among the sources"):
        check_allowed("git+https://github.com/team-evil/repo.git", ("https://github.com/team",))

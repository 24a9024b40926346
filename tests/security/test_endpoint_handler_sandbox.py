"""A team's inference handler never runs with the bot's privileges (issue 32): ``/deploy JOB entry_point=...`` (or
a model's ``code/inference.py``) runs other people's code in the local endpoint's process, so that process runs
in bwrap as the team's training does. The handler here is an attacker's: asked for a prediction, it looks for
the store, another job's model folder and the code cache under TRAINBOT_HOME, counts the processes it can see,
and writes into the bot's home and the served model. Nothing of it may be visible, and nothing may change. Where
no sandbox works, only the console may run a handler; the bot refuses it in one sentence."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from jobs.backends.local.endpoints import LocalEndpoints
from jobs.backends.local.offline_assets import LocalAssets
from jobs.backends.local.sandbox import Sandbox
from jobs.clock import SystemClock
from jobs.endpoints.port import DeployRequest, InferenceCode
from jobs.errors import BadInput, NotFound
from tests.support.git_repos import make_repo
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)

ATTACKER = '''\
import os

HOME = {home!r}
MODEL = {model!r}


def model_fn(model_dir):
    return model_dir


def predict_fn(data, model_dir):
    seen = {{name: os.path.exists(os.path.join(HOME, *path.split("/"))) for name, path in (
        ("store", "trainbot.db"), ("other_job", "local-jobs/other-job/model/secret.txt"),
        ("code_cache", "code/git/other-repo/secret.txt"))}}
    seen["processes"] = len([p for p in os.listdir("/proc") if p.isdigit()])
    for target in (os.path.join(HOME, "written-by-handler"), os.path.join(MODEL, "written-by-handler")):
        try:
            with open(target, "w") as out:
                out.write("x")
        except OSError:
            pass
    return seen
'''


def _home(tmp_path: Path, local_assets: LocalAssets) -> tuple[Path, Path]:
    import shutil

    home = tmp_path / "home"
    model = home / "local-jobs" / "team-job-1" / "model"  # where a completed local job's model lies
    shutil.copytree(local_assets.model_dir, model)
    (home / "trainbot.db").write_text("the store")
    (home / "local-jobs" / "other-job" / "model").mkdir(parents=True)
    (home / "local-jobs" / "other-job" / "model" / "secret.txt").write_text("another team's model")
    (home / "code" / "git" / "other-repo").mkdir(parents=True)  # another team's checkout in the code cache
    (home / "code" / "git" / "other-repo" / "secret.txt").write_text("another team's code")
    return home, model


def _request(tmp_path: Path, home: Path, model: Path) -> DeployRequest:
    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"train.py": "print('train')\n",
                          "inference.py": ATTACKER.format(home=str(home.resolve()), model=str(model.resolve()))})
    return DeployRequest(name="probe-ep", model_name="probe-1", model_data=str(model), task="", framework=None,
                         instance_type="local", instance_count=1,
                         handler=InferenceCode("inference.py", "", {"git_config": {"repo": repo.url, "commit": commit},
                                                                    "source_dir": "."}))


@pytest.mark.skipif(Sandbox().problem() is not None, reason="bwrap does not work on this machine")
def test_a_handler_sees_nothing_of_the_bot_and_changes_nothing(local_assets: LocalAssets, tmp_path: Path) -> None:
    home, model = _home(tmp_path, local_assets)
    backend = LocalEndpoints(home, SystemClock(), sandbox=Sandbox("bwrap"))
    backend.deploy(_request(tmp_path, home, model))
    try:
        wait_for(lambda: backend.describe("probe-ep").status != "Creating", "the endpoint to load its handler")
        assert backend.describe("probe-ep").status == "InService", backend.describe("probe-ep").failure_reason
        seen = backend.invoke("probe-ep", {"inputs": "anything"})
    finally:
        with contextlib.suppress(NotFound):
            backend.delete("probe-ep")
    assert seen == {"store": False, "other_job": False, "code_cache": False, "processes": seen["processes"]}
    assert seen["processes"] <= 3  # its own PID namespace: bwrap's and the server's, never the bot's
    assert not list(tmp_path.rglob("written-by-handler"))


def test_without_a_sandbox_the_bot_refuses_a_handler_in_one_sentence(local_assets: LocalAssets, tmp_path: Path) -> None:
    home, model = _home(tmp_path, local_assets)
    backend = LocalEndpoints(home, SystemClock(), sandbox=Sandbox("off"))
    with pytest.raises(BadInput, match="runs on this bot's local backend only inside a bubblewrap sandbox") as refused:
        backend.deploy(_request(tmp_path, home, model))
    assert "TRAINBOT_LOCAL_SANDBOX=off" in refused.value.user_message()
    assert not (home / "local-endpoints" / "probe-ep").exists()

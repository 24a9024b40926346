"""On the local backend, a path in model=, train_data=, dataset=, dataset_revision= (or hp.tokenizer_name=)
must lie under TRAINBOT_HOME/data or a folder of TRAINBOT_LOCAL_DATA_DIRS, after ~, .. and symlinks;
anything else is refused when the plan is made, before anything is recorded or launched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs.errors import SpecError
from jobs.lifecycle.service import JobService
from jobs.planning.grammar import parse_command
from jobs.planning.local_paths import check_local_paths, filesystem_path
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import Store
from tests.jobs.fakes import ScriptedBackend
from tests.support.clock import FakeClock

ALICE = Actor("U_ALICE", channel_id="C1", via="console")


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    (tmp_path / "home" / "data" / "reviews").mkdir(parents=True)
    (tmp_path / "shared" / "models").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    monkeypatch.chdir(tmp_path)  # relative names resolve from here, as from the bot's working directory
    monkeypatch.setenv("TRAINBOT_LOCAL_DATA_DIRS", f"{tmp_path / 'shared'}")
    return Settings(trainbot_home=tmp_path / "home")


def check(text: str, settings: Settings, backend: str = "local") -> None:
    check_local_paths(parse_command(text), settings, backend=backend)


@pytest.mark.parametrize(
    ("value", "hub_id", "expected"),
    [
        ("bert-base-uncased", True, None),
        ("owner/name", True, None),
        ("s3://bucket/data/", False, None),
        ("hf://datasets/x", True, None),
        ('{"zero_optimization": {"stage": 2}}', True, None),
        ("refs/pr/1", False, None),
        ("/etc", True, "/etc"),
        ("file:///etc/passwd", True, "/etc/passwd"),
        ("~", True, "~"),
        ("./x", True, "CWD/x"),
        ("..", True, "CWD/.."),
        ("owner/../../etc", True, "CWD/../etc"),
        ("a/b/c", True, "CWD/a/b/c"),
        ("outside", True, "CWD/outside"),  # a relative name that exists
    ],
)
def test_what_counts_as_a_path(settings: Settings, value: str, hub_id: bool, expected: str | None) -> None:
    found = filesystem_path(value, hub_id=hub_id)
    if expected is None:
        assert found is None
        return
    wanted = Path(os.path.expanduser(expected.replace("CWD", str(Path.cwd())))).resolve()
    assert found == wanted


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ("train_data=/etc", "train_data"),
        ("train_data=~/.aws", "train_data"),
        ("train_data=./outside", "train_data"),
        ("model=/etc", "model"),
        ("model=../home/data/../../outside", "model"),
        ("model=file:///root", "model"),
        ("dataset=/etc", "dataset"),
        ("dataset=./outside:cfg", "dataset"),
        ("dataset=outside", "dataset"),
        ("dataset_revision=../../../etc", "dataset_revision"),
        ("hp.tokenizer_name=/etc", "hp.tokenizer_name"),
    ],
)
def test_paths_outside_the_allowed_folders_are_refused(settings: Settings, options: str, key: str) -> None:
    with pytest.raises(SpecError) as caught:
        check(f"distilbert-spot {options}", settings)
    message = caught.value.message
    assert message.startswith(f"{key}=") and "TRAINBOT_LOCAL_DATA_DIRS" in message and "\n" not in message
    assert str(settings.trainbot_home / "data") in message


def test_dotdot_and_symlinks_are_resolved_first(settings: Settings, tmp_path: Path) -> None:
    data = settings.trainbot_home / "data"
    (data / "escape").symlink_to(tmp_path / "outside")
    (tmp_path / "outside" / "back").symlink_to(data / "reviews")
    with pytest.raises(SpecError, match="outside the folders"):
        check(f"distilbert-spot train_data={data}/escape", settings)
    with pytest.raises(SpecError, match="outside the folders"):
        check(f"distilbert-spot train_data={data}/reviews/../../../outside", settings)
    check(f"distilbert-spot train_data={tmp_path}/outside/back", settings)  # lands inside: allowed


def test_paths_inside_the_allowed_folders_and_hub_ids_pass(settings: Settings, tmp_path: Path) -> None:
    home_data = settings.trainbot_home / "data"
    for options in (
        f"train_data={home_data}/reviews",
        f"train_data={home_data}",
        f"model={tmp_path}/shared/models/tiny dataset=imdb",
        "model=./shared/models",
        f"hp.tokenizer_name={tmp_path}/shared/models",
        "model=bert-base-uncased dataset=owner/reviews:plain dataset_revision=refs/pr/1",
        "train_data=s3://bucket/reviews/",
    ):
        check(f"distilbert-spot {options}", settings)


def test_only_the_local_backend_checks(settings: Settings) -> None:
    check("distilbert-spot train_data=/etc model=/etc", settings, backend="sagemaker")


def test_the_folders_setting_takes_commas_or_path_separators(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRAINBOT_LOCAL_DATA_DIRS", f"{tmp_path}/a, {tmp_path}/b{os.pathsep}~/c,,")
    roots = Settings(trainbot_home=tmp_path / "h").local_data_roots
    assert roots == (tmp_path / "h" / "data", tmp_path / "a", tmp_path / "b", Path.home() / "c")


def test_plan_and_launch_refuse_on_the_local_backend(settings: Settings, store: Store, clock: FakeClock) -> None:
    backend = ScriptedBackend(name="local", clock=clock)
    service = JobService(store=store, backend=backend, settings=settings, clock=clock)
    for call in (lambda: service.plan("distilbert-spot train_data=/etc"),
                 lambda: service.launch("distilbert-spot train_data=/etc", actor=ALICE)):
        with pytest.raises(SpecError, match="train_data='/etc' is outside the folders local jobs may read"):
            call()
    assert backend.created == [] and service.list() == []
    inside = f"distilbert-spot train_data={settings.trainbot_home}/data/reviews"
    assert service.plan(inside).spec.train_data
    service.launch(inside, actor=ALICE)
    assert len(backend.created) == 1


def test_a_container_folder_of_own_code_is_the_jobs_own_not_a_path_here(settings: Settings) -> None:
    own = "code=git+https://h/r.git@" + "a" * 40 + " entry=train.py"
    check(f"{own} hp.output_dir=/opt/ml/model hp.logging_dir=/opt/ml/output/data/logs", settings)  # the job's folder
    with pytest.raises(SpecError, match="hp.data_dir='/opt/ml/../../etc' is outside the folders"):
        check(f"{own} hp.data_dir=/opt/ml/../../etc", settings)  # leaves the job's folder: a path of this machine

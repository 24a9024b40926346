"""Suite-wide guards: no hub downloads, no real Slack or AWS credentials, a throwaway state folder."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.backends.local.offline_assets import LocalAssets
from tests.support.assets import build_shared_assets, seed_assets
from tests.support.aws_calls import RECORDER
from tests.support.environment import SUITE_SETTINGS
from tests.support.iam_policy import denied
from tests.support.moto_server import BUCKET
from tests.support.postgres import postgres_server, postgres_store_url, postgres_url  # noqa: F401
from tests.support.runtimes import image_runtime  # noqa: F401 (the image runtime, built once a session)

#: The files that take longest (`pytest --durations=40`, summed per file), run first: the suite's workers take
#: whole files (`--dist loadfile`), and one of these started last would keep one worker busy alone at the end.
#: Only the order changes; a file missing here runs in collection order after these. The README's command
#: passes --no-loadscope-reorder: by default xdist hands out files with the most tests first, whatever this says.
HEAVIEST_FIRST = (
    "tests/packaging/test_installed.py",  # builds two venvs from the locks first (minutes on a cold cache)
    "tests/bot/test_llm_local_e2e.py",  # builds the newest image's runtime on a fresh machine (pip, minutes)
    "tests/bot/test_own_scripts_local_e2e.py",
    "tests/training/test_transformers4.py",
    "tests/backends/test_local_backend.py",
    "tests/training/test_resume.py",
    "tests/backends/test_local_endpoints.py",
    "tests/training/test_minilm_smoke.py",
    "tests/bot/test_spot_recovery_local_e2e.py",
    "tests/bot/test_console_script.py",
    "tests/security/test_linear_regexes.py",
    "tests/security/test_sandbox.py",
    "tests/training/test_relaunch_global_batch.py",
)


#: Every botocore session made from here on records its calls (tests/support/aws_calls.py): installed before
#: any test makes one.
RECORDER.install()
#: Own code's S3 sources in the suite live under this prefix of the test bucket (TRAINBOT_CODE_SOURCES).
CODE_PREFIX = f"{BUCKET}/code/"


@pytest.fixture(autouse=True)
def _aws_calls_within_iam_policy(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every AWS call the bot makes in a test is one iam-policy.json allows, on the resources it names and under
    its conditions (tests/support/iam_policy.py): the policy is tested by everything the suite does on moto.
    A test that points the bot at a name the policy leaves out, or makes it attempt a refused call, on purpose,
    says so (the iam_unchecked marker, with why)."""
    start = RECORDER.mark()
    yield
    if request.node.get_closest_marker("iam_unchecked"):
        return
    problems = denied(RECORDER.calls(start), bucket=BUCKET, code_bucket=CODE_PREFIX)
    assert not problems, "the bot made AWS calls iam-policy.json does not allow:\n" + "\n".join(problems)


def _free_disk() -> str:
    """Free room where the suite writes: the checkout (venvs, image runtimes) and the temporary folder (jobs)."""
    places = {"the checkout": Path(__file__).resolve().parents[1], "the temporary folder": Path(tempfile.gettempdir())}
    return ", ".join(f"{shutil.disk_usage(path).free / 2**30:.1f} GiB free in {name} ({path})"
                     for name, path in places.items())


def pytest_report_header() -> str:
    # The suite needs a few GB (the venvs, two image runtimes, the jobs): a run on a full disk says so first.
    return f"disk: {_free_disk()}"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.write_line(f"disk at the end: {_free_disk()}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: index for index, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


_LEAKY_VARIABLES = (
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_API_URL",
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "TRAINBOT_BACKEND",
    "TRAINBOT_DATABASE_URL",
)


@pytest.fixture(autouse=True, scope="session")
def _offline_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Nothing in the suite may reach the Hugging Face hub; its cache lives in a temp folder."""
    saved = dict(os.environ)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    os.environ["HF_HOME"] = str(tmp_path_factory.mktemp("hf_home"))
    os.environ["MPLBACKEND"] = "Agg"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    # The workers' local jobs run at once in separate homes, so none sees the others' cores taken: one
    # thread each (the cap local jobs take from the operator), or their pools spin against each other and
    # a job trains at a fiftieth of its speed (bench/local_threads.py).
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ.update(SUITE_SETTINGS)  # for the bot in this process too, not only the processes tests start
    for name in _LEAKY_VARIABLES:
        os.environ.pop(name, None)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a store with no rows: a new SQLite file, then a database on the session's real PostgreSQL
    server (tests/support/postgres.py) already migrated to head. A test that takes it runs once on each."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state' / 'trainbot.db'}"
    url: str = request.getfixturevalue("postgres_store_url")
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Like `database_url`, but with no tables at all on either (for the migrations' own tests)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state' / 'trainbot.db'}"
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
def trainbot_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh TRAINBOT_HOME for one test."""
    home = tmp_path / "trainbot-home"
    home.mkdir()
    monkeypatch.setenv("TRAINBOT_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def local_assets(tmp_path_factory: pytest.TempPathFactory) -> LocalAssets:
    """The tiny model, its tokenizer and the generated data: trained and written once a session."""
    return build_shared_assets(tmp_path_factory.mktemp("shared-assets"))


@pytest.fixture
def local_home(trainbot_home: Path, local_assets: LocalAssets) -> Path:
    """A fresh TRAINBOT_HOME for a test that trains locally, with the session's tiny model in place."""
    return seed_assets(trainbot_home, local_assets)

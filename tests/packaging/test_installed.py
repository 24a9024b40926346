"""What a team deploys, started as they start it: the wheel of this tree, installed non-editable from the lock
by tools/install.sh (the Dockerfile's script) into clean venvs (tests/packaging/conftest.py), and the installed
`trainbot` run from a folder outside the tree, with nothing of the tree on its path.

The editable install the rest of the suite runs on finds every module of the checkout whatever the packaging
says; only an installed wheel shows a module or data file the package leaves out (jobs.endings once was).
"""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.store.migrate import head_revision
from tests.packaging.conftest import ROOT, Installed
from tests.support.moto_server import FAKE_CREDENTIALS, MotoAws, free_port
from tests.support.moto_server import moto_server as moto_server  # noqa: F401  (the fixture)
from tests.support.postgres import postgres_server as postgres_server  # noqa: F401  (the fixture)
from tests.support.postgres import postgres_url as postgres_url  # noqa: F401  (the fixture)
from tests.support.slack_api import BOT_TOKEN, SlackApiServer
from tests.support.slack_bot import form_body, signed_headers, slash_command
from tests.support.waiting import wait_for

PACKAGES = ("bot", "handlers", "jobs", "training")
SECRET = "installed-signing-secret"
#: The first use of an installed venv builds nothing, but a loaded machine imports slowly.
INSTALLED_TIMEOUT_S = 1500


def tree_files() -> set[str]:
    """Every file of the packages' source folders, as a wheel names it (no caches)."""
    return {
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


# ---------------------------------------------------------------- the wheel


@pytest.mark.timeout(INSTALLED_TIMEOUT_S)
def test_the_wheel_holds_every_module_and_data_file_of_the_tree_and_nothing_stale(installed_bot: Installed) -> None:
    with zipfile.ZipFile(installed_bot.wheel) as wheel:
        names = {name for name in wheel.namelist() if not name.split("/")[0].endswith(".dist-info")}
    tree = tree_files()
    assert not tree - names, f"the wheel lacks files of the tree: {sorted(tree - names)}"
    assert not names - tree, f"the wheel holds files the tree does not (a stale build?): {sorted(names - tree)}"
    assert {name.split("/")[0] for name in names} == set(PACKAGES)


@pytest.mark.timeout(INSTALLED_TIMEOUT_S)
def test_the_installed_modules_are_the_wheels_not_this_tree(installed_bot: Installed, tmp_path: Path) -> None:
    code = ("import importlib, json, pkgutil, jobs, bot, handlers\n"
            "names = [m.name for p in (bot, handlers, jobs) for m in pkgutil.walk_packages(p.__path__, p.__name__ + '.')]\n"
            "skip = ('__main__', 'jobs.store.migrations.')  # the CLI itself; Alembic runs its env and revisions\n"
            "for name in names: any(part in name for part in skip) or importlib.import_module(name)\n"
            "print(json.dumps({'files': [jobs.__file__, bot.__file__], 'modules': len(names)}))")
    done = subprocess.run([str(installed_bot.python), "-c", code], cwd=tmp_path, env=installed_bot.env(tmp_path),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    site = str(installed_bot.venv / "lib")
    assert all(path.startswith(site) for path in found["files"]), found
    assert found["modules"] > 150  # every module imports from the wheel, jobs.endings and its steps included
    assert "jobs.endings" in tree_modules()


def tree_modules() -> set[str]:
    return {p.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for p in tree_files() if p.endswith(".py")}


# ---------------------------------------------------------------- the CLI


@pytest.mark.timeout(INSTALLED_TIMEOUT_S)
def test_help_lists_the_commands(installed_bot: Installed, tmp_path: Path) -> None:
    done = installed_bot.run("--help", home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    for command in ("serve", "console", "plan", "launch", "db", "events"):
        assert command in done.stdout


@pytest.mark.timeout(INSTALLED_TIMEOUT_S)
def test_plan_prices_a_preset_from_the_packaged_data(installed_bot: Installed, tmp_path: Path) -> None:
    done = installed_bot.run("plan", "bert-squad", "spot=yes", "--json", home=tmp_path / "home")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["spec"]["model"] == "bert-large-uncased-whole-word-masking"
    assert plan["spec"]["instance_type"] == "ml.p3.16xlarge" and plan["spec"]["spot"] is True
    assert plan["cost"]["worst_case_usd"] > 0  # prices.json and instances.json came with the wheel
    refused = installed_bot.run("plan", "bert-squad", "hp.no_such_argument=1", home=tmp_path / "home")
    assert refused.returncode == 2 and "no_such_argument" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.timeout(INSTALLED_TIMEOUT_S)
def test_db_upgrade_applies_the_packaged_migrations_on_sqlite_and_postgres(
    installed_bot: Installed, tmp_path: Path, postgres_url: str  # noqa: F811
) -> None:
    for store in (None, postgres_url):
        extra = {"TRAINBOT_DATABASE_URL": store} if store else {}
        upgraded = installed_bot.run("db", "upgrade", home=tmp_path / "home", **extra)
        assert upgraded.returncode == 0, upgraded.stderr
        current = installed_bot.run("db", "current", home=tmp_path / "home", **extra)
        assert current.returncode == 0, current.stderr
        assert f"at revision {head_revision()}, the newest" in current.stdout


# ---------------------------------------------------------------- serve --http, as the image runs it


@pytest.fixture
def slack() -> Iterator[SlackApiServer]:
    server = SlackApiServer().start()
    yield server
    server.stop()


def serve_env(installed: Installed, home: Path, aws: MotoAws, slack: SlackApiServer) -> dict[str, str]:
    return installed.env(
        home, **FAKE_CREDENTIALS,
        AWS_ENDPOINT_URL=aws.endpoint_url, AWS_DEFAULT_REGION=aws.region, AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null", AWS_EC2_METADATA_DISABLED="true",
        SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SECRET, SLACK_API_URL=slack.base_url,
        TRAINBOT_BACKEND="sagemaker", TRAINBOT_ROLE_ARN=aws.role_arn, TRAINBOT_BUCKET=aws.bucket,
    )


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def post_signed(port: int, fields: dict[str, str]) -> tuple[int, str]:
    body = form_body(fields)
    request = urllib.request.Request(f"http://127.0.0.1:{port}/slack/events", data=body.encode(), method="POST",
                                     headers=signed_headers(SECRET, body))
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.status, answer.read().decode()


@pytest.mark.timeout(INSTALLED_TIMEOUT_S)
def test_serve_http_answers_healthz_and_a_signed_train_and_warns_once_of_an_open_workspace(
    installed_bot: Installed, tmp_path: Path, moto_server: MotoAws, slack: SlackApiServer  # noqa: F811
) -> None:
    home, port = tmp_path / "home", free_port()
    home.mkdir()
    process = subprocess.Popen([str(installed_bot.trainbot), "serve", "--http", "--port", str(port)], cwd=home,
                               env=serve_env(installed_bot, home, moto_server, slack),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: healthy(port) or process.poll() is not None, "the installed bot to answer /healthz")
        assert process.poll() is None, process.communicate()[1][-3000:]
        status, body = post_signed(port, slash_command("/train", "bert-squad spot=yes",
                                                       response_url=slack.response_url()))
        assert status == 200
        card = json.loads(body)
        assert card["response_type"] == "ephemeral" and "bert-large-uncased-whole-word-masking" in card["text"]
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-3000:]
    assert err.count("no allow-list and no money cap") == 1, err[-3000:]


# ---------------------------------------------------------------- the console on the local backend


@pytest.mark.timeout(INSTALLED_TIMEOUT_S)
def test_a_console_script_trains_on_the_local_backend(installed_local: Installed, tmp_path: Path) -> None:
    script = tmp_path / "script.txt"
    script.write_text("/train bert-squad hp.max_steps=4\nlaunch\n/jobs\n")
    done = installed_local.run("console", "--script", str(script), home=tmp_path / "home", timeout=900,
                               HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "local: tiny BERT" in done.stdout and "Final report" in done.stdout
    assert "completed" in done.stdout

"""The files a team deploys from, held to what CI proves (no Docker engine runs here, so the Dockerfile is read):
the image installs with the script and lock the suite's installed-wheel tests use, has git, runs as a user of
its own and checks the /healthz the installed bot answers; the manifest and the README agree; the serve warning
fires exactly when nothing limits who may spend what."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from bot.serve import HEALTH_PATH, open_workspace_warning
from jobs.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def dockerfile_runs() -> list[str]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    return [line.split(None, 1)[1] for line in text.splitlines() if line.startswith("RUN ")]


def test_the_image_installs_with_the_ci_script_and_the_bot_lock() -> None:
    runs = dockerfile_runs()
    installs = [run for run in runs if "tools/install.sh" in run]
    assert [re.search(r"tools/install\.sh (\S+) (\S+)( \S+)?", run).groups()[1:] for run in installs] == [  # type: ignore[union-attr]
        ("locks/bot.txt", None), ("locks/bot.txt", " .")]
    assert not any(re.search(r"\bpip3? install\b", run) for run in runs), "the image installs with tools/install.sh only"
    conftest = (ROOT / "tests" / "packaging" / "conftest.py").read_text()
    assert '_install_command(ROOT / ".venv-installed-bot", "bot", ".")' in conftest  # CI's installed bot: same lock, same argument


def test_the_image_has_git_runs_as_its_own_user_and_checks_healthz() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"apt-get install[^\n]*\bgit\b", text)
    user = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert user and user[-1] not in ("root", "0")
    health = re.search(r"HEALTHCHECK[^\n]*\n\s*CMD (.*)", text)
    assert health and f"127.0.0.1:3000{HEALTH_PATH}" in health.group(1)
    assert 'CMD ["serve", "--port", "3000"]' in text


def test_the_manifest_allows_the_org_wide_installs_the_readme_describes() -> None:
    manifest = yaml.safe_load((ROOT / "slack-manifest.yaml").read_text())
    readme = (ROOT / "README.md").read_text()
    assert "org-wide" in readme
    assert manifest["settings"]["org_deploy_enabled"] is True


def test_the_readme_leads_with_the_ordered_path_from_zero_to_bot() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Zero to bot", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^(\d+)\. \*\*([^*]+)\*\*", section, re.MULTILINE)
    assert [int(n) for n, _ in steps] == list(range(1, 8))
    titles = " | ".join(title for _, title in steps).lower()
    for word in ("slack app", "bucket", "roles", "eventbridge", "container", "settings", "under $1"):
        assert word in titles
    assert readme.index("## Zero to bot") < readme.index("## Commands")


@pytest.mark.parametrize(("settings", "warns"), [
    ({}, True),
    ({"trainbot_allowed_users": "U1"}, False),
    ({"trainbot_allowed_channels": "C1"}, False),
    ({"trainbot_max_job_usd": 50}, False),
    ({"trainbot_daily_budget_usd": 500}, False),
    ({"trainbot_admins": "U1"}, True),  # admins limit nothing on their own
])
def test_serve_warns_only_while_nothing_limits_who_spends_what(settings: dict, warns: bool) -> None:
    warning = open_workspace_warning(Settings(**settings))
    assert (warning is not None) == warns
    if warning:
        for name in ("TRAINBOT_ALLOWED_USERS", "TRAINBOT_ALLOWED_CHANNELS", "TRAINBOT_MAX_JOB_USD",
                     "TRAINBOT_DAILY_BUDGET_USD"):
            assert name in warning

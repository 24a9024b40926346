"""Suite-wide guards: no hub downloads, no real Slack or AWS credentials, a throwaway state folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

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
    for name in _LEAKY_VARIABLES:
        os.environ.pop(name, None)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def trainbot_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh TRAINBOT_HOME for one test."""
    home = tmp_path / "trainbot-home"
    home.mkdir()
    monkeypatch.setenv("TRAINBOT_HOME", str(home))
    return home

"""The installed `trainbot` command as a person runs it: a fresh process each time, state in TRAINBOT_HOME."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.environment import outside_env

TRAINBOT = Path(sys.executable).with_name("trainbot")


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment without Slack, AWS or trainbot settings, then TRAINBOT_HOME and ``extra``."""
    env = outside_env()
    env.update(TRAINBOT_HOME=str(home), TRAINBOT_BACKEND="local", HF_HUB_OFFLINE="1", **extra)
    return env


def trainbot(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(TRAINBOT), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def one_sentence(done: subprocess.CompletedProcess[str]) -> str:
    """The refusal's one line on stderr (asserted: one line, no traceback)."""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]

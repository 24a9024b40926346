"""The README's run command, as written, lands in the console (CI runs the README's test command itself).

The install part of the run command is what CI's own set-up already did, so only its `trainbot` part is
run here: first exactly as written with lines piped in (no Slack tokens: the console), then with
`console --script` on a tiny script.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    """The command lines of the README's first code block (comments dropped)."""
    block = re.search(r"```sh\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
    assert block is not None, "README.md has no ```sh block at the top"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def run_part() -> str:
    first = readme_commands()[0]
    assert first.endswith(".venv/bin/trainbot"), f"the README's run command must end in .venv/bin/trainbot: {first}"
    part = first.split("&&")[-1].strip()
    if not (ROOT / part).is_file():
        pytest.fail(f"{part} is missing: run the README's set-up command in {ROOT} first")
    return part


def run(args: list[str], home: Path, *, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TRAINBOT_HOME": str(home), "PYTHONIOENCODING": "utf-8"}
    return subprocess.run(args, input=stdin, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.timeout(90)
def test_the_run_command_as_written_lands_in_the_console(tmp_path: Path) -> None:
    result = run([run_part()], tmp_path / "home", stdin="/jobs\nquit\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:3] == [
        "trainbot console on the local backend; type help, or quit to leave",
        "trainbot> /jobs",
        "No jobs yet. Start one with /train bert-squad spot=yes.",
    ]
    assert result.stderr == ""


@pytest.mark.timeout(90)
def test_the_run_command_takes_a_script(tmp_path: Path) -> None:
    script = tmp_path / "smoke.txt"
    script.write_text("help\n/train distilbert-spot\ncancel\n/jobs\n")
    result = run([run_part(), "console", "--script", str(script)], tmp_path / "home")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "trainbot> /train distilbert-spot\n┌ Plan: distilbert-base-uncased on 1 x ml.p3.2xlarge" in out
    assert "trainbot> cancel\nCancelled: nothing was launched." in out
    assert out.rstrip().endswith("script done: no jobs launched")

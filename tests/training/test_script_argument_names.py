"""jobs/planning/data/script_arguments.json is what tools/list_script_arguments.py reads from the real
dataclasses, on the transformers the lock pins (locks/test.txt; this venv is installed from it) and 4.28.1 (the
4.28.1 image runtime, tests/support/runtimes.py): jobs/ checks hp.NAME against it without importing either, so a
stale file would refuse a real argument or pass a removed one.

The file follows the lock, not the registry: a transformers released after the lock changes nothing until
tools/lock.sh moves the pin, and then these tests name the command that brings the file up to date. A
transformers the file does not list (an install off the lock) is the documented fallback of
jobs/planning/hyperparameters.py: names are checked against the listed lines, and the script's own parser,
which reads the installed TrainingArguments, refuses what that version lacks in one sentence."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jobs.planning.hyperparameters import SCRIPT_ARGUMENTS_FILE, script_arguments
from tests.support.locks import locked_version
from tests.training.conftest import TRAINING_DIR

TOOL = TRAINING_DIR.parent / "tools" / "list_script_arguments.py"
REGENERATE = f"out of date: run `{TOOL.relative_to(TRAINING_DIR.parent)} --write` with this interpreter"


def listed_by(python: Path | str) -> dict[str, Any]:
    done = subprocess.run([str(python), str(TOOL)], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def assert_in_sync(entry: dict[str, Any]) -> None:
    stored = json.loads(SCRIPT_ARGUMENTS_FILE.read_text())
    assert stored["scripts"] == entry["scripts"], REGENERATE
    assert stored["training_arguments"].get(entry["transformers"]) == entry["training_arguments"], REGENERATE


def test_the_file_covers_the_locked_transformers() -> None:
    locked = locked_version("transformers")
    assert locked.startswith("5."), f"locks/test.txt pins transformers {locked}; the scripts are written for 5.x"
    stored = json.loads(SCRIPT_ARGUMENTS_FILE.read_text())
    assert locked in stored["training_arguments"], (
        f"transformers {locked} (locks/test.txt) is not in {SCRIPT_ARGUMENTS_FILE.name}: install from the lock "
        "(tools/install.sh .venv locks/test.txt -e) and run `tools/list_script_arguments.py --write`"
    )


def test_the_file_matches_the_locked_transformers() -> None:
    entry = listed_by(sys.executable)
    locked = locked_version("transformers")
    assert entry["transformers"] == locked, (
        f"this venv has transformers {entry['transformers']}, the lock pins {locked}: "
        "install from the lock (tools/install.sh .venv locks/test.txt -e)"
    )
    assert_in_sync(entry)


def test_a_version_the_file_does_not_list_is_refused_by_the_script_in_one_sentence() -> None:
    """The fallback: whatever transformers is installed, its own parser has the last word on a name."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import script_arguments as s\n"
        "try:\n s.parse_args(['--model_name_or_path', 'm', '--no_such_argument', '1'], prog='train_qa.py')\n"
        "except s.UsageError as exc:\n print(exc)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(TRAINING_DIR)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "unrecognized arguments: --no_such_argument 1"


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first test to ask for the image runtime builds it (pip)
def test_the_file_matches_transformers_4_28(python4: Path) -> None:
    entry = listed_by(python4)
    assert entry["transformers"] == "4.28.1"
    assert_in_sync(entry)


def test_both_lines_are_accepted_and_the_renamed_names_too() -> None:
    stored = json.loads(SCRIPT_ARGUMENTS_FILE.read_text())
    assert sorted(version.split(".")[0] for version in stored["training_arguments"]) == ["4", "5"]
    accepted = script_arguments("text-classification")
    # 4.28 names and their 5.x renames (training/compat.py maps one to the other).
    assert {"evaluation_strategy", "eval_strategy", "no_cuda", "use_cpu", "warmup_ratio"} <= accepted
    assert {"doc_stride", "num_labels", "dataset_revision"} <= accepted
    assert not {"output_dir", "checkpoint_dir", "logging_dir", "push_to_hub", "hub_model_id", "mp_parameters"} & accepted

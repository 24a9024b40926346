"""jobs/planning/data/script_arguments.json is what tools/list_script_arguments.py reads from the real
dataclasses today, on transformers 5 (this venv) and 4.28.1 (the 4.28.1 image runtime, tests/support/runtimes.py): jobs/ checks hp.NAME against
it without importing either, so a stale file would refuse a real argument or pass a removed one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jobs.planning.hyperparameters import SCRIPT_ARGUMENTS_FILE, script_arguments
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


def test_the_file_matches_transformers_5() -> None:
    entry = listed_by(sys.executable)
    assert entry["transformers"].startswith("5.")
    assert_in_sync(entry)


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

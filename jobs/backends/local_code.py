"""What a local job runs: the code copied into its folder (the bot's training/ or a team's own, checked out at
its pinned commit), the hyperparameters it gets, and the metric definitions its log is read with.

SageMaker uploads ``source_dir`` and runs the entry point inside the container's ``/opt/ml`` tree; locally the
job folder is that tree, so the container paths a plan gives a team's script (``--output_dir /opt/ml/model``,
``/opt/ml/checkpoints``) are rewritten to the job's own folders.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.backends.code_sources import CodeMaterializer
from jobs.backends.local_state import JobFolder
from jobs.errors import BackendError
from jobs.planning.metrics import METRIC_DEFINITIONS, MetricScanner

if TYPE_CHECKING:
    from jobs.planning.plan import LaunchPlan

METRIC_DEFINITIONS_FILE = "metric_definitions.json"
_CONTAINER_ROOT = "/opt/ml/"


def copy_code(code: CodeMaterializer, folder: JobFolder, plan: LaunchPlan) -> tuple[Path, dict[str, str]]:
    """Snapshot the job's source into ``folder.code_dir`` (as SageMaker uploads it: editing the source never
    changes a running job); returns the entry point there and the plan's extra environment."""
    source = code.runnable(plan.estimator)
    folder_path, entry = Path(source.source_dir), source.entry_point
    if not (folder_path / entry).is_file():
        raise BackendError(
            f"The training script {entry} was not found in {folder_path}; install trainbot with its training/ folder."
        )
    shutil.copytree(folder_path, folder.code_dir, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
    return folder.code_dir / entry, dict(source.environment)


def job_hyperparameters(
    plan: LaunchPlan, hyperparameters: dict[str, Any], folder: JobFolder, checkpoints: Path
) -> dict[str, Any]:
    """The bot's scripts get ``--checkpoint_dir``; a team's script gets its planned arguments, with the
    container's folders in them pointing at this job's."""
    if not plan.spec.own_code:
        return {**hyperparameters, "checkpoint_dir": str(checkpoints)}
    folders = {
        "/opt/ml/checkpoints": checkpoints,
        "/opt/ml/model": folder.model_dir,
        "/opt/ml/output/data": folder.output_dir,
        "/opt/ml/output": folder.output_dir,
        "/opt/ml/input/config": folder.config_dir,
    }
    return {key: _local_path(value, folders) for key, value in hyperparameters.items()}


def _local_path(value: Any, folders: dict[str, Path]) -> Any:
    if not isinstance(value, str) or not value.startswith(_CONTAINER_ROOT):
        return value
    for container, local in folders.items():  # longest first within each family: output/data before output
        if value == container or value.startswith(container + "/"):
            return str(local) + value[len(container):]
    return value


def save_metric_definitions(folder: JobFolder, plan: LaunchPlan) -> None:
    """The plan's definitions beside the job's log, so every later reader scrapes it the same way."""
    definitions = plan.estimator.get("metric_definitions") or METRIC_DEFINITIONS
    (folder.path / METRIC_DEFINITIONS_FILE).write_text(json.dumps(definitions, indent=1))


def metric_scanner(folder: JobFolder) -> MetricScanner:
    """The scanner for the job's own definitions (the defaults for a job launched before they were saved)."""
    try:
        definitions = json.loads((folder.path / METRIC_DEFINITIONS_FILE).read_text())
        return MetricScanner.of(definitions)
    except (OSError, ValueError, KeyError, TypeError, re.error):
        return MetricScanner.of()

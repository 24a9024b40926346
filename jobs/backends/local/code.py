"""What a local job runs: its source folder (the bot's training/ or a team's own, checked out at its pinned
commit), the hyperparameters it gets, and the metric definitions its log is read with.

SageMaker uploads ``source_dir`` and runs the entry point inside the container's ``/opt/ml`` tree; locally the
job folder is that tree, so the container paths a plan gives a team's script (``--output_dir /opt/ml/model``,
``/opt/ml/checkpoints``) are rewritten to the job's own folders.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.backends.code_sources import CodeMaterializer, RunnableSource
from jobs.backends.local.state import JobFolder
from jobs.errors import BackendError
from jobs.planning.metrics import METRIC_DEFINITIONS

if TYPE_CHECKING:
    from jobs.planning.plan import LaunchPlan

METRIC_DEFINITIONS_FILE = "metric_definitions.json"
_CONTAINER_ROOT = "/opt/ml/"


def runnable_source(code: CodeMaterializer, plan: LaunchPlan) -> RunnableSource:
    """The folder to package as the job's ``sourcedir.tar.gz`` (the bot's training/, or a team's code checked
    out at its pinned commit), the entry point in it, and the environment the plan adds (the spot entry's)."""
    source = code.runnable(plan.estimator)
    if not (Path(source.source_dir) / source.entry_point).is_file():
        raise BackendError(
            f"The training script {source.entry_point} was not found in {source.source_dir}; "
            "install trainbot with its training/ folder."
        )
    return source


def job_hyperparameters(
    plan: LaunchPlan, hyperparameters: dict[str, Any], folder: JobFolder, checkpoints: Path
) -> dict[str, Any]:
    """The bot's scripts get ``--checkpoint_dir``; a team's script gets its planned arguments, with the
    container's folders in them pointing at this job's."""
    if not plan.spec.own_code:
        return {**hyperparameters, "checkpoint_dir": str(checkpoints)}
    return {key: _local_path(value, folder, checkpoints) for key, value in hyperparameters.items()}


def _local_path(value: Any, folder: JobFolder, checkpoints: Path) -> Any:
    """``/opt/ml/X`` -> the job folder's X (it is an /opt/ml-shaped tree); ``/opt/ml/checkpoints`` -> the
    lineage's checkpoint folder, which every attempt shares, as SageMaker copies checkpoint_s3_uri back."""
    if not isinstance(value, str) or not value.startswith(_CONTAINER_ROOT):
        return value
    rest = value[len(_CONTAINER_ROOT):]
    if rest == "checkpoints" or rest.startswith("checkpoints/"):
        return str(checkpoints) + rest[len("checkpoints"):]
    return str(folder.path / rest)


def save_metric_definitions(folder: JobFolder, plan: LaunchPlan) -> None:
    """The plan's definitions beside the job's log, so every later reader scrapes it the same way."""
    definitions = plan.estimator.get("metric_definitions") or METRIC_DEFINITIONS
    (folder.path / METRIC_DEFINITIONS_FILE).write_text(json.dumps(definitions, indent=1))


def metric_definitions(folder: JobFolder) -> list[dict[str, str]] | None:
    """The job's own definitions; None (the defaults) for a job launched before they were saved."""
    definitions = folder.read_json(METRIC_DEFINITIONS_FILE)
    return definitions if isinstance(definitions, list) else None

"""trainbot's entry for a managed-spot job that runs a team's own script (shipped beside that script).

The plan points the script's ``--output_dir`` at ``/opt/ml/checkpoints``: SageMaker syncs that folder with the
lineage's ``checkpoint_s3_uri`` and copies it back after an interruption, so a Trainer-based script (the
article's ``run_qa.py`` among them) finds its newest ``checkpoint-N`` there and resumes by itself. What the
script saves there when it ends is the final model; SageMaker uploads only ``/opt/ml/model``, so this entry
copies it there afterwards.

The script runs in this process (``runpy``), not as a child: under torchrun or MPI every rank is this process,
with the launcher's environment, exactly as if the script had been the entry point. Standard library only.
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
from pathlib import Path

USER_ENTRY_ENV = "TRAINBOT_USER_ENTRY"
DEFAULT_OUTPUT_DIR = "/opt/ml/checkpoints"
DEFAULT_MODEL_DIR = "/opt/ml/model"
_RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def output_dir(argv: list[str]) -> Path:
    """The script's ``--output_dir`` (``--output_dir X`` or ``--output_dir=X``)."""
    for index, arg in enumerate(argv):
        if arg == "--output_dir" and index + 1 < len(argv):
            return Path(argv[index + 1])
        if arg.startswith("--output_dir="):
            return Path(arg.split("=", 1)[1])
    return Path(DEFAULT_OUTPUT_DIR)


def is_rank_zero() -> bool:
    for name in _RANK_VARIABLES:
        value = os.environ.get(name)
        if value is not None and value.strip().isdigit():
            return int(value) == 0
    return True


def copy_final_model(source: Path, model_dir: Path) -> list[str]:
    """Everything the script left at the top of ``source`` except its ``checkpoint-N`` folders."""
    copied: list[str] = []
    if not source.is_dir() or source.resolve() == model_dir.resolve():
        return copied
    model_dir.mkdir(parents=True, exist_ok=True)
    for item in sorted(source.iterdir()):
        if item.name.startswith("checkpoint-"):
            continue
        target = model_dir / item.name
        if item.is_dir():
            shutil.copytree(item, target, dirs_exist_ok=True)
        else:
            shutil.copy2(item, target)
        copied.append(item.name)
    return copied


def main() -> int:
    script_name = os.environ.get(USER_ENTRY_ENV, "")
    here = Path(__file__).resolve().parent
    script = (here / script_name).resolve()
    if not script_name or not script.is_file() or here not in script.parents:
        print(f"[trainbot] {USER_ENTRY_ENV}={script_name!r} names no script beside {here}", flush=True)
        return 2
    args = sys.argv[1:]
    sys.argv = [str(script), *args]
    sys.path[0] = str(script.parent)  # the script imports its siblings, as when it is the entry point
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    if is_rank_zero():
        model_dir = Path(os.environ.get("SM_MODEL_DIR", DEFAULT_MODEL_DIR))
        copied = copy_final_model(output_dir(args), model_dir)
        print(f"[trainbot] copied the final model ({len(copied)} files and folders) to {model_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

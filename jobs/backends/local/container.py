"""A local job laid out and started the way SageMaker's Hugging Face training image does it.

Each job folder is an `/opt/ml`-shaped tree (SAGEMAKER_BASE_DIR points the toolkit at it, so no
root-owned /opt/ml is needed and two jobs never share one): `input/config/hyperparameters.json` (values
JSON-encoded, as the SDK writes them), `resourceconfig.json`, `inputdataconfig.json`, the channels under
`input/data/<channel>`, `model/`, `output/data/`, `code/`, and the code as the `sourcedir.tar.gz` the SDK
uploads. Two runners:

- **toolkit** (Linux, `sagemaker-training` + `sagemaker-pytorch-training` installed): `train` with
  `SAGEMAKER_TRAINING_MODULE=sagemaker_pytorch_container.training:main`, as the image's entry point runs
  it: the toolkit unpacks the code, installs `requirements.txt`, turns the hyperparameters into
  arguments and starts the script. What a CPU cannot do (smdistributed data or model parallel, MPI) is
  swapped for the toolkit's own PyTorch launcher (torchrun, gloo).
- **direct** (no toolkit: a Mac, or a venv without it): the same semantics by hand: the code unpacked
  from the same archive, the hyperparameters as `--key value` arguments, the SM_* variables, the same
  channels; one process or torchrun.

Either way the job runs under `wrapper.py` (records the exit code) in its own process group.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jobs.backends.archives import ArchiveLimits, is_debris, pack_tree, unpack_file
from jobs.backends.local.runner import training_command, wrapper_command
from jobs.backends.local.state import JobFolder
from jobs.errors import BackendError

TOOLKIT = "toolkit"
DIRECT = "direct"
RUNNER_LABELS = {
    TOOLKIT: "runner: sagemaker-training toolkit (the training image's `train`)",
    DIRECT: "runner: direct (sagemaker-training is not installed here)",
}
#: What the Hugging Face PyTorch training image sets, so `train` runs the PyTorch toolkit.
TRAINING_MODULE = "sagemaker_pytorch_container.training:main"
HOST = "algo-1"
CHANNEL_CONFIG = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}


def toolkit_available(python: str, *, own: bool = True) -> bool:
    """Whether `python`'s environment can run the training toolkit: Linux (it uses inotify), its `train`
    console script beside `python`, and (`own`: the bot's interpreter) the PyTorch toolkit importable. An
    image runtime (runtime.py) is built with both toolkits."""
    if not sys.platform.startswith("linux"):
        return False
    if not (Path(python).parent / "train").is_file():
        return False
    if not own:
        return True
    try:
        return importlib.util.find_spec("sagemaker_pytorch_container") is not None
    except (ImportError, ValueError):
        return False


def write_sourcedir(source_dir: Path, archive: Path, limits: ArchiveLimits | None = None) -> None:
    """`sourcedir.tar.gz` as the SDK's `create_tar_file` makes it: every entry of source_dir at the
    archive's root (debris left out: caches and leftovers are this machine's, not the code). A link is refused, never
    followed, and the packed code has the caps of own code."""
    pack_tree(source_dir, archive, limits or ArchiveLimits(), what="The code", skip=is_debris)


def unpack_sourcedir(archive: Path, code_dir: Path, limits: ArchiveLimits | None = None) -> None:
    """The direct runner's stand-in for the toolkit's download-and-extract of the code: every member
    checked (jobs.backends.archives), never `extractall`."""
    unpack_file(archive, code_dir, limits or ArchiveLimits(), what="The job's sourcedir.tar.gz")


def copy_channel(source: Path, dest: Path, *, keep_free_bytes: int) -> None:
    """``source`` copied to ``dest``, its links copied as links, never followed (a link in a data folder that
    leads out of it reaches nothing more than the read-only mount did); refused when the copy would leave the
    disk with less than ``keep_free_bytes`` (the reserve the job's limits keep: the job still writes its model
    and checkpoints)."""
    size = sum(entry.stat(follow_symlinks=False).st_size for entry in _entries(source))
    dest.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(dest.parent).free
    if size > free - keep_free_bytes:
        raise BackendError(
            f"The channel {source} holds {size / 1e9:.1f} GB and the job's folder has {free / 1e9:.1f} GB free, "
            f"of which {keep_free_bytes >> 20} MB stay free (TRAINBOT_LOCAL_DISK_FREE_MB): a local job copies each "
            "channel, as SageMaker's File mode does, so free some room or use less data."
        )
    shutil.copytree(source, dest, symlinks=True)


def _entries(folder: Path) -> list[os.DirEntry[str]]:
    found: list[os.DirEntry[str]] = []
    pending = [str(folder)]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                found.append(entry)
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
    return found


def write_container_config(
    folder: JobFolder,
    *,
    hyperparameters: Mapping[str, Any],
    channels: Mapping[str, Path],
    entry_point: str,
    instance_type: str,
    processes: int,
    keep_free_bytes: int,
) -> None:
    """input/config/*.json and input/data/<channel>, as SageMaker writes them into the container before it
    starts. Each channel is a copy, as File mode downloads it: the job may write beside its data (datasets
    keeps its map() cache there) and the folder it came from stays as it was. A copy leaves the disk
    ``keep_free_bytes`` free."""
    folder.config_dir.mkdir(parents=True, exist_ok=True)
    folder.input_data_dir.mkdir(parents=True, exist_ok=True)
    for name, path in channels.items():
        copy = folder.input_data_dir / name
        if not copy.exists():
            copy_channel(path.resolve(), copy, keep_free_bytes=keep_free_bytes)
    sagemaker_hps: dict[str, Any] = {
        "sagemaker_program": entry_point,
        "sagemaker_submit_directory": str(folder.sourcedir_path),
        "sagemaker_container_log_level": 20,
        "sagemaker_job_name": folder.name,
        "sagemaker_region": "local",
    }
    if processes > 1:  # the CPU stand-in for smddp / MPI / torch_distributed: the toolkit's torchrun
        sagemaker_hps["sagemaker_torch_distributed_enabled"] = True
        sagemaker_hps["sagemaker_mpi_num_of_processes_per_host"] = processes
    encoded = {key: json.dumps(value) for key, value in {**hyperparameters, **sagemaker_hps}.items()}
    _write_json(folder.config_dir / "hyperparameters.json", encoded)
    group = {"instance_group_name": "homogeneousCluster", "instance_type": instance_type, "hosts": [HOST]}
    _write_json(
        folder.config_dir / "resourceconfig.json",
        {
            "current_host": HOST,
            "current_instance_type": instance_type,
            "current_group_name": "homogeneousCluster",
            "hosts": [HOST],
            "instance_groups": [group],
            "network_interface_name": "lo",
        },
    )
    _write_json(folder.config_dir / "inputdataconfig.json", {name: dict(CHANNEL_CONFIG) for name in channels})


def toolkit_command(python: str, folder: JobFolder) -> list[str]:
    """The wrapper around the image's entry point, `train` from `python`'s environment."""
    return [*wrapper_command(folder.exit_path), str(Path(python).parent / "train")]


def toolkit_environment(base: dict[str, str], folder: JobFolder, *, threads: int) -> dict[str, str]:
    """What the image sets before `train`, pointed at this job's tree; `threads` per process
    (scaling.threads_per_process)."""
    env = dict(base)
    env.update(
        SAGEMAKER_BASE_DIR=str(folder.path),
        SAGEMAKER_TRAINING_MODULE=TRAINING_MODULE,
        SM_STUDIO_LOCAL_MODE="true",  # no wait for the other hosts' DNS names: there is one host
        TRAINING_JOB_NAME=folder.name,
        PYTHONUNBUFFERED="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS=str(threads),
        # torchrun's rendezvous port: a free one per job, or two local jobs would meet on 29500.
        PET_MASTER_PORT=str(_free_port()),
    )
    return env


def direct_command(python: str, folder: JobFolder, entry_point: str, args: list[str], processes: int) -> list[str]:
    return training_command(
        python, folder.code_dir / entry_point, args, processes=processes, exit_file=folder.exit_path
    )


def direct_environment(
    base: dict[str, str],
    folder: JobFolder,
    *,
    hyperparameters: Mapping[str, Any],
    channels: Mapping[str, Path],
    entry_point: str,
    threads: int,
) -> dict[str, str]:
    """SageMaker's training-toolkit variables for one host (`algo-1`), set by hand; `threads` per process
    (scaling.threads_per_process)."""
    cpus = os.cpu_count() or 1
    channel_dirs = {name: str(folder.input_data_dir / name) for name in channels}
    hps = dict(hyperparameters)
    training_env = {
        "job_name": folder.name,
        "current_host": HOST,
        "hosts": [HOST],
        "channel_input_dirs": channel_dirs,
        "hyperparameters": hps,
        "model_dir": str(folder.model_dir),
        "output_data_dir": str(folder.output_dir),
        "num_gpus": 0,
        "num_cpus": cpus,
        "user_entry_point": entry_point,
        "module_dir": str(folder.code_dir),
    }
    env = dict(base)
    env.update(
        {
            "SM_MODEL_DIR": str(folder.model_dir),
            "SM_OUTPUT_DATA_DIR": str(folder.output_dir),
            "SM_OUTPUT_DIR": str(folder.output_dir.parent),
            "SM_INPUT_DIR": str(folder.config_dir.parent),
            "SM_INPUT_CONFIG_DIR": str(folder.config_dir),
            "SM_CHANNELS": json.dumps(sorted(channel_dirs)),
            "SM_HPS": json.dumps(hps),
            "SM_NUM_GPUS": "0",
            "SM_NUM_CPUS": str(cpus),
            "SM_CURRENT_HOST": HOST,
            "SM_HOSTS": json.dumps([HOST]),
            "SM_USER_ENTRY_POINT": entry_point,
            "SM_MODULE_DIR": str(folder.code_dir),
            "SM_TRAINING_ENV": json.dumps(training_env),
            "TRAINING_JOB_NAME": folder.name,
            "PYTHONUNBUFFERED": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": str(threads),
        }
    )
    env.update({f"SM_CHANNEL_{name.upper()}": path for name, path in channel_dirs.items()})
    env.update({f"SM_HP_{key.upper()}": hp_text(value) for key, value in hps.items()})
    return env


def hp_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _write_json(path: Path, payload: Any) -> None:
    path.write_text(json.dumps(payload, indent=1))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])

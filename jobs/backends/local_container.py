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

Either way the job runs under `local_wrapper.py` (records the exit code) in its own process group.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import sys
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jobs.backends.local_runner import WRAPPER, training_command
from jobs.backends.local_state import JobFolder

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


def toolkit_available(python: str) -> bool:
    """Whether `python`'s environment can run the training toolkit: Linux (it uses inotify), its `train`
    console script beside `python`, and the PyTorch toolkit importable."""
    if not sys.platform.startswith("linux"):
        return False
    if not (Path(python).parent / "train").is_file():
        return False
    try:
        return importlib.util.find_spec("sagemaker_pytorch_container") is not None
    except (ImportError, ValueError):
        return False


def write_sourcedir(source_dir: Path, archive: Path) -> None:
    """`sourcedir.tar.gz` as the SDK's `create_tar_file` makes it: every entry of source_dir at the
    archive's root (caches left out: they are this machine's, not the code)."""

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        name = Path(info.name).name
        return None if name == "__pycache__" or name.endswith(".pyc") else info

    with tarfile.open(archive, mode="w:gz", dereference=True) as tar:
        for entry in sorted(source_dir.iterdir()):
            if keep(tar.gettarinfo(str(entry), arcname=entry.name)) is not None:
                tar.add(str(entry), arcname=entry.name, filter=keep)


def unpack_sourcedir(archive: Path, code_dir: Path) -> None:
    """The direct runner's stand-in for the toolkit's download-and-extract of the code."""
    code_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, mode="r:gz") as tar:
        tar.extractall(code_dir, filter="data")


def write_container_config(
    folder: JobFolder,
    *,
    hyperparameters: Mapping[str, Any],
    channels: Mapping[str, Path],
    entry_point: str,
    instance_type: str,
    processes: int,
) -> None:
    """input/config/*.json and input/data/<channel> (a link to the channel's folder), as SageMaker
    writes them into the container before it starts."""
    folder.config_dir.mkdir(parents=True, exist_ok=True)
    folder.input_data_dir.mkdir(parents=True, exist_ok=True)
    for name, path in channels.items():
        link = folder.input_data_dir / name
        if not link.exists():
            link.symlink_to(path.resolve(), target_is_directory=True)
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
    return [python, str(WRAPPER), str(folder.exit_path), "--", str(Path(python).parent / "train")]


def toolkit_environment(base: dict[str, str], folder: JobFolder, *, processes: int) -> dict[str, str]:
    """What the image sets before `train`, pointed at this job's tree."""
    cpus = os.cpu_count() or 1
    env = dict(base)
    env.update(
        SAGEMAKER_BASE_DIR=str(folder.path),
        SAGEMAKER_TRAINING_MODULE=TRAINING_MODULE,
        SM_STUDIO_LOCAL_MODE="true",  # no wait for the other hosts' DNS names: there is one host
        TRAINING_JOB_NAME=folder.name,
        PYTHONUNBUFFERED="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS=str(max(1, cpus // processes)),
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
    processes: int,
) -> dict[str, str]:
    """SageMaker's training-toolkit variables for one host (`algo-1`), set by hand."""
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
            # One BLAS thread pool per process, or N processes fight over the same cores.
            "OMP_NUM_THREADS": str(max(1, cpus // processes)),
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

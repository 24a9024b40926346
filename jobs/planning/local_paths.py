"""Which files a local job may read: a ``model=``, a data channel (``train_data=``, ``test_data=``,
``validation_data=``, ``channel.NAME=``), ``dataset=`` or ``dataset_revision=`` (or a hyperparameter that takes a
file, such as ``hp.tokenizer_name``; for a team's own script, any ``hp.*``) that names a filesystem path must lie,
once ``~``, ``..`` and symlinks are resolved, under TRAINBOT_HOME/data or a folder of TRAINBOT_LOCAL_DATA_DIRS.

A local job is a process of the bot's own user on the bot's machine: without this rule anyone who may
type ``/train`` could hand it any folder that user can read (``train_data=/home/ops/.aws``). On SageMaker
the same words name places inside the job's container, so the rule is the local backend's only.

What counts as a path: an absolute one, ``~...``, ``.``/``..`` or a ``.``/``..`` component anywhere,
``file:`` URLs, more than one ``/`` where the value would otherwise be a hub id (hub ids are ``name`` or
``owner/name``), and any relative name that exists from the bot's working directory. URLs of other schemes
(``s3://``) and JSON values are not paths.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

from jobs.errors import SpecError
from jobs.planning.hyperparameters import CONTAINER_ROOT, show
from jobs.planning.spec import CHANNEL_KEYS, JobSpec, dataset_hyperparameters
from jobs.settings import Settings

LOCAL_BACKEND = "local"
#: Hyperparameters the scripts or transformers read as a file or folder (a hub id for tokenizer_name).
PATH_HYPERPARAMETERS = ("tokenizer_name", "deepspeed", "fsdp_config", "accelerator_config")


def check_local_paths(spec: JobSpec, settings: Settings, *, backend: str) -> None:
    """On the local backend, SpecError (one sentence) for the first path outside the folders allowed."""
    if backend != LOCAL_BACKEND:
        return
    roots = [root.resolve() for root in settings.local_data_roots]
    for label, value, hub_id in _named_values(spec):
        try:
            path = filesystem_path(value, hub_id=hub_id)
        except (OSError, RuntimeError):  # a name too long, a symlink loop: nothing a job could read either
            path = Path(os.sep, "unresolvable")
        if path is not None and not any(path.is_relative_to(root) for root in roots):
            raise SpecError(
                f"{label}={show(value)} is outside the folders local jobs may read: put it under "
                f"{roots[0]} (TRAINBOT_HOME/data) or a folder listed in TRAINBOT_LOCAL_DATA_DIRS."
            )


def _named_values(spec: JobSpec) -> Iterator[tuple[str, str, bool]]:
    """(what the person typed, the value, whether it could be a hub id) for every value read as a path."""
    if spec.model is not None:
        yield "model", spec.model, True
    for name, uri in spec.input_channels().items():
        yield CHANNEL_KEYS.get(name, f"channel.{name}"), uri, False
    if spec.train_data is None and spec.dataset is not None:  # with train_data the dataset is a label ("custom")
        for part in dataset_hyperparameters(spec.dataset).values():
            yield "dataset", part, True
    if spec.dataset_revision is not None:
        yield "dataset_revision", spec.dataset_revision, False
    # The bot's scripts read files from the arguments named; a team's script may read one from any.
    names = list(spec.hyperparameters) if spec.own_code else PATH_HYPERPARAMETERS
    for name in names:
        value = spec.hyperparameters.get(name)
        if isinstance(value, str) and not (spec.own_code and _in_container(value)):
            yield f"hp.{name}", value, True


def _in_container(value: str) -> bool:
    """A folder of SageMaker's container (``/opt/ml/model``), which the local backend gives the job in its own
    folder (jobs/backends/local/code.py), never a path of this machine; one with ``..`` in it is read as a path."""
    return value.startswith(CONTAINER_ROOT) and ".." not in Path(value).parts


def filesystem_path(value: str, *, hub_id: bool = True, cwd: Path | None = None) -> Path | None:
    """The resolved path ``value`` names (relative ones from ``cwd``, default the working directory), or
    None when it names none: a hub id, an ``s3://`` (or other) URL, a JSON value."""
    text = value.strip()
    if not text or text.startswith(("{", "[")):
        return None
    if text.lower().startswith("file:"):
        text = urlparse(text).path or "."
    elif "://" in text:
        return None
    base = cwd or Path.cwd()
    if not _looks_like_path(text, hub_id) and not _exists(base / text):
        return None
    path = Path(os.path.expanduser(text))
    return (path if path.is_absolute() else base / path).resolve()


def _looks_like_path(text: str, hub_id: bool) -> bool:
    parts = text.split("/")
    return (
        text.startswith(("/", "~"))
        or any(part in (".", "..") for part in parts)
        or (hub_id and len(parts) > 2)
    )


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # e.g. a component longer than the filesystem allows: not an existing path
        return False

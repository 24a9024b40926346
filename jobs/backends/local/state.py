"""A local job's folder, its persisted state, and what its log says.

Everything the bot knows about a local job lives in `home/local-jobs/<name>/state.json`, written
atomically under a per-job file lock, so any bot process (a restarted one, the CLI next to the
watcher) reads the same truth. The wrapper's `exit.json` is the only file written by the job side.
Every file of the folder is read through job_files (no link followed, regular files only, a size cap): an
unsandboxed job could have replaced any of them, and a sandboxed one writes beside them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from jobs.backends.local.job_files import (
    SMALL_FILE_BYTES,
    list_job_folder,
    open_job_file,
    read_job_file,
    read_job_json,
    tail_job_file,
)
from jobs.errors import BadInput
from jobs.file_lock import exclusive_lock
from jobs.planning.patterns import capped, linear
from jobs.planning.plan import BUCKET_PLACEHOLDER
from jobs.records import Progress

_DATETIME_FIELDS = {
    "created_at",
    "stop_requested_at",
    "capacity_taken_at",
    "runtime_exceeded_at",
    "killed_at",
    "ended_at",
    "last_modified",
}
_TAIL_BYTES = 256 * 1024
_STATE_BYTES = 16 << 20  # state.json: the bot's own record, never near this
MAX_REASON_CHARS = 1000  # a failure reason is one line of the log: as long as a person reads
#: A line that names an error (run over a job's own output: RE2, linear time).
_ERROR_LINE = linear(r"(?i)(^|\s|: )(error|[A-Za-z_][\w.]*(Error|Exception))\b:?")
# Lines that are torchrun's, the training toolkit's or the wrapper's own report of a worker's failure, not
# the cause (the toolkit ends every failure with "ERROR Encountered exit_code 1" and the command it ran).
_LAUNCHER_NOISE = (
    "ChildFailedError",
    "torch.distributed.elastic",
    "[trainbot]",
    "error_file:",
    "traceback :",
    "sagemaker-training-toolkit",
    'Command "',
)


@dataclass
class JobState:
    """The persisted record of one local job (JSON in its folder)."""

    name: str
    created_at: datetime
    last_modified: datetime
    instance_type: str = ""
    instance_count: int = 1
    spot: bool = False
    task: str = ""
    runner: str = ""  # "toolkit" or "direct" (container.py)
    isolation: str = ""  # "bwrap" when the job runs in the sandbox (sandbox.py), "" when it does not
    processes: int = 1
    offline: bool = True
    note: str = ""
    model_label: str = ""  # what trains: "tiny BERT" offline, else the spec's model (scaling.LocalRun)
    checkpoint_dir: str = ""
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    max_run: int | None = None
    pid: int | None = None
    status: str = "InProgress"
    secondary_status: str = "Starting"
    transitions: list[dict[str, str | None]] = field(default_factory=list)
    stop_requested_at: datetime | None = None
    capacity_taken_at: datetime | None = None
    runtime_exceeded_at: datetime | None = None
    killed_at: datetime | None = None
    exit_code: int | None = None
    wall_seconds: float | None = None
    ended_at: datetime | None = None
    failure_reason: str = ""
    limits: dict[str, int] = field(default_factory=dict)  # what it ran with (limits.JobLimits.figures)
    cgroups: list[str] = field(default_factory=list)  # its cgroup folders (limits.py), while they exist
    limit_hit: str = ""  # the limit the wrapper saw it go past ("memory", "processes", "disk", "disk-free")
    setup_message: str = ""  # the job's first step, as far as it got (its [setup] lines: the runtime build)

    def to_json(self) -> str:
        raw = asdict(self)
        for key in _DATETIME_FIELDS:
            raw[key] = raw[key].isoformat() if raw[key] is not None else None
        return json.dumps(raw, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> JobState:
        raw = json.loads(text)
        known = {f.name for f in fields(cls)}
        raw = {k: v for k, v in raw.items() if k in known}  # a newer bot's extra fields are ignored
        for key in _DATETIME_FIELDS & raw.keys():
            raw[key] = datetime.fromisoformat(raw[key]) if raw[key] else None
        return cls(**raw)

    def signalled_at(self) -> datetime | None:
        """When the bot first asked the job to end (stop, capacity, max_run), if it did."""
        asks = [t for t in (self.stop_requested_at, self.capacity_taken_at, self.runtime_exceeded_at) if t]
        return min(asks) if asks else None


class JobFolder:
    """The SageMaker layout (the folder is the job's SAGEMAKER_BASE_DIR, its /opt/ml): code/, model/
    (SM_MODEL_DIR), output/data/ (SM_OUTPUT_DATA_DIR), input/config/, input/data/<channel>,
    sourcedir.tar.gz, logs/, plus state.json and the wrapper's exit.json; env/ (the job's Python
    environment) and scratch/ (its HOME). In the sandbox only code/, model/, output/, env/ and scratch/
    are writable: the bot's files here (state, log, exit code) are not the job's to replace."""

    def __init__(self, jobs_root: Path, name: str) -> None:
        self.root = jobs_root
        self.name = name
        self.path = jobs_root / name
        self.state_path = self.path / "state.json"
        self.exit_path = self.path / "exit.json"
        self.log_path = self.path / "logs" / "train.log"
        self.code_dir = self.path / "code"
        self.model_dir = self.path / "model"
        self.output_dir = self.path / "output" / "data"
        self.config_dir = self.path / "input" / "config"
        self.input_data_dir = self.path / "input" / "data"
        self.sourcedir_path = self.path / "sourcedir.tar.gz"
        self.env_dir = self.path / "env"  # the job's own Python environment (job_python.py)
        self.scratch_dir = self.path / "scratch"  # HOME and temporary files inside the sandbox

    def exists(self) -> bool:
        return self.state_path.is_file()

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        # The lock lives outside the job folder so a failed launch can remove the folder under it.
        with exclusive_lock(self.root / ".locks" / f"{self.name}.lock"):
            yield

    def load(self) -> JobState:
        return JobState.from_json(read_job_file(self.root, f"{self.name}/state.json", max_bytes=_STATE_BYTES).decode())

    def save(self, state: JobState) -> None:
        tmp = self.state_path.with_name("state.json.tmp")
        tmp.write_text(state.to_json())
        os.replace(tmp, self.state_path)

    def read_exit(self) -> dict[str, Any] | None:
        data = self.read_json("exit.json")
        return data if isinstance(data, dict) and isinstance(data.get("exit_code"), int) else None

    def read_json(self, relative: str, *, max_bytes: int = SMALL_FILE_BYTES) -> Any:
        """The JSON of a file in the folder (job_files.read_job_json); None when it cannot be read safely."""
        return read_job_json(self.root, f"{self.name}/{relative}", max_bytes=max_bytes)

    def log_tail(self, lines: int) -> list[str]:
        return tail_lines(self.log_path, lines, anchor=self.root)

    def log_mtime(self) -> float | None:
        try:
            with open_job_file(self.root, f"{self.name}/logs/train.log") as log:
                return log.mtime
        except OSError:
            return None

    def entries(self, relative: str) -> dict[str, os.stat_result]:
        """{name: lstat} of a folder of the job's, reached without following a link."""
        return list_job_folder(self.root, f"{self.name}/{relative}")


def tail_lines(path: Path, lines: int, *, anchor: Path | None = None) -> list[str]:
    """The last `lines` lines of a log (reads at most the last 256 KiB), opened from ``anchor`` (a folder of the
    bot's; the log's own folder by default) without following a link, and only when it is a regular file."""
    if lines <= 0:
        return []
    anchor = anchor or path.parent
    data = tail_job_file(anchor, path.relative_to(anchor).as_posix(), _TAIL_BYTES)
    text = data.decode("utf-8", errors="replace").replace("\r", "\n")
    return [line for line in text.splitlines() if line.strip()][-lines:]


def last_error_line(lines: list[str]) -> str:
    """The line that best says why the script failed: the last error/exception line that is not the
    launcher's own report, else the last line with text."""
    for line in reversed(lines):
        text = capped(line.strip())
        if text and _ERROR_LINE.search(text) and not any(noise in text for noise in _LAUNCHER_NOISE):
            return text[:MAX_REASON_CHARS]
    meaningful = [line.strip() for line in lines if line.strip() and "[trainbot]" not in line]
    return meaningful[-1][:MAX_REASON_CHARS] if meaningful else "the training process wrote no output"


def parse_progress(line: str) -> dict[str, float | int] | None:
    """`[progress] step=S max_steps=M loss=L eta_s=E` -> {"step": S, "max_steps": M, ...}."""
    if not line.startswith("[progress]"):
        return None
    out: dict[str, float | int] = {}
    for token in line.split()[1:]:
        key, sep, value = token.partition("=")
        if not sep:
            continue
        try:
            out[key] = int(value) if key in ("step", "max_steps") else float(value)
        except ValueError:
            continue
    return out if "step" in out else None


def last_progress(lines: list[str]) -> dict[str, float | int] | None:
    for line in reversed(lines):
        parsed = parse_progress(line.strip())
        if parsed is not None:
            return parsed
    return None


def as_progress(line: dict[str, float | int], folder: JobFolder) -> Progress:
    """A parsed `[progress]` line as the port's record; logged when the log file last changed."""
    mtime = folder.log_mtime()
    at = datetime.fromtimestamp(mtime, tz=timezone.utc) if mtime is not None else None
    step, total = line.get("step"), line.get("max_steps")
    loss, eta = line.get("loss"), line.get("eta_s")
    return Progress(
        step=int(step) if step is not None else None,
        max_steps=int(total) if total else None,
        loss=float(loss) if loss is not None else None,
        eta_seconds=float(eta) if eta is not None else None,
        at=at,
    )


def checkpoint_folder(home: Path, checkpoint_uri: str) -> Path:
    """The local folder standing in for `checkpoint_uri`: home/checkpoints/<bucket>/<key>, or
    home/checkpoints/<key> for a plan made without TRAINBOT_BUCKET (a local bot needs none). Attempts of
    one lineage share it; two lineages never do."""
    parsed = urlparse(checkpoint_uri)
    bucket = "" if parsed.netloc == BUCKET_PLACEHOLDER else parsed.netloc
    parts = [_safe_part(p) for p in f"{bucket}/{parsed.path}".split("/") if p not in ("", ".", "..")]
    if not parts:
        raise BadInput(f"Checkpoint URI {checkpoint_uri!r} names no bucket or prefix; use s3://BUCKET/PREFIX.")
    folder = home.joinpath("checkpoints", *parts)
    if bucket != parsed.netloc:  # a lineage launched before this rule resumes from where it saved
        before = home.joinpath("checkpoints", _safe_part(parsed.netloc), *parts)
        return before if before.is_dir() else folder
    return folder


def _safe_part(part: str) -> str:
    # A fixed character class over the bot's own URI: linear in Python's re too.
    return re.sub(r"[^A-Za-z0-9._=+@-]", "_", part)

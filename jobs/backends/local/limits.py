"""What one local job may take of the machine: memory (its /tmp and /dev/shm included), processes, a share of the
CPU, and disk for its folders; and the one sentence a job that went past one of them ends with.

Memory, processes and CPU are a cgroup of the job's own, made here before the job starts, under the bot's own
cgroup (a child of what the machine gave the bot, never beside it): cgroup v2 where this machine's unified
hierarchy has the memory, pids and cpu controllers and the bot's cgroup may hand them down, else the v1
hierarchies of those controllers. The wrapper (wrapper.py, outside the sandbox) puts the job into it, reads after
the job whether the kernel had to stop it (an OOM kill, a refused fork) and removes it. A tmpfs's pages are
charged to the cgroup of whoever writes them, so a job filling /dev/shm meets its own limit, not another job's;
each tmpfs also has a size (sandbox.py). Disk has no cgroup: the wrapper watches what the job's folders grew by
and the file system's free space, ends the job past either, and the kernel refuses any one file larger than the
whole allowance (RLIMIT_FSIZE).

Where no cgroup can be made (a bot that is not root, a machine without the controllers) the memory, process and
CPU limits are not enforced; the plan card says so.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from jobs.errors import LimitReached
from jobs.settings import Settings

logger = logging.getLogger(__name__)

MB = 1 << 20
#: The cgroup folder, under the bot's own, that holds one folder per running local job.
PARENT = "trainbot-jobs"
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_V1_CONTROLLERS = ("memory", "pids", "cpu")
_V2_CONTROLLERS = ("memory", "pids", "cpu")

#: What the wrapper records as the limit a job went past -> the sentence (with the job's figures).
LIMIT_SENTENCES = {
    "memory": "the job used more than its {memory_mb} MB of memory (TRAINBOT_LOCAL_MEMORY_MB; its /tmp and "
              "/dev/shm count) and the kernel stopped it",
    "processes": "the job tried to run more than {max_processes} processes and threads at once "
                 "(TRAINBOT_LOCAL_MAX_PROCESSES) and was refused more",
    "disk": "the job wrote more than its {disk_mb} MB to its folders (TRAINBOT_LOCAL_DISK_MB) and was stopped",
    "disk-free": "the disk of the bot's home fell under {free_min_mb} MB free (TRAINBOT_LOCAL_DISK_FREE_MB) "
                 "while the job wrote to it, and the job was stopped",
}


@dataclass(frozen=True)
class JobLimits:
    """The limits every local job runs with (TRAINBOT_LOCAL_* settings)."""

    memory_mb: int
    tmpfs_mb: int
    max_processes: int
    cpu_weight: int
    disk_mb: int
    free_min_mb: int

    @classmethod
    def defaults(cls) -> JobLimits:
        """The limits this process's environment sets (TRAINBOT_LOCAL_*), for a backend built without the bot's
        wiring (the CLI's helpers, benches, tests): the same figures the wiring would give it."""
        return cls.from_settings(Settings())

    @classmethod
    def from_settings(cls, settings: Settings) -> JobLimits:
        return cls(memory_mb=settings.trainbot_local_memory_mb or default_memory_mb(),
                   tmpfs_mb=settings.trainbot_local_tmpfs_mb, max_processes=settings.trainbot_local_max_processes,
                   cpu_weight=settings.trainbot_local_cpu_weight, disk_mb=settings.trainbot_local_disk_mb,
                   free_min_mb=settings.trainbot_local_disk_free_mb)

    @property
    def free_min_bytes(self) -> int:
        """What a job's writes and a launch's channel copies leave free on the home's disk."""
        return self.free_min_mb * MB

    @property
    def tmpfs_bytes(self) -> int:
        """Each of /tmp and /dev/shm: never more than the memory it would be charged to."""
        return min(self.tmpfs_mb, self.memory_mb) * MB

    def figures(self) -> dict[str, int]:
        return {"memory_mb": self.memory_mb, "tmpfs_mb": self.tmpfs_mb, "max_processes": self.max_processes,
                "cpu_weight": self.cpu_weight, "disk_mb": self.disk_mb, "free_min_mb": self.free_min_mb}

    def wrapper_options(self, watch: list[Path], cgroups: list[Path]) -> list[str]:
        """The wrapper's options (wrapper.py): the cgroups to put the job in, the folders whose growth is the
        job's disk, the allowance, and the free space the disk keeps."""
        options = [f"--disk-max={self.disk_mb * MB}", f"--free-min={self.free_min_bytes}"]
        options += [f"--watch={path}" for path in watch]
        options += [f"--cgroup={path}" for path in cgroups]
        return options

    def check_room(self, home: Path) -> None:
        """A launch that cannot start for want of disk says so (LimitReached) before anything is written."""
        try:
            free = shutil.disk_usage(home).free
        except OSError:
            return
        if free < self.free_min_bytes:
            raise LimitReached(
                f"The disk of this bot's home ({home}) has {free // MB} MB free, under the {self.free_min_mb} MB "
                "(TRAINBOT_LOCAL_DISK_FREE_MB) it keeps free, so no local job starts: free some room (finished "
                "jobs' folders under local-jobs/, old checkpoints) and launch again."
            )

    def describe(self, cgroups: Cgroups | None) -> str:
        """A few words for the plan card on what the job may take."""
        disk = f"{self.disk_mb / 1000:g} GB disk"
        if cgroups is None:
            return f"limits: {disk}, /tmp and /dev/shm {self.tmpfs_bytes // MB} MB each (no cgroup here for memory " \
                   "and processes)"
        return (f"limits: {self.memory_mb / 1000:g} GB memory, {self.max_processes} processes, {disk}, "
                f"CPU weight {self.cpu_weight}")


def limit_sentence(limit: str, figures: dict[str, int]) -> str | None:
    """The sentence for a limit the wrapper recorded, with the job's figures; None for one it does not know."""
    sentence = LIMIT_SENTENCES.get(limit)
    return sentence.format_map(defaultdict(lambda: "its", figures)) if sentence else None


def default_memory_mb() -> int:
    """Half of this machine's memory: two jobs at their limit still leave the bot its share."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 4096
    return max(256, total // MB // 2)


@dataclass(frozen=True)
class Cgroups:
    """Where this machine lets the bot make a job's cgroups: one base folder a controller (v1), or one (v2)."""

    version: int
    bases: tuple[Path, ...]  # the bot's own cgroup in each hierarchy used

    def create(self, name: str, limits: JobLimits) -> list[Path]:
        """The job's cgroup folders with its limits written; removed again if a limit cannot be written."""
        made: list[Path] = []
        try:
            for base in self.bases:
                parent = base / PARENT
                if not parent.is_dir():
                    parent.mkdir(exist_ok=True)
                    if self.version == 2:
                        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in _V2_CONTROLLERS))
                _sweep(parent)
                folder = parent / name
                folder.mkdir(exist_ok=True)
                made.append(folder)
                self._set(folder, limits)
        except OSError:
            remove(made)
            raise
        return made

    def _set(self, folder: Path, limits: JobLimits) -> None:
        memory = limits.memory_mb * MB
        if self.version == 2:
            _write(folder / "memory.max", str(memory))
            _write(folder / "memory.swap.max", "0", optional=True)
            _write(folder / "pids.max", str(limits.max_processes))
            _write(folder / "cpu.weight", str(limits.cpu_weight))
            return
        if (folder / "memory.limit_in_bytes").exists():
            _write(folder / "memory.limit_in_bytes", str(memory))
            _write(folder / "memory.memsw.limit_in_bytes", str(memory), optional=True)  # no swap past it
        if (folder / "pids.max").exists():
            _write(folder / "pids.max", str(limits.max_processes))
        if (folder / "cpu.shares").exists():
            _write(folder / "cpu.shares", str(max(2, limits.cpu_weight * 1024 // 100)))


#: A job's cgroup older than this with no process in it is a leftover (its wrapper was killed with the job).
STALE_SECONDS = 600


def _sweep(parent: Path) -> None:
    """Leftover job cgroups under ``parent`` removed: the kernel refuses to remove one that holds a process, and
    a fresh one (a launch that has not put its job in yet) is left alone."""
    now = time.time()
    try:
        children = [c for c in os.scandir(parent) if c.is_dir(follow_symlinks=False)]
    except OSError:
        return
    for child in children:
        try:
            if now - child.stat(follow_symlinks=False).st_mtime > STALE_SECONDS:
                os.rmdir(child.path)
        except OSError:
            continue


def remove(folders: list[Path] | list[str]) -> bool:
    """Remove a job's cgroup folders (empty once its processes are gone); whether none is left. One still busy
    stays, logged."""
    left = False
    for folder in folders:
        try:
            os.rmdir(folder)
        except FileNotFoundError:
            continue
        except OSError as exc:
            left = True
            logger.info("cgroup %s not removed yet: %s", folder, exc)
    return not left


@lru_cache(maxsize=1)
def machine_cgroups() -> tuple[Cgroups | None, str]:
    """(where jobs' cgroups go, or None; why not), found once per process."""
    if os.geteuid() != 0:
        return None, "the bot is not root, and only root may make cgroups here"
    own = _own_cgroups()
    mounts = _cgroup_mounts()
    unified = mounts.get("cgroup2")
    if unified is not None and "" in own:
        base = unified / own[""].lstrip("/")
        available = _read(unified / "cgroup.controllers").split()
        if all(c in available for c in _V2_CONTROLLERS) and _delegates(base):
            return Cgroups(2, (base,)), ""
    bases = []
    for controller in _V1_CONTROLLERS:
        mount = mounts.get(controller)
        if mount is None or controller not in own:
            if unified is not None:
                return None, ("the bot's cgroup (v2) cannot hand memory, pids and cpu down to its jobs: run it in a "
                              "cgroup of its own with them delegated (systemd: Delegate=yes)")
            return None, f"this machine has no cgroup {controller} controller the bot can use"
        bases.append(mount / own[controller].lstrip("/"))
    if not all(os.access(base, os.W_OK) for base in bases):
        return None, "the bot's cgroups are not writable"
    return Cgroups(1, tuple(bases)), ""


def _delegates(base: Path) -> bool:
    """Whether the bot's v2 cgroup hands the controllers down to children (its subtree_control takes them)."""
    wanted = " ".join(f"+{c}" for c in _V2_CONTROLLERS)
    try:
        _write(base / "cgroup.subtree_control", wanted)
    except OSError:
        return False
    return True


def _own_cgroups() -> dict[str, str]:
    """{controller: the bot's cgroup path}; "" for the unified (v2) hierarchy."""
    found: dict[str, str] = {}
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            found[controller] = parts[2]
    return found


def _cgroup_mounts() -> dict[str, Path]:
    """{controller: mount point} of the v1 hierarchies, and "cgroup2": the unified one."""
    found: dict[str, Path] = {}
    for line in _read(Path("/proc/self/mountinfo")).splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        point = Path(fields[4])
        if tail[0] == "cgroup2":
            found.setdefault("cgroup2", point)
        elif tail[0] == "cgroup":
            for option in tail[2].split(","):
                if option in _V1_CONTROLLERS:
                    found.setdefault(option, point)
    return found


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str, *, optional: bool = False) -> None:
    try:
        path.write_text(value)
    except OSError:
        if not optional:
            raise

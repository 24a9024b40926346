"""The tiny parent of every local training process: runs the command, holds it to its limits, and records how
it ended.

The bot starts this detached (its own session), so it may exit or restart while a job trains; nobody
is left to wait() for the training process. This wrapper waits instead and writes `exit.json`
({"exit_code", "wall_seconds", "limit"}) atomically, which is how any later bot process learns the outcome.

It stays outside the sandbox, with the bot's rights, and is run as ``python -I -S`` (the bot's own interpreter,
no site, no environment variables read): it imports only the standard library and never runs a file the job
could have written. Its options (limits.py makes them):
- ``--cgroup=DIR`` (repeatable): the job's cgroup folders; the job's first process is put in them before it
  runs, and afterwards the kernel's counters there say whether memory or the process limit stopped it;
- ``--watch=DIR`` (repeatable), ``--disk-max=BYTES``: the job's writable folders and what they may grow by;
  ``--free-min=BYTES``: the free space the disk under them keeps. Past either the job is killed. A file larger
  than ``--disk-max`` is refused by the kernel itself (RLIMIT_FSIZE, SIGXFSZ).
When the job has ended, every set-user-ID or set-group-ID bit in the watched folders is cleared before anyone
else looks at them, and the cgroup folders are removed.

Usage: python -I -S wrapper.py EXIT_FILE [OPTIONS] -- COMMAND [ARG ...]
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

#: How often the disk is looked at (a statvfs; the folders are walked only when it moved enough).
DISK_TICK_S = 0.2
#: The folders are walked at least this often, whatever the free space says.
WALK_EVERY_S = 30.0
#: A job's processes may still be leaving their cgroup when its first process has been reaped.
RMDIR_TRIES = 50
#: RLIMIT_FSIZE is the allowance plus this: a file stopped there is past the allowance, so the look after the
#: job (a script killed by SIGXFSZ often ends its launcher with another code) names the disk.
FSIZE_SLACK = 1 << 20


def _ignore_but_outlive(signum: int, frame: FrameType | None) -> None:
    # SIGTERM/SIGINT reach the whole process group: the training process handles them (it saves a
    # checkpoint); the wrapper must outlive it to record the exit code. A Python-level handler (not
    # SIG_IGN) is reset to the default on exec, so the child still receives the signals normally.
    print(f"[trainbot] wrapper received signal {signum}; waiting for the training process", flush=True)


#: The exit record's room, taken before the job runs: a job that filled the disk cannot keep it from being written.
RECORD_BYTES = 4096


def _reserve_record(path: Path) -> int:
    """The exit record's staging file, open, with its room allocated now."""
    fd = os.open(path.with_name(path.name + ".tmp"), os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    with contextlib.suppress(OSError):  # a file system without it: the record is written as any file is
        os.posix_fallocate(fd, 0, RECORD_BYTES)
    return fd


def _write_record(path: Path, fd: int, payload: dict[str, object]) -> None:
    """The record written into the room taken before the job (no block to allocate now), then put in place."""
    data = json.dumps(payload).encode()
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    os.replace(path.with_name(path.name + ".tmp"), path)


class Options:
    def __init__(self, argv: list[str]) -> None:
        self.cgroups: list[str] = []
        self.watch: list[str] = []
        self.disk_max = 0
        self.free_min = 0
        for arg in argv:
            name, _, value = arg.partition("=")
            if name == "--cgroup":
                self.cgroups.append(value)
            elif name == "--watch":
                self.watch.append(value)
            elif name == "--disk-max":
                self.disk_max = int(value)
            elif name == "--free-min":
                self.free_min = int(value)
            else:
                raise ValueError(f"unknown option {arg}")


def _enter_limits(options: Options) -> None:
    """In the job's first process, before it runs: its cgroups, its largest file, and first in line when the
    whole machine runs out of memory (before the bot)."""
    for folder in options.cgroups:
        with open(os.path.join(folder, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    if options.disk_max:
        resource.setrlimit(resource.RLIMIT_FSIZE, (options.disk_max + FSIZE_SLACK,) * 2)
    try:
        with open("/proc/self/oom_score_adj", "w") as adj:
            adj.write("500")
    except OSError:
        pass


def _usage(folders: list[str]) -> int:
    """Bytes of disk the folders hold (blocks, so a sparse file counts what it really takes); links not followed."""
    total = 0
    pending = list(folders)
    while pending:
        try:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(entry.path)
        except OSError:
            continue
    return total


def _free(folder: str) -> int:
    try:
        found = os.statvfs(folder)
    except OSError:
        return sys.maxsize
    return found.f_bavail * found.f_frsize


class DiskWatch:
    """What the job's folders grew by since it started, and the disk's free space. The folders are walked only
    when the free space fell by enough to matter (or every WALK_EVERY_S): a look is otherwise one statvfs."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.start = _usage(options.watch)
        self._anchor()

    def _anchor(self) -> None:
        self.used = _usage(self.options.watch) - self.start
        self.free_then = _free(self.options.watch[0])
        self.walked_at = time.monotonic()

    def over(self, *, final: bool = False) -> str | None:
        """"disk" or "disk-free" when the job went past one; None while it is within both. ``final``: the look
        after the job, which walks the folders whatever the free space says."""
        options = self.options
        free = _free(options.watch[0])
        if options.free_min and free < options.free_min:
            return "disk-free"
        if not options.disk_max:
            return None
        grown = self.used + max(0, self.free_then - free)  # at most what the job wrote since the last walk
        if final or grown > options.disk_max or time.monotonic() - self.walked_at > WALK_EVERY_S:
            self._anchor()
            if self.used > options.disk_max:
                return "disk"
        return None


def _kill_job(child: subprocess.Popen[bytes], options: Options) -> None:
    """SIGKILL to every process of the job: its cgroup's, the first process, and the rest of this process
    group (the sandbox's processes; killing its PID namespace's first process ends every process in it)."""
    own, group = os.getpid(), os.getpgrp()
    pids = {child.pid}
    for folder in options.cgroups:
        try:
            pids.update(int(p) for p in Path(folder, "cgroup.procs").read_text().split())
        except (OSError, ValueError):
            continue
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if entry.name.isdigit() and int(entry.name) != own:
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == group:
                    pids.add(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    for pid in pids - {own}:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue


def _limit_hit(options: Options) -> str | None:
    """Which limit the kernel enforced on the job, from its cgroups' counters."""
    for folder in options.cgroups:
        for name, key, limit in (("memory.events", "oom_kill", "memory"), ("memory.oom_control", "oom_kill", "memory"),
                                 ("pids.events", "max", "processes")):
            try:
                lines = Path(folder, name).read_text().splitlines()
            except OSError:
                continue
            counts = dict(line.split()[:2] for line in lines if len(line.split()) >= 2)
            if int(counts.get(key, "0") or 0) > 0:
                return limit
    return None


def _clear_special_bits(folders: list[str]) -> None:
    """No set-user-ID or set-group-ID file the job made keeps the bit: whoever runs it later runs it as
    themselves. Links are left as they are; each file is changed through a descriptor of the file checked."""
    pending = list(folders)
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(info.st_mode):
                pending.append(entry.path)
            if info.st_mode & (stat.S_ISUID | stat.S_ISGID) and (stat.S_ISREG(info.st_mode) or
                                                                  stat.S_ISDIR(info.st_mode)):
                _clear_bits(entry.path, info)


def _clear_bits(path: str, seen: os.stat_result) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) == (seen.st_dev, seen.st_ino):
            os.fchmod(fd, stat.S_IMODE(now.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
    finally:
        os.close(fd)


def _remove_cgroups(folders: list[str]) -> None:
    for folder in folders:
        for _ in range(RMDIR_TRIES):
            try:
                os.rmdir(folder)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


def _run(command: list[str], options: Options) -> tuple[int, str | None]:
    watch = DiskWatch(options) if options.watch and (options.disk_max or options.free_min) else None
    try:
        child = subprocess.Popen(command, preexec_fn=lambda: _enter_limits(options))  # noqa: PLW1509 - one thread
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"[trainbot] could not start {command[0]}: {exc}", flush=True)
        return 127, None
    limit = None
    while True:
        try:
            code = child.wait(timeout=DISK_TICK_S if watch is not None and limit is None else None)
            break
        except subprocess.TimeoutExpired:
            assert watch is not None
            limit = watch.over()
            if limit is not None:
                print(f"[trainbot] the job went past its {limit} limit; stopping it", flush=True)
                _kill_job(child, options)
    if code < 0:  # killed by a signal: report it the way a shell (and SageMaker) does, 128 + N
        code = 128 - code
    if limit is None and code != 0 and watch is not None:
        limit = watch.over(final=True)
    return code, limit or _limit_hit(options)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or "--" not in argv[1:]:
        print("usage: wrapper.py EXIT_FILE [OPTIONS] -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    cut = argv.index("--", 1)
    exit_file, options, command = Path(argv[0]), Options(argv[1:cut]), argv[cut + 1:]
    signal.signal(signal.SIGTERM, _ignore_but_outlive)
    signal.signal(signal.SIGINT, _ignore_but_outlive)
    started = time.monotonic()
    record = _reserve_record(exit_file)
    code, limit = _run(command, options)
    print(f"[trainbot] training process exited with code {code}", flush=True)
    _clear_special_bits(options.watch)
    _write_record(exit_file, record, {"exit_code": code, "wall_seconds": round(time.monotonic() - started, 3),
                                      "limit": limit})
    _remove_cgroups(options.cgroups)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Reading what a local job wrote: the one way the host opens a file a job could have made or replaced.

A job's folders (its ``output/data``, ``model``, checkpoints; the whole job folder where it runs unsandboxed) are
other people's: a name there may be a link to another job's files or to ``/dev/zero``, a FIFO that never answers,
a device, or a file of gigabytes. Every read here starts from a folder the bot made (``anchor``) and opens each
component below it without following links (``O_NOFOLLOW``), the last one first as a path only (``O_PATH``: a
FIFO or a device is never opened, so it cannot block or have an effect), and reads it only when it is a regular
file, at most ``max_bytes``. A model folder is walked the same way before it is served (``model_files``).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

#: What a small record a job writes (metrics.json, a scan's state) may weigh; more is not read.
SMALL_FILE_BYTES = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PATH_ONLY = getattr(os, "O_PATH", 0)  # Linux: open a name without opening what it is


class JobFileRefused(OSError):
    """A job's file the host does not read: a link, not a regular file, too large, or missing."""


@dataclass(frozen=True)
class JobFile:
    """A regular file of a job's, open for reading (``fd``), with what fstat said of it."""

    fd: int
    size: int
    mtime: float

    def read(self, limit: int, *, offset: int = 0) -> bytes:
        """At most ``limit`` bytes from ``offset``."""
        chunks, left = [], limit
        while left > 0:
            chunk = os.pread(self.fd, min(left, 1 << 20), offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
            left -= len(chunk)
        return b"".join(chunks)


@contextmanager
def open_job_file(anchor: Path, relative: str | PurePosixPath) -> Iterator[JobFile]:
    """``anchor/relative`` open for reading, every component of ``relative`` opened without following a link;
    JobFileRefused unless it is a regular file."""
    parts = _parts(relative)
    dir_fd = _walk(anchor, parts[:-1])
    try:
        job_file = _open_regular(dir_fd, parts[-1], f"{anchor}/{relative}")
    finally:
        os.close(dir_fd)
    try:
        yield job_file
    finally:
        os.close(job_file.fd)


def read_job_file(anchor: Path, relative: str | PurePosixPath, *, max_bytes: int = SMALL_FILE_BYTES) -> bytes:
    """The whole file, refused (JobFileRefused) when it holds more than ``max_bytes``."""
    with open_job_file(anchor, relative) as job_file:
        if job_file.size > max_bytes:
            raise JobFileRefused(errno.EFBIG, f"holds {job_file.size} bytes, more than {max_bytes} are read",
                                 f"{anchor}/{relative}")
        return job_file.read(max_bytes)


def read_job_json(anchor: Path, relative: str | PurePosixPath, *, max_bytes: int = SMALL_FILE_BYTES) -> Any:
    """The JSON in a job's file; None when it is not there, not a regular file, too large or not JSON."""
    try:
        return json.loads(read_job_file(anchor, relative, max_bytes=max_bytes))
    except (OSError, ValueError, RecursionError):
        return None


def tail_job_file(anchor: Path, relative: str | PurePosixPath, max_bytes: int) -> bytes:
    """The last ``max_bytes`` of a job's file (a log); b"" when it cannot be read safely."""
    try:
        with open_job_file(anchor, relative) as job_file:
            return job_file.read(max_bytes, offset=max(0, job_file.size - max_bytes))
    except OSError:
        return b""


def job_file_exists(anchor: Path, relative: str | PurePosixPath) -> bool:
    """Whether a regular file is there, no link followed on the way."""
    try:
        with open_job_file(anchor, relative):
            return True
    except OSError:
        return False


def list_job_folder(anchor: Path, relative: str | PurePosixPath = ".") -> dict[str, os.stat_result]:
    """{name: lstat} of a job's folder's entries, the folder reached without following a link; {} when it is
    not there or is not a folder."""
    try:
        fd = _walk(anchor, _parts(relative) if str(relative) != "." else [])
    except OSError:
        return {}
    try:
        return {name: os.stat(name, dir_fd=fd, follow_symlinks=False) for name in os.listdir(fd)}
    except OSError:
        return {}
    finally:
        os.close(fd)


def model_files(anchor: Path, relative: str | PurePosixPath, *, max_bytes: int) -> list[PurePosixPath]:
    """Every file of the model folder ``anchor/relative`` a job wrote, relative to that folder, once each is
    checked: folders and regular files only (no link, FIFO, device or socket), all together at most ``max_bytes``.
    JobFileRefused names the first thing that is not so."""
    found: list[PurePosixPath] = []
    total = 0
    where = f"{anchor}/{relative}"
    root = _walk(anchor, _parts(relative))
    pending = [PurePosixPath(".")]
    try:
        while pending:
            here = pending.pop()
            fd = root if not here.parts else _walk_fd(root, list(here.parts), where)
            try:
                for name in sorted(os.listdir(fd)):
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    path = here / name
                    if stat.S_ISDIR(info.st_mode):
                        pending.append(path)
                    elif stat.S_ISREG(info.st_mode):
                        found.append(path)
                        total += info.st_size
                        if total > max_bytes:
                            raise JobFileRefused(errno.EFBIG, f"holds more than {max_bytes} bytes", where)
                    else:
                        raise JobFileRefused(errno.EPERM, f"{path} is {_kind(info.st_mode)}, not a regular file",
                                             where)
            finally:
                if fd != root:
                    os.close(fd)
    finally:
        os.close(root)
    return found


def _parts(relative: str | PurePosixPath) -> list[str]:
    parts = [p for p in PurePosixPath(relative).parts if p not in ("", ".")]
    if not parts or any(p in ("..", "/") for p in parts):
        raise JobFileRefused(errno.EINVAL, "not a path inside the job's folder", str(relative))
    return parts


def _walk(anchor: Path, parts: list[str]) -> int:
    """A descriptor of ``anchor/parts...``, each of ``parts`` opened without following a link (``anchor`` is the
    bot's own folder, opened as it is)."""
    fd = os.open(anchor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    if not parts:
        return fd
    try:
        return _walk_fd(fd, parts, str(anchor))
    finally:
        os.close(fd)


def _walk_fd(start: int, parts: list[str], where: str) -> int:
    fd = os.dup(start)
    for part in parts:
        try:
            step = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise JobFileRefused(exc.errno, f"{part} is a link or not a folder", where) from exc
            raise
        os.close(fd)
        fd = step
    return fd


def _open_regular(dir_fd: int, name: str, where: str) -> JobFile:
    try:
        path_fd = os.open(name, (_PATH_ONLY or os.O_RDONLY | os.O_NONBLOCK) | os.O_NOFOLLOW | os.O_CLOEXEC,
                          dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise JobFileRefused(exc.errno, "is a link", where) from exc
        raise
    try:
        info = os.fstat(path_fd)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):  # O_PATH|O_NOFOLLOW opens a link itself
            raise JobFileRefused(errno.EPERM, f"is {_kind(info.st_mode)}, not a regular file", where)
        if not _PATH_ONLY:
            return JobFile(os.dup(path_fd), info.st_size, info.st_mtime)
        # Opened again through the descriptor: the very file checked, never a name swapped in since.
        fd = os.open(f"/proc/self/fd/{path_fd}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        return JobFile(fd, info.st_size, info.st_mtime)
    finally:
        os.close(path_fd)


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISLNK, "a link"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return word
    return "not a regular file"

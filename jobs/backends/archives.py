"""Own code as files on this machine, read from archives and copied between folders without trusting them.

Every archive a team hands the bot (an ``s3://...tar.gz``, ``git archive`` output, the ``sourcedir.tar.gz``
a local job unpacks) is read member by member here, never with ``extractall``: on CPython before 3.11.13
``extractall(filter="data")`` can be talked into writing outside its target (CVE-2025-4517). Only regular
files and folders pass; each path is made of plain names (no absolute path, no ``..``, no empty or overlong
name) and resolves inside the target; links, hardlinks, devices, FIFOs, sparse files and a second member of
one path are refused with one sentence. Files are created with ``O_EXCL | O_NOFOLLOW`` in folders this
module made, so nothing is ever written through a link.

The caps (:class:`ArchiveLimits`) hold while the bytes arrive: the decompressed stream is counted as it is
produced (headers included), so a gzip bomb stops at the cap, not after it filled the disk or the memory,
and a stream that inflates far beyond what was read (the compression ratio) stops early. Copies and the
packed source dir keep the same caps and refuse links instead of following them.
"""

from __future__ import annotations

import bz2
import lzma
import os
import shutil
import stat
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Protocol

from jobs.errors import SpecError

DEFAULT_MAX_BYTES = 500_000_000  # TRAINBOT_CODE_MAX_BYTES: training code is kilobytes; data belongs in channels
DEFAULT_MAX_MEMBERS = 50_000  # the transformers repository is ~5,000 files
DEFAULT_MAX_RATIO = 100.0  # source code gzips ~5:1; a run of zeros ~1000:1
RATIO_GRACE_BYTES = 16 * 1024 * 1024  # tar headers alone compress ~100:1: judge the ratio past this much
HEADER_ALLOWANCE = 64 * 1024 * 1024  # bytes that are not file contents (headers, long names): a bound on memory
_CHUNK = 64 * 1024
_NAME_MAX = 255
_PATH_MAX = 4096


@dataclass(frozen=True)
class ArchiveLimits:
    """What one tree of own code may hold."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_members: int = DEFAULT_MAX_MEMBERS
    max_ratio: float = DEFAULT_MAX_RATIO


class ArchiveRefused(SpecError):
    """Own code that holds what the bot never unpacks or copies (a link, a path out, too much)."""


class _Inflater(Protocol):
    @property
    def eof(self) -> bool: ...

    def needs_input(self) -> bool: ...

    def feed(self, data: bytes, limit: int) -> bytes: ...


class _Gzip:
    """zlib's gzip reader, over concatenated members too (``cat a.gz b.gz`` is one valid .gz)."""

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(wbits=31)
        self._tail = b""
        self.eof = False

    def needs_input(self) -> bool:
        return not self._tail

    def feed(self, data: bytes, limit: int) -> bytes:
        out = self._inflate.decompress(self._tail + data, limit)
        self._tail = self._inflate.unconsumed_tail
        if self._inflate.eof:
            rest = self._inflate.unused_data
            if rest.strip(b"\x00"):
                self._inflate, self._tail = zlib.decompressobj(wbits=31), rest
            else:  # the end (a tape-style zero padding after it is no member)
                self.eof, self._tail = True, b""
        return out


class _Buffered:
    """bz2 and lzma keep unread input themselves."""

    def __init__(self, inflate: bz2.BZ2Decompressor | lzma.LZMADecompressor) -> None:
        self._inflate = inflate

    @property
    def eof(self) -> bool:
        return bool(self._inflate.eof)

    def needs_input(self) -> bool:
        return bool(self._inflate.needs_input)

    def feed(self, data: bytes, limit: int) -> bytes:
        return self._inflate.decompress(data, limit)


# ---------------------------------------------------------------- reading a stream, counted


class _CountedStream:
    """A read-only stream of the archive's tar bytes (decompressed on the fly), counting what comes in and
    what goes out, and refusing once the output passes the caps. ``tarfile`` reads it in ``r|`` mode."""

    def __init__(self, source: IO[bytes], limits: ArchiveLimits, what: str) -> None:
        self._source = source
        self._limits = limits
        self._what = what
        self.read_in = 0  # bytes taken from the source (compressed)
        self.given_out = 0  # tar bytes handed to tarfile
        self.file_bytes = 0  # of those, file contents (counted by the reader)
        self._pending = b""
        self._first = self._take(_CHUNK)
        self._inflater = _inflater_for(self._first)

    def _take(self, size: int) -> bytes:
        data = self._source.read(size)
        self.read_in += len(data)
        return data

    def read(self, size: int = -1) -> bytes:
        want = _CHUNK if size is None or size < 0 else size
        while len(self._pending) < want:
            more = self._produce(want - len(self._pending))
            if not more:
                break
            self._pending += more
        out, self._pending = self._pending[:want], self._pending[want:]
        self.given_out += len(out)
        self.check()
        return out

    def _produce(self, want: int) -> bytes:
        first, self._first = self._first, b""
        if self._inflater is None:
            return first or self._take(max(want, _CHUNK))
        limit = max(want, _CHUNK)
        data = first
        while not self._inflater.eof:
            if not data and self._inflater.needs_input():
                data = self._take(_CHUNK)
                if not data:
                    return b""  # cut short: tarfile says the archive is truncated
            out = self._inflater.feed(data, limit)
            data = b""
            if out:
                return out
        return b""

    def check(self) -> None:
        limits = self._limits
        if self.given_out - self.file_bytes > HEADER_ALLOWANCE:
            raise _refused(self._what, "holds more than 64 MB of tar headers and names")
        if self.file_bytes > limits.max_bytes:
            raise _refused(self._what, f"unpacks to more than {megabytes(limits.max_bytes)}")
        if (
            self._inflater is not None
            and self.given_out > RATIO_GRACE_BYTES
            and self.given_out > limits.max_ratio * max(1, self.read_in)
        ):
            raise _refused(
                self._what,
                f"inflates more than {limits.max_ratio:.0f} times (a compression bomb, not source code)",
            )


def _inflater_for(first: bytes) -> _Inflater | None:
    if first.startswith(b"\x1f\x8b"):
        return _Gzip()
    if first.startswith(b"BZh"):
        return _Buffered(bz2.BZ2Decompressor())
    if first.startswith(b"\xfd7zXZ\x00"):
        return _Buffered(lzma.LZMADecompressor())
    return None


# ---------------------------------------------------------------- unpacking


def unpack(source: IO[bytes], dest: Path, limits: ArchiveLimits, *, what: str) -> None:
    """Unpack the tar (plain, gzip, bzip2 or xz) arriving on ``source`` into the empty folder ``dest``,
    checking every member; on any refusal the caller removes ``dest`` (nothing outside it was touched)."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    stream = _CountedStream(source, limits, what)
    seen: set[PurePosixPath] = set()
    try:
        with tarfile.open(fileobj=stream, mode="r|") as archive:  # type: ignore[call-overload]
            for count, member in enumerate(_members(archive), start=1):
                if count > limits.max_members:
                    raise _refused(what, f"holds more than {limits.max_members:,} files")
                relative = _member_path(member, what)
                if relative in seen:
                    raise _refused(what, f"holds {str(relative)!r} twice")
                seen.add(relative)
                if member.isdir():
                    _make_dirs(root, relative, what)
                    continue
                _write_member(archive, member, root, relative, stream, limits, what)
    except tarfile.TarError as exc:
        raise _refused(what, f"is not a readable tar archive ({exc})") from None
    except zlib.error as exc:
        raise _refused(what, f"is not a readable gzip stream ({exc})") from None
    except (lzma.LZMAError, EOFError) as exc:
        raise _refused(what, f"is not a readable compressed stream ({exc})") from None


def _members(archive: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while True:
        member = archive.next()
        if member is None:
            return
        yield member


def _member_path(member: tarfile.TarInfo, what: str) -> PurePosixPath:
    """The member's path as plain names, or a refusal naming it."""
    name = member.name
    shown = repr(name[:200])
    if member.issym() or member.islnk():
        kind = "symbolic link" if member.issym() else "hard link"
        raise _refused(what, f"holds a {kind} {shown} -> {member.linkname[:200]!r}; own code may hold "
                             "only regular files and folders")
    if not (member.isreg() or member.isdir()) or member.issparse():
        raise _refused(what, f"holds {shown}, which is a device, FIFO or special file; own code may hold "
                             "only regular files and folders")
    if name.startswith("/") or "\\" in name or "\x00" in name:
        raise _refused(what, f"holds the path {shown}, which is absolute or not a plain path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _refused(what, f"holds the path {shown}, which climbs out of its folder (..)")
    if not parts:
        if member.isdir():
            return PurePosixPath(".")
        raise _refused(what, f"holds a file with no name ({shown})")
    if len(name.encode()) > _PATH_MAX or any(len(part.encode()) > _NAME_MAX for part in parts):
        raise _refused(what, f"holds a path longer than this machine takes ({shown})")
    if member.isdir() and member.size:
        raise _refused(what, f"holds a folder {shown} with contents in its header")
    return PurePosixPath(*parts)


def _inside(root: Path, relative: PurePosixPath, what: str) -> Path:
    target = root.joinpath(*relative.parts)
    resolved = Path(os.path.realpath(target))
    if resolved != root and root not in resolved.parents:
        raise _refused(what, f"holds {str(relative)!r}, which resolves outside its folder")
    return target


def _make_dirs(root: Path, relative: PurePosixPath, what: str) -> Path:
    """Each folder on the way, made here (a path that exists must be a real folder, never a link)."""
    current = root
    for part in relative.parts:
        if part == ".":
            continue
        current = current / part
        try:
            os.mkdir(current, 0o755)
        except FileExistsError:
            info = os.lstat(current)
            if not stat.S_ISDIR(info.st_mode):
                raise _refused(what, f"holds {str(relative)!r} inside a file of that name") from None
    _inside(root, relative, what)
    return current


def _write_member(
    archive: tarfile.TarFile,
    member: tarfile.TarInfo,
    root: Path,
    relative: PurePosixPath,
    stream: _CountedStream,
    limits: ArchiveLimits,
    what: str,
) -> None:
    if stream.file_bytes + member.size > limits.max_bytes:
        raise _refused(what, f"unpacks to more than {megabytes(limits.max_bytes)}")
    parent = _make_dirs(root, relative.parent, what)
    target = _inside(root, relative, what)
    assert target.parent == parent
    source = archive.extractfile(member)
    mode = 0o755 if member.mode & 0o111 else 0o644
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        raise _refused(what, f"holds {str(relative)!r} twice (as a file and a folder)") from None
    with os.fdopen(fd, "wb") as out:
        if source is None:
            return
        while chunk := source.read(_CHUNK):
            stream.file_bytes += len(chunk)
            stream.check()
            out.write(chunk)


def unpack_file(archive: Path, dest: Path, limits: ArchiveLimits, *, what: str) -> None:
    with archive.open("rb") as source:
        unpack(source, dest, limits, what=what)


# ---------------------------------------------------------------- walking a tree we are about to copy or pack

#: What a checkout or a working folder gathers that is not code: Python's caches, editors' and notebooks'
#: leftovers, the tools' caches. Never uploaded, never unpacked into a job (SageMaker and the local backend).
DEBRIS_NAMES = frozenset({
    "__pycache__", ".DS_Store", ".ipynb_checkpoints", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git",
    ".hg", ".svn", ".tox", ".nox", ".venv", "Thumbs.db",
})
DEBRIS_SUFFIXES = (".pyc", ".pyo", ".swp", "~")


def is_debris(name: str) -> bool:
    """Whether an entry named ``name`` is debris (DEBRIS_NAMES, DEBRIS_SUFFIXES), not code."""
    return name in DEBRIS_NAMES or name.endswith(DEBRIS_SUFFIXES)



def walk_tree(
    source: Path, limits: ArchiveLimits, *, what: str, skip: Callable[[str], bool] = lambda name: False
) -> Iterator[tuple[PurePosixPath, os.stat_result]]:
    """Every folder and regular file under ``source`` (relative paths, parents first, sorted), never
    following a link: a link, a device or a FIFO is refused, and the caps hold as the walk goes."""
    total, count = 0, 0
    stack = [PurePosixPath(".")]
    while stack:
        folder = stack.pop()
        with os.scandir(source.joinpath(*folder.parts)) as entries:
            listed = sorted(entries, key=lambda e: e.name, reverse=True)
        for entry in listed:
            if skip(entry.name):
                continue
            relative = folder / entry.name
            info = entry.stat(follow_symlinks=False)
            count += 1
            if count > limits.max_members:
                raise _refused(what, f"holds more than {limits.max_members:,} files")
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(entry.path)
                raise _refused(what, f"holds a symbolic link {str(relative)!r} -> {target[:200]!r}; own code "
                                     "may hold only regular files and folders")
            if stat.S_ISDIR(info.st_mode):
                yield relative, info
                stack.append(relative)
            elif stat.S_ISREG(info.st_mode):
                total += info.st_size
                if total > limits.max_bytes:
                    raise _refused(what, f"holds more than {megabytes(limits.max_bytes)}")
                yield relative, info
            else:
                raise _refused(what, f"holds {str(relative)!r}, which is a device, FIFO or socket; own code "
                                     "may hold only regular files and folders")


def copy_tree(
    source: Path, dest: Path, limits: ArchiveLimits, *, what: str, skip: Callable[[str], bool] = lambda name: False
) -> None:
    """``source``'s folders and files into ``dest`` (which may exist), refusing links rather than following
    them: a folder that links to itself can never make a copy grow. ``skip``: names left out (is_debris)."""
    dest.mkdir(parents=True, exist_ok=True)
    for relative, info in walk_tree(source, limits, what=what, skip=skip):
        target = dest.joinpath(*relative.parts)
        if stat.S_ISDIR(info.st_mode):
            target.mkdir(exist_ok=True)
            continue
        with source.joinpath(*relative.parts).open("rb") as src:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, info.st_mode & 0o755)
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(src, out, _CHUNK)


def pack_tree(
    source: Path, archive: Path, limits: ArchiveLimits, *, what: str, skip: Callable[[str], bool]
) -> None:
    """``source``'s entries at the root of a gzip tar (as the SageMaker SDK's ``create_tar_file``), links
    refused, never followed; the caps hold for what is packed."""
    with tarfile.open(archive, mode="w:gz") as tar:
        for relative, info in walk_tree(source, limits, what=what, skip=skip):
            member = tarfile.TarInfo(str(relative))
            member.mtime = int(info.st_mtime)
            member.mode = info.st_mode & 0o755
            if stat.S_ISDIR(info.st_mode):
                member.type = tarfile.DIRTYPE
                tar.addfile(member)
                continue
            member.size = info.st_size
            with source.joinpath(*relative.parts).open("rb") as src:
                tar.addfile(member, src)


def _refused(what: str, problem: str) -> ArchiveRefused:
    return ArchiveRefused(f"{what} {problem}.")


def megabytes(size: int) -> str:
    return f"{size / 1_000_000:,.0f} MB" if size >= 1_000_000 else f"{size:,} bytes"

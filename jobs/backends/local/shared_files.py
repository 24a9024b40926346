"""Files an environment shares with environments already on this disk.

Each image runtime installs its own copy of mostly the same wheels (torch alone is 750 MB), beside the bot's own
environment that has them too. After a build, each file that is byte for byte the file at the same place in a
peer (same size, mode and content) becomes a hard link to it, so a second image costs only what differs.
Installers and Python replace files (unlink or rename) rather than write into them, so a peer upgraded later
keeps the runtime's copy intact.

A link gives the runtime's source file the peer's modification time, which Python's bytecode cache records: the
cached ``.pyc`` of a linked source gets the source's new time in its header, so imports stay cached in a runtime
that jobs see read-only.
"""

from __future__ import annotations

import errno
import filecmp
import logging
import os
import stat
import struct
from collections.abc import Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

#: PEP 552: magic, flags, source mtime, source size; flags 0 means "checked by the source's time".
_PYC_HEADER = struct.Struct("<4sIII")


def share_identical_files(tree: Path, peers: Sequence[Path]) -> int:
    """Hard-link each regular file under ``tree`` to the identical file at the same relative path in the first
    peer that has one; the bytes now shared. A peer on another file system, or a file that cannot be linked, is
    left as it is: sharing saves room and never fails the caller."""
    usable = [peer for peer in peers if peer.is_dir() and peer.resolve() != tree.resolve()]
    linked_sources: set[Path] = set()
    shared = 0
    # Top down: a package's sources are linked before its __pycache__ is visited.
    for folder, _, names in os.walk(tree):
        here = Path(folder)
        relative = here.relative_to(tree)
        for name in sorted(names):
            path = here / name
            if here.name == "__pycache__" and name.endswith(".pyc"):
                _restamp_bytecode(path, linked_sources)
                continue
            peer = _identical_peer(path, relative / name, usable)
            if peer is not None and _link(peer, path, usable):
                linked_sources.add(path)
                shared += path.stat().st_size
    return shared


def _identical_peer(path: Path, relative: Path, peers: list[Path]) -> Path | None:
    try:
        mine = path.lstat()
    except OSError:
        return None
    if not _is_plain_file(mine.st_mode):
        return None
    for peer in peers:
        candidate = peer / relative
        try:
            theirs = candidate.lstat()
        except OSError:
            continue
        if (theirs.st_dev, theirs.st_ino) == (mine.st_dev, mine.st_ino):
            return None  # already one file
        if (_is_plain_file(theirs.st_mode) and theirs.st_size == mine.st_size and theirs.st_mode == mine.st_mode
                and _same_bytes(path, candidate)):
            return candidate
    return None


def _restamp_bytecode(pyc: Path, linked_sources: set[Path]) -> None:
    """A ``.pyc`` of a linked source records the time of the file it was compiled from: it is given the linked
    file's. (It stays its own: its code names the path it was compiled at, so it never equals a peer's.)"""
    source = _source_of(pyc)
    if source is not None and source in linked_sources:
        _restamp(pyc, source)


def _source_of(pyc: Path) -> Path | None:
    """``pkg/__pycache__/mod.cpython-311[.opt-1].pyc`` -> ``pkg/mod.py``."""
    module = pyc.name.split(".", 1)[0]
    return pyc.parent.parent / f"{module}.py" if module else None


def _header(path: Path) -> tuple[bytes, int, int, int] | None:
    try:
        with path.open("rb") as handle:
            raw = handle.read(_PYC_HEADER.size)
    except OSError:
        return None
    return _PYC_HEADER.unpack(raw) if len(raw) == _PYC_HEADER.size else None


def _restamp(pyc: Path, source: Path) -> None:
    header = _header(pyc)
    if header is None or header[1] != 0:
        return  # hash-checked bytecode does not depend on the source's time
    try:
        with pyc.open("r+b") as handle:
            handle.seek(8)
            handle.write(struct.pack("<I", int(source.stat().st_mtime) & 0xFFFFFFFF))
    except OSError as exc:
        logger.debug("left %s as it was: %s", pyc, exc)


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return filecmp.cmp(a, b, shallow=False)
    except OSError:
        return False


def _link(peer: Path, path: Path, peers: list[Path]) -> bool:
    """Replace ``path`` by a hard link to ``peer`` in one rename; on another file system, stop asking that peer."""
    spare = path.with_name(f".{path.name}.trainbot-link")
    try:
        os.link(peer, spare)
        os.replace(spare, path)
    except OSError as exc:
        spare.unlink(missing_ok=True)
        if exc.errno == errno.EXDEV:
            peers[:] = [p for p in peers if not peer.is_relative_to(p)]
        return False
    return True


def _is_plain_file(mode: int) -> bool:
    return stat.S_ISREG(mode)

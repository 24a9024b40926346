"""A new environment's files shared with the environments already on the disk (jobs/backends/local/shared_files.py):
what is byte for byte the same becomes one file, nothing else does, and Python's bytecode cache of a linked source
stays valid, so a runtime that jobs see read-only keeps its imports cached. Real files, real hard links, and the
real import system reading the cache."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from jobs.backends.local.shared_files import share_identical_files

SOURCE = "VALUE = 41 + 1\n"


def _write(path: Path, text: str, *, mtime: float | None = None, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def _compiled(source: Path) -> Path:
    return Path(py_compile.compile(str(source), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP))


def _same_file(a: Path, b: Path) -> bool:
    return os.path.samefile(a, b)


def _cached_import_reads_no_source(tree: Path) -> bool:
    """Whether a fresh interpreter importing ``pkg.mod`` from ``tree`` takes its cached code (``-v`` says which
    file the code came from; ``-B`` keeps it from writing a new cache)."""
    done = subprocess.run([sys.executable, "-B", "-v", "-c", "import pkg.mod"], cwd=tree, capture_output=True,
                          text=True, check=False, env={"PATH": os.defpath, "PYTHONPATH": str(tree)})
    assert done.returncode == 0, done.stderr[-2000:]
    return f"code object from '{tree / 'pkg' / '__pycache__'}" in done.stderr and "is stale" not in done.stderr


def test_an_identical_file_becomes_the_peers_and_anything_different_stays_its_own(tmp_path: Path) -> None:
    peer, tree = tmp_path / "peer", tmp_path / "new"
    _write(peer / "pkg" / "data.bin", "x" * 4096)
    _write(tree / "pkg" / "data.bin", "x" * 4096)
    _write(peer / "pkg" / "other.bin", "x" * 4096)
    _write(tree / "pkg" / "other.bin", "x" * 4095 + "y")  # same size, one byte differs
    _write(peer / "pkg" / "tool.sh", "echo hi\n", mode=0o755)
    _write(tree / "pkg" / "tool.sh", "echo hi\n", mode=0o644)  # same bytes, another mode
    _write(tree / "pkg" / "only_here.txt", "new")
    shared = share_identical_files(tree, [peer])
    assert shared == 4096
    assert _same_file(tree / "pkg" / "data.bin", peer / "pkg" / "data.bin")
    assert not _same_file(tree / "pkg" / "other.bin", peer / "pkg" / "other.bin")
    assert (tree / "pkg" / "other.bin").read_text().endswith("y")
    assert not _same_file(tree / "pkg" / "tool.sh", peer / "pkg" / "tool.sh")
    assert (tree / "pkg" / "only_here.txt").read_text() == "new"
    assert not list(tree.rglob("*.trainbot-link"))
    assert share_identical_files(tree, [peer]) == 0  # once shared, nothing more to do


def test_the_first_peer_that_has_the_file_is_the_one_linked(tmp_path: Path) -> None:
    first, second, tree = tmp_path / "a", tmp_path / "b", tmp_path / "new"
    for folder in (first, second, tree):
        _write(folder / "lib" / "same.txt", "same")
    _write(second / "lib" / "later.txt", "later")
    _write(tree / "lib" / "later.txt", "later")
    share_identical_files(tree, [first, second])
    assert _same_file(tree / "lib" / "same.txt", first / "lib" / "same.txt")
    assert _same_file(tree / "lib" / "later.txt", second / "lib" / "later.txt")


@pytest.mark.parametrize("peer_cached", [True, False], ids=["peer-cached", "peer-uncached"])
def test_a_linked_sources_bytecode_stays_fresh(tmp_path: Path, peer_cached: bool) -> None:
    peer, tree = tmp_path / "peer", tmp_path / "new"
    theirs = _write(peer / "pkg" / "mod.py", SOURCE, mtime=1_700_000_000)
    mine = _write(tree / "pkg" / "mod.py", SOURCE, mtime=1_800_000_000)  # installed later: another time
    if peer_cached:
        _compiled(theirs)
    my_cache = _compiled(mine)
    before = my_cache.read_bytes()
    share_identical_files(tree, [peer])
    assert _same_file(mine, theirs)
    assert my_cache.stat().st_nlink == 1 and my_cache.read_bytes()[16:] == before[16:]  # its own code
    assert my_cache.read_bytes()[8:12] != before[8:12]  # the linked source's time
    assert _cached_import_reads_no_source(tree)


def test_the_bytecode_of_a_source_that_stays_its_own_is_left_alone(tmp_path: Path) -> None:
    peer, tree = tmp_path / "peer", tmp_path / "new"
    _compiled(_write(peer / "pkg" / "mod.py", "VALUE = 1\n", mtime=1_700_000_000))
    my_cache = _compiled(_write(tree / "pkg" / "mod.py", "VALUE = 2\n", mtime=1_800_000_000))
    before = my_cache.read_bytes()
    assert share_identical_files(tree, [peer]) == 0
    assert my_cache.read_bytes() == before and _cached_import_reads_no_source(tree)


def test_a_peer_on_another_file_system_is_left_alone(tmp_path: Path) -> None:
    if not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on a file system apart from the test's folder")  # (a machine without it)
    with tempfile.TemporaryDirectory(dir="/dev/shm") as elsewhere:
        peer, tree = Path(elsewhere), tmp_path / "new"
        _write(peer / "a.txt", "same")
        _write(tree / "a.txt", "same")
        _write(peer / "b.txt", "also")
        _write(tree / "b.txt", "also")
        assert share_identical_files(tree, [peer]) == 0
        assert (tree / "a.txt").read_text() == "same" and (tree / "a.txt").stat().st_nlink == 1
        assert not list(tree.rglob("*.trainbot-link"))


def test_a_module_imports_from_the_shared_tree(tmp_path: Path) -> None:
    peer, tree = tmp_path / "peer", tmp_path / "new"
    _write(peer / "pkg" / "mod.py", SOURCE)
    _write(tree / "pkg" / "mod.py", SOURCE)
    share_identical_files(tree, [peer])
    spec = importlib.util.spec_from_file_location("shared_mod", tree / "pkg" / "mod.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.VALUE == 42

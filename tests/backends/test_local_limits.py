"""limits.py and the wrapper's side of them, on the files they write and read. The kernel's side (a cgroup that
kills, a fork refused, a file past RLIMIT_FSIZE) is tests/security/test_job_limits.py, on this machine's cgroup
v1; the v2 files are checked here against a folder laid out as cgroup v2 lays one out (the test machines have no
v2 controllers to try them on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.backends.local import wrapper
from jobs.backends.local.limits import PARENT, Cgroups, JobLimits, limit_sentence
from jobs.errors import LimitReached

LIMITS = JobLimits(memory_mb=512, tmpfs_mb=2048, max_processes=64, cpu_weight=250, disk_mb=100, free_min_mb=10)


def test_a_v2_cgroup_gets_its_limits_and_its_parent_hands_the_controllers_down(tmp_path: Path) -> None:
    base = tmp_path / "bot.scope"
    (base / PARENT).mkdir(parents=True)
    (folder,) = Cgroups(2, (base,)).create("job-1", LIMITS)
    assert folder == base / PARENT / "job-1"
    written = {name: (folder / name).read_text() for name in ("memory.max", "memory.swap.max", "pids.max",
                                                              "cpu.weight")}
    assert written == {"memory.max": str(512 << 20), "memory.swap.max": "0", "pids.max": "64", "cpu.weight": "250"}


def test_a_v1_cgroup_writes_each_controllers_own_file(tmp_path: Path) -> None:
    bases = tuple(tmp_path / c for c in ("memory", "pids", "cpu"))
    for base, names in zip(bases, (("memory.limit_in_bytes",), ("pids.max",), ("cpu.shares",)), strict=True):
        for name in names:  # the kernel makes these files with the folder; here the test does
            (base / PARENT / "job-1").mkdir(parents=True)
            (base / PARENT / "job-1" / name).write_text("")
    made = Cgroups(1, bases).create("job-1", LIMITS)
    assert (made[0] / "memory.limit_in_bytes").read_text() == str(512 << 20)
    assert (made[1] / "pids.max").read_text() == "64"
    assert (made[2] / "cpu.shares").read_text() == str(250 * 1024 // 100)


def test_the_tmpfs_never_holds_more_than_the_memory_and_the_sentences_name_their_setting() -> None:
    assert LIMITS.tmpfs_bytes == 512 << 20
    figures = LIMITS.figures()
    assert limit_sentence("memory", figures) == (
        "the job used more than its 512 MB of memory (TRAINBOT_LOCAL_MEMORY_MB; its /tmp and /dev/shm count) and "
        "the kernel stopped it")
    assert "64 processes" in (limit_sentence("processes", figures) or "")
    assert "100 MB" in (limit_sentence("disk", figures) or "")
    assert "TRAINBOT_LOCAL_DISK_FREE_MB" in (limit_sentence("disk-free", figures) or "")
    assert limit_sentence("unknown", figures) is None


def test_a_launch_without_the_free_room_is_refused_with_a_sentence(tmp_path: Path) -> None:
    with pytest.raises(LimitReached, match="TRAINBOT_LOCAL_DISK_FREE_MB"):
        JobLimits(**{**LIMITS.figures(), "free_min_mb": 1 << 40}).check_room(tmp_path)
    LIMITS.check_room(tmp_path)  # 10 MB free is there


@pytest.mark.parametrize(("files", "limit"), [
    ({"memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"}, "memory"),  # v2
    ({"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"}, "memory"),  # v1
    ({"pids.events": "max 7\n"}, "processes"),  # v1 and v2
    ({"memory.events": "oom_kill 0\n", "pids.events": "max 0\n"}, None),
])
def test_the_wrapper_reads_which_limit_the_kernel_enforced(tmp_path: Path, files: dict[str, str],
                                                           limit: str | None) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    options = wrapper.Options([f"--cgroup={tmp_path}"])
    assert wrapper._limit_hit(options) == limit


def test_the_wrapper_clears_set_uid_and_set_gid_bits_and_leaves_links(tmp_path: Path) -> None:
    target = tmp_path / "outside"
    target.write_text("x")
    target.chmod(0o4755)
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "tool").write_text("#!/bin/sh\n")
    (folder / "sub" / "tool").chmod(0o6755)
    (folder / "link").symlink_to(target)
    wrapper._clear_special_bits([str(folder)])
    assert (folder / "sub" / "tool").stat().st_mode & 0o7777 == 0o755
    assert target.stat().st_mode & 0o7777 == 0o4755  # what a link points at is not the job's

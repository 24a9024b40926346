"""Issue 34 item 4: one team's job takes only its own share of memory, processes, CPU and disk.

Teams' scripts (own code launched with the installed `trainbot launch` onto the local backend, run by the toolkit
in the real bwrap sandbox) do what the attacker of the issue did, each under small limits the test sets through
the TRAINBOT_LOCAL_* settings, and each bounded on its own so that the machine survives a bot without the limits:
fill /dev/shm (the OOM killer then took another user's job), fill /tmp and /dev/shm past their size, fork until
refused (386 processes made another user's launch fail), write one huge file, write many small ones, and fill the
home's disk (it stayed full, and the next Launch did nothing and said nothing). Each job that goes past a limit
ends Failed with a sentence naming the limit and its setting; a launch on a full disk is refused with one.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.backends.local.runtime import Runtime
from jobs.records import RemoteJob, RemoteStatus
from tests.security.cli import one_sentence, trainbot
from tests.security.job_rig import TeamJobs

pytestmark = pytest.mark.usefixtures("image_runtime")

FILL_SHM = '''\
import os
chunk = b"x" * (1 << 20)
with open("/dev/shm/fill", "wb") as out:
    for written in range(1, 401):  # 400 MB at most: bounded without the limit too
        out.write(chunk)
        out.flush()
print(f"[probe] filled: {written} MB", flush=True)
'''

TMPFS_SIZES = '''\
import os
chunk = b"x" * (1 << 20)
for folder in ("/dev/shm", "/tmp"):
    written = 0
    try:
        with open(os.path.join(folder, "fill"), "wb") as out:
            while written < 128:
                out.write(chunk)
                out.flush()
                written += 1
    except OSError as exc:
        print(f"[probe] stopped: {folder} {exc.strerror}", flush=True)
    print(f"[probe] wrote: {folder} {written}", flush=True)
'''

FORK = '''\
import os, signal, time
children = []
try:
    for _ in range(100):  # 100 at most: bounded without the limit too
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
finally:
    print(f"[probe] forked: {len(children)}", flush=True)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
'''

ONE_BIG_FILE = '''\
import os
chunk = b"x" * (1 << 20)
with open(os.path.join(os.environ["SM_MODEL_DIR"], "big.bin"), "wb") as out:
    for _ in range(128):  # 128 MB at most
        out.write(chunk)
print("[probe] wrote: 128 MB", flush=True)
'''

MANY_FILES = '''\
import os, time
chunk = b"x" * (1 << 20)
folder = os.environ["SM_MODEL_DIR"]
for n in range({files}):  # bounded without the limit too
    try:
        with open(os.path.join(folder, f"part-{{n}}.bin"), "wb") as out:
            for _ in range(4):
                out.write(chunk)
    except OSError as exc:
        print(f"[probe] stopped: {{exc.strerror}}", flush=True)
        break
print("[probe] wrote all", flush=True)
time.sleep(120)  # a job that stays: only a limit (or max_run) ends it
'''

SLEEP = '''\
import time
print("[probe] running: yes", flush=True)
time.sleep(120)
'''


def failed_for(remote: RemoteJob, setting: str, figure: str) -> None:
    assert remote.status is RemoteStatus.FAILED, remote
    assert setting in remote.failure_reason and figure in remote.failure_reason, remote.failure_reason


@pytest.fixture
def cgroups() -> None:
    """Memory, processes and CPU are cgroups, which only a root bot makes (limits.py); disk and tmpfs are not."""
    if os.geteuid() != 0:
        pytest.skip("the bot here is not root: it cannot make cgroups for its jobs")


@pytest.mark.usefixtures("cgroups")
def test_filling_dev_shm_meets_the_jobs_own_memory_limit(tmp_path: Path) -> None:
    # /dev/shm may hold up to the memory limit: filling it takes the job past its own limit.
    rig = TeamJobs.at(tmp_path, TRAINBOT_LOCAL_MEMORY_MB="256", TRAINBOT_LOCAL_TMPFS_MB="1024")
    job = rig.launch("shm", FILL_SHM)
    failed_for(rig.wait(job), "TRAINBOT_LOCAL_MEMORY_MB", "256 MB")
    assert not rig.said(job, "filled")  # killed on the way, by its own limit


def test_tmp_and_dev_shm_hold_their_size(tmp_path: Path) -> None:
    rig = TeamJobs.at(tmp_path, TRAINBOT_LOCAL_TMPFS_MB="16")
    job = rig.launch("tmpfs", TMPFS_SIZES)
    assert rig.wait(job).status is RemoteStatus.COMPLETED, rig.log(job)[-2000:]
    wrote = dict(line.split() for line in rig.said(job, "wrote"))
    assert set(wrote) == {"/dev/shm", "/tmp"} and all(int(mb) <= 16 for mb in wrote.values()), wrote
    assert all("No space left on device" in line for line in rig.said(job, "stopped"))


@pytest.mark.usefixtures("cgroups")
def test_forking_past_the_process_limit_is_refused_and_named(tmp_path: Path) -> None:
    rig = TeamJobs.at(tmp_path, TRAINBOT_LOCAL_MAX_PROCESSES="40")
    job = rig.launch("forks", FORK)
    failed_for(rig.wait(job), "TRAINBOT_LOCAL_MAX_PROCESSES", "40")
    (forked,) = rig.said(job, "forked")
    assert int(forked) < 40


def test_one_file_past_the_disk_allowance_ends_the_job(tmp_path: Path) -> None:
    rig = TeamJobs.at(tmp_path, TRAINBOT_LOCAL_DISK_MB="32")
    job = rig.launch("big", ONE_BIG_FILE)
    failed_for(rig.wait(job), "TRAINBOT_LOCAL_DISK_MB", "32 MB")
    assert (rig.folder(job) / "model" / "big.bin").stat().st_size <= 33 << 20


def test_many_files_past_the_disk_allowance_end_the_job(tmp_path: Path) -> None:
    rig = TeamJobs.at(tmp_path, TRAINBOT_LOCAL_DISK_MB="32")
    job = rig.launch("many", MANY_FILES.format(files=128), "max_run=90")  # 512 MB at most
    failed_for(rig.wait(job), "TRAINBOT_LOCAL_DISK_MB", "32 MB")  # ended by the limit, not by max_run


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A home on an ext4 file system of its own, 160 MB in a file: what fills it is that file system's, not the
    machine's. ext4 keeps 5% of it for root, as it does on a host's disk, and the job is not root."""
    home, image = tmp_path / "home", tmp_path / "home.ext4"
    home.mkdir()
    with image.open("wb") as out:
        out.truncate(160 << 20)
    for argv in (["mkfs.ext4", "-q", "-F", str(image)], ["mount", "-o", "loop", str(image), str(home)]):
        made = subprocess.run(argv, capture_output=True, text=True, check=False)
        if made.returncode != 0:
            pytest.skip(f"cannot make a small ext4 file system here ({' '.join(argv[:1])}): {made.stderr.strip()}")
    home.chmod(0o700)
    try:
        yield home
    finally:
        for _ in range(50):  # the job's processes may still hold it for a moment
            if subprocess.run(["umount", str(home)], capture_output=True, check=False).returncode == 0:
                break
            time.sleep(0.2)
        else:  # a job that outlived the test (a bot without the limits): detached, freed when it ends
            subprocess.run(["umount", "-l", str(home)], capture_output=True, check=False)


def test_a_job_never_takes_the_home_under_its_free_space_and_the_next_launch_says_why(
    tmp_path: Path, small_disk: Path, image_runtime: Runtime
) -> None:
    rig = TeamJobs.at(tmp_path, small_disk, TRAINBOT_LOCAL_DISK_FREE_MB="64", TRAINBOT_LOCAL_DISK_MB="1000")
    job = rig.launch("filler", MANY_FILES.format(files=64), "max_run=90")  # 256 MB: more than the disk
    failed_for(rig.wait(job), "TRAINBOT_LOCAL_DISK_FREE_MB", "64 MB")  # ended by the reserve, not max_run
    free = os.statvfs(small_disk)
    assert free.f_bavail * free.f_frsize < 64 << 20  # what it wrote stays: the next launch has no room
    done = trainbot(rig.env(), "launch", *rig.commit("next", SLEEP).split())
    assert done.returncode == 2, done.stderr
    sentence = one_sentence(done)
    assert "TRAINBOT_LOCAL_DISK_FREE_MB" in sentence and "MB free" in sentence, sentence
    assert len(list(rig.home.glob("local-jobs/*/state.json"))) == 1  # nothing of the refused launch was made


@pytest.mark.usefixtures("cgroups")
def test_each_job_runs_in_its_own_cgroup_with_its_cpu_weight_and_stop_still_works(tmp_path: Path) -> None:
    rig = TeamJobs.at(tmp_path, TRAINBOT_LOCAL_CPU_WEIGHT="250")
    job = rig.launch("sleeper", SLEEP)
    deadline = time.monotonic() + 120
    while not rig.said(job, "running"):
        assert time.monotonic() < deadline, rig.log(job)[-2000:]
        time.sleep(0.5)
    state = json.loads((rig.folder(job) / "state.json").read_text())
    cpu = next(Path(p) for p in state["cgroups"] if "/cpu" in p)
    assert (cpu / "cpu.shares").read_text().strip() == str(250 * 1024 // 100)
    members = {int(p) for p in (cpu / "cgroup.procs").read_text().split()}
    scripts = [p for p in members if b"jobs/run.py" in Path(f"/proc/{p}/cmdline").read_bytes()
               or b"run.py" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert scripts, members  # the team's script itself is in the job's cgroup
    stopped = trainbot(rig.env(), "stop", job.rsplit("-", 1)[0])
    assert stopped.returncode == 0, stopped.stderr
    assert rig.wait(job).status is RemoteStatus.STOPPED
    deadline = time.monotonic() + 30
    while any(Path(p).exists() for p in state["cgroups"]):  # removed once its processes are gone
        assert time.monotonic() < deadline, state["cgroups"]
        time.sleep(0.2)

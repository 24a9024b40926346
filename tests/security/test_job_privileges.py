"""Issue 34 item 1: a job never runs with the host's uid 0, and nothing it leaves behind runs with the bot's rights.

A team's script (own code from a git repository made here, launched with the installed `trainbot launch` onto the
local backend, run by the toolkit in the real bwrap sandbox) does what the attacker of the issue did: it opens the
host-wide kernel settings under /proc/sys for writing, leaves set-user-ID and set-group-ID copies of a program in
its model and output folders, tries to make a user namespace of its own (where it would be root again), and reads
what uid it has. The bot here runs as root, as on a typical host: the job must run as TRAINBOT_LOCAL_JOB_UID.
TRAINBOT_HOME must not be readable by other users, one made before this rule included. A root bot whose sandbox
is off refuses own code, the console's too, with one sentence.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobs.backends.local.runtime import Runtime
from jobs.records import RemoteJob, RemoteStatus
from tests.security.cli import trainbot
from tests.security.job_rig import TeamJobs, run_as

#: Not the default (nobody): the setting is what decides.
JOB_UID = 54321
KERNEL_SETTINGS = ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/panic", "/proc/sys/vm/drop_caches",
                   "/proc/sys/kernel/pid_max", "/proc/sys/kernel/modprobe")

ATTACK = f'''\
import ctypes, os, shutil, stat

def say(what, detail):
    print(f"[probe] {{what}}: {{detail}}", flush=True)

say("uid", f"{{os.getuid()}} {{os.geteuid()}} {{os.getgid()}}")
for path in {KERNEL_SETTINGS!r}:
    try:
        os.close(os.open(path, os.O_WRONLY))  # opened only: never written, whatever the outcome
        say("writable", path)
    except OSError as exc:
        say("refused", f"{{path}} {{exc.strerror}}")
for folder, bits in ((os.environ["SM_MODEL_DIR"], 0o4755), (os.environ["SM_OUTPUT_DATA_DIR"], 0o2755)):
    copy = os.path.join(folder, "id")
    shutil.copy("/usr/bin/id", copy)
    os.chmod(copy, bits)
    say("made", f"{{copy}} {{oct(stat.S_IMODE(os.stat(copy).st_mode))}}")
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER = 0x10000000
if libc.unshare(CLONE_NEWUSER) == 0:
    say("namespace", "made")
else:
    say("namespace", f"refused {{os.strerror(ctypes.get_errno())}}")
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
say("capabilities", status["CapEff"].strip())
'''


@dataclass
class Attack:
    rig: TeamJobs
    job: str
    remote: RemoteJob


@pytest.fixture(scope="module")
def attack(tmp_path_factory: pytest.TempPathFactory, image_runtime: Runtime) -> Iterator[Attack]:
    root = tmp_path_factory.mktemp("privileges")
    home = root / "home"
    home.mkdir(mode=0o755)  # a home made before the rule, readable by everyone
    os.chmod(home, 0o755)
    rig = TeamJobs.at(root, home, TRAINBOT_LOCAL_JOB_UID=str(JOB_UID))
    job = rig.launch("attacker", ATTACK)
    yield Attack(rig, job, rig.wait(job))


def test_the_job_ran_in_the_sandbox(attack: Attack) -> None:
    assert attack.remote.status is RemoteStatus.COMPLETED, attack.rig.log(attack.job)[-3000:]
    assert attack.rig.said(attack.job, "capabilities") == ["0000000000000000"]


def test_the_job_runs_as_the_job_uid_never_the_hosts_root(attack: Attack) -> None:
    (inside,) = attack.rig.said(attack.job, "uid")
    assert inside.split()[:2] != ["0", "0"]
    expected = JOB_UID if os.geteuid() == 0 else os.getuid()  # a bot that is not root: its own uid
    written = attack.rig.folder(attack.job) / "model" / "id"
    assert written.stat().st_uid == expected and written.stat().st_gid == expected


def test_the_job_cannot_open_a_kernel_setting_for_writing(attack: Attack) -> None:
    assert not attack.rig.said(attack.job, "writable"), attack.rig.log(attack.job)[-3000:]
    refused = attack.rig.said(attack.job, "refused")
    assert sorted(line.split()[0] for line in refused) == sorted(KERNEL_SETTINGS)


def test_the_job_cannot_make_a_user_namespace(attack: Attack) -> None:
    (answer,) = attack.rig.said(attack.job, "namespace")
    assert answer.startswith("refused"), answer


def test_no_setuid_or_setgid_file_it_made_keeps_the_bit(attack: Attack) -> None:
    made = attack.rig.said(attack.job, "made")
    assert sorted(line.split()[1] for line in made) == ["0o2755", "0o4755"]  # inside, the bits were set
    folder = attack.rig.folder(attack.job)
    for copy in (folder / "model" / "id", folder / "output" / "data" / "id"):
        mode = copy.stat().st_mode
        assert not mode & (stat.S_ISUID | stat.S_ISGID), f"{copy} {oct(mode)}"
        # Another user of the machine who runs it (where they reach it) runs it as themselves, never as the bot.
        ran = run_as(65533, str(copy), "-u")
        assert ran.returncode != 0 or ran.stdout.split() == ["65533"], ran


def test_trainbot_home_is_private_and_an_old_home_was_tightened(attack: Attack) -> None:
    assert stat.S_IMODE(attack.rig.home.stat().st_mode) == 0o700
    listed = run_as(65533, "ls", str(attack.rig.home / "local-jobs"))
    assert listed.returncode != 0 and "Permission denied" in listed.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is a root bot's: this test process is not root")
def test_a_root_bot_without_its_sandbox_refuses_own_code_in_one_sentence_the_console_too(tmp_path: Path) -> None:
    rig = TeamJobs.at(tmp_path, TRAINBOT_LOCAL_SANDBOX="off")
    code = rig.commit("team", "print('never runs')\n")
    for command in ("plan", "launch"):
        done = trainbot(rig.env(), command, code)
        assert done.returncode == 2, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert "this bot runs as root" in line and "TRAINBOT_LOCAL_SANDBOX=off" in line, line
    script = tmp_path / "session.txt"
    script.write_text(f"/train {code}\n")
    console = trainbot(rig.env(), "console", "--script", str(script))
    assert "this bot runs as root" in console.stdout and "isolation: none" not in console.stdout, console.stdout
    assert not list(rig.home.glob("local-jobs/*/state.json"))  # nothing was launched

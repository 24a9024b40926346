"""Local jobs in a bubblewrap sandbox: a job never runs with the bot's privileges.

A local job is other people's code (a team's repository) or the bot's scripts run with other people's
arguments. In the sandbox (``bwrap``) it runs as an unprivileged user in a user namespace of its own (uid
INSIDE_UID inside; outside, TRAINBOT_LOCAL_JOB_UID when the bot runs as root, else the bot's own uid), which may
not make another (``--disable-userns``), with no capabilities, ``/proc/sys`` read-only, its own PID (no bot
process to read ``/proc/<pid>/environ`` from), IPC, UTS and cgroup namespaces, and a file system of its own: the
system's programs and libraries, the interpreter environment it runs on and the data it reads, all read-only;
its job folder read-only except the parts it writes (model, output/data, code, its own Python environment, a
scratch folder for HOME and temporary files, its channels' copies) and its lineage's checkpoint folder; /tmp and
/dev/shm are tmpfs of a set size. The bot's home (TRAINBOT_HOME: the store, other jobs, the code cache), the
bot's secrets and the rest of the machine are not there at all. Offline jobs (the default) get a network
namespace of their own too (loopback only: no cloud metadata endpoint, no other job's endpoint server, no
database on this host); with the hub on (TRAINBOT_LOCAL_HUB=1) the job shares the host's network, as it must to
download.

A bot running as root cannot hand bwrap's own user namespace to another uid (bwrap maps the sandbox's uid onto
its caller's, and uid 0 outside may still write /proc/sys), so there the sandbox is two layers: bwrap as root
shapes the file system (it reaches the bot's private home) and keeps only CAP_SETUID and CAP_SETGID, ``setpriv``
becomes TRAINBOT_LOCAL_JOB_UID, and a second, unprivileged bwrap makes the user namespace and the others around
the job. A bot that is not root runs one bwrap, unprivileged, with all of it.

``TRAINBOT_LOCAL_SANDBOX``: ``auto`` (bwrap when it works here, probed once), ``bwrap`` (required: a machine
where it does not work refuses local jobs) or ``off``. The job's processes are the sandbox's children, so
stop and take-capacity signal them as before; the wrapper that records the exit code stays outside.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from jobs.backends.local.interpreter import Interpreter
from jobs.backends.local.state import JobFolder
from jobs.errors import BadInput, ConfigError

logger = logging.getLogger(__name__)

SandboxMode = Literal["auto", "bwrap", "off"]
PROBE_TIMEOUT_S = 10
#: The job's uid and gid inside its user namespace (named JOB_USER in the sandbox's /etc/passwd).
INSIDE_UID = 1000
JOB_USER = "trainbot-job"
#: The host uid a root bot's jobs run as, unless TRAINBOT_LOCAL_JOB_UID says otherwise: nobody.
DEFAULT_JOB_UID = 65534
DEFAULT_TMPFS_BYTES = 1 << 30
#: output/ in the sandbox: a small tmpfs for what the toolkit writes beside output/data (its success and
#: failure files, which SageMaker reads and the local backend does not); only output/data reaches the host.
OUTPUT_TMPFS_BYTES = 4 << 20
#: The system's programs and libraries (a merged-/usr system has links for all but /usr).
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: What of /etc a Python job needs: the loader, certificates, name lookup, time zone. Never shadow; passwd and
#: group are the sandbox's own (sandbox_identity), hosts too where the job has one (hosts_file).
_ETC = (
    "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "ssl", "ca-certificates", "pki",
    "resolv.conf", "hosts", "host.conf", "gai.conf", "nsswitch.conf", "services", "protocols",
    "localtime", "timezone", "mime.types", "os-release",
)
_HOSTNAME = "trainbot-job"
_CPU = "/sys/devices/system/cpu"  # torch reads the cores there


@dataclass(frozen=True)
class JobMounts:
    """What one sandboxed job sees besides the system."""

    folder: Path  # the job's folder: read-only, but for `writable`
    writable: tuple[Path, ...]  # its parts the job writes, and its lineage's checkpoint folder
    readable: tuple[Path, ...]  # the interpreter environment, the data and model folders it reads
    network: bool  # the host's network (hub downloads, an endpoint's port); otherwise loopback only
    cwd: Path
    hosts: Path | None = None  # /etc/hosts inside (`hosts_file`); the host's own when None
    identity: tuple[Path, Path] | None = None  # /etc/passwd and /etc/group inside (`sandbox_identity`)
    tmpfs_bytes: int = DEFAULT_TMPFS_BYTES  # the size of /tmp and of /dev/shm each
    scratch_tmpfs: tuple[Path, ...] = ()  # folders inside `folder` that are a small tmpfs (output/)
    # The job's folders again where SageMaker's container has them (source, path inside, writable): a script
    # that names /opt/ml/model or /opt/ml/checkpoints itself (a default, not an argument) finds them there.
    container: tuple[tuple[Path, str, bool], ...] = ()


class Sandbox:
    """Wraps a job's command in bwrap when the mode and this machine allow it."""

    def __init__(self, mode: SandboxMode = "auto", *, executable: str = "bwrap",
                 job_uid: int = DEFAULT_JOB_UID) -> None:
        self.mode = mode
        # An absolute path: the outer layer runs the inner bwrap by name with the job's PATH otherwise.
        self._executable = shutil.which(executable) or executable
        self.job_uid = job_uid

    def active(self) -> bool:
        """Whether jobs run sandboxed here; ``bwrap`` mode on a machine where bwrap does not work refuses."""
        if self.mode == "off":
            return False
        problem = self.problem()
        if problem is None:
            return True
        if self.mode == "bwrap":
            raise ConfigError(
                f"TRAINBOT_LOCAL_SANDBOX=bwrap, but {problem}: install bubblewrap 0.8 or newer (apt-get install "
                "bubblewrap) with user namespaces allowed, or set TRAINBOT_LOCAL_SANDBOX=auto."
            )
        return False

    def problem(self) -> str | None:
        """Why bwrap cannot sandbox a job on this machine; None when it can (probed once per process)."""
        return _probe(self._executable, self.job_uid if runs_as_root() else None)

    def host_uid(self) -> int:
        """The uid a job's processes and files have on the host."""
        return self.job_uid if runs_as_root() else os.getuid()

    def unsandboxed_reason(self) -> str:
        if self.mode == "off":
            return "TRAINBOT_LOCAL_SANDBOX=off"
        return self.problem() or "the sandbox is off"

    def refuse_own_code(self) -> BadInput:
        """The one sentence for own code that would run unsandboxed where other people's code must not."""
        if runs_as_root():
            return BadInput(
                "Own code (code=) is refused here: this bot runs as root, and without its sandbox, which runs "
                f"a job as an unprivileged user, the job would run as root ({self.unsandboxed_reason()}); install "
                "bubblewrap 0.8 or newer with user namespaces allowed and set TRAINBOT_LOCAL_SANDBOX=auto, or run "
                "the bot as an ordinary user."
            )
        return BadInput(
            "Own code (code=) runs on this bot's local backend only inside a bubblewrap sandbox, and here "
            f"{self.unsandboxed_reason()}: install bubblewrap (apt-get install bubblewrap) and set "
            "TRAINBOT_LOCAL_SANDBOX=auto (or bwrap), or run it from `trainbot console` on your own machine."
        )

    def describe(self, *, network: bool) -> str:
        """A few words for the plan card on how the job is isolated."""
        if not self.active():
            return f"isolation: none ({self.unsandboxed_reason()}), the job runs with this user's rights"
        net = "host network for the hub" if network else "no network"
        return f"isolation: bwrap sandbox (own PIDs, {net}, writes only its own folders)"

    def command(self, argv: Sequence[str], mounts: JobMounts) -> list[str]:
        """``argv`` (the wrapper and its options up to ``--``, then the job's command) with the sandbox between
        the two: the wrapper, which records the exit code, stays outside; everything after its ``--`` runs
        inside."""
        try:
            cut = list(argv).index("--") + 1
        except ValueError:
            raise ValueError("expected WRAPPER ... -- COMMAND ...") from None
        return [*argv[:cut], *self.arguments(mounts), "--", *argv[cut:]]

    def arguments(self, mounts: JobMounts, *, die_with_parent: bool = True) -> list[str]:
        """bwrap's arguments up to the job's command: two layers when the bot is root, else one.
        ``die_with_parent``: gone with the process that started it (a job's wrapper), or not (a detached endpoint
        server that outlives a bot restart)."""
        tie = ["--die-with-parent"] if die_with_parent else []
        if runs_as_root():
            return [*self._outer(mounts, tie), "--", *_setpriv(self.job_uid), "--", *self._inner(mounts, tie)]
        return self._single(mounts, tie)

    def _single(self, mounts: JobMounts, tie: list[str]) -> list[str]:
        return [self._executable, *tie, *_namespaces(mounts.network), "--cap-drop", "ALL",
                *_files(mounts), *_kernel(mounts.tmpfs_bytes), "--remount-ro", "/", "--chdir", str(mounts.cwd)]

    def _outer(self, mounts: JobMounts, tie: list[str]) -> list[str]:
        # Root, in the host's user namespace: the file system only. The host's /proc is there for the inner
        # bwrap to write its user namespace's maps; the job gets a /proc of its own on top of it.
        return [self._executable, *tie, "--cap-drop", "ALL", "--cap-add", "CAP_SETUID",
                "--cap-add", "CAP_SETGID", *_files(mounts), "--dev", "/dev", "--bind", "/proc", "/proc",
                "--remount-ro", "/"]

    def _inner(self, mounts: JobMounts, tie: list[str]) -> list[str]:
        return [self._executable, *tie, *_namespaces(mounts.network), "--cap-drop", "ALL",
                "--bind", "/", "/", *_kernel(mounts.tmpfs_bytes), "--remount-ro", "/", "--chdir", str(mounts.cwd)]


def runs_as_root() -> bool:
    return os.geteuid() == 0


def _namespaces(network: bool) -> list[str]:
    args = ["--unshare-user", "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID), "--disable-userns",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", _HOSTNAME]
    return args if network else [*args, "--unshare-net"]


def _kernel(tmpfs_bytes: int) -> list[str]:
    """/proc of the job's own PID namespace, /proc/sys read-only over it (the uid already may not write it: a
    second layer), the few devices a job needs, and /dev/shm of a set size."""
    return ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev",
            "--perms", "1777", "--size", str(tmpfs_bytes), "--tmpfs", "/dev/shm"]


def _setpriv(uid: int) -> list[str]:
    return [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]


def _files(mounts: JobMounts) -> list[str]:
    readable, writable = _outermost(mounts.readable), _outermost(mounts.writable)
    args = ["--perms", "1777", "--size", str(mounts.tmpfs_bytes), "--tmpfs", "/tmp"]
    bound = [*(Path(p) for p in _SYSTEM), *readable, mounts.folder]
    container = [Path(inside) for _, inside, _ in mounts.container]
    for parent in _parents([*(Path(f"/etc/{n}") for n in _ETC), Path(_CPU), *readable, mounts.folder,
                            *writable, *container], bound):
        args += ["--perms", "0755", "--dir", str(parent)]  # bwrap makes them 0700: the job's uid could not pass
    args += _system_mounts()
    if mounts.hosts is not None:
        args += ["--ro-bind", str(mounts.hosts), "/etc/hosts"]  # over the host's, bound just before
    if mounts.identity is not None:
        args += ["--ro-bind", str(mounts.identity[0]), "/etc/passwd", "--ro-bind", str(mounts.identity[1]),
                 "/etc/group"]
    args += ["--ro-bind-try", _CPU, _CPU]
    for path in readable:
        args += ["--ro-bind", str(path), str(path)]
    args += ["--ro-bind", str(mounts.folder), str(mounts.folder)]
    for path in mounts.scratch_tmpfs:
        args += ["--perms", "1777", "--size", str(OUTPUT_TMPFS_BYTES), "--tmpfs", str(path)]
    for path in writable:
        args += ["--bind", str(path), str(path)]
    for source, inside, may_write in mounts.container:
        if source in mounts.scratch_tmpfs:  # the job's view of it (a tmpfs), never the host's folder behind it
            args += ["--symlink", str(source), inside]
        else:
            args += ["--bind" if may_write else "--ro-bind", str(source), inside]
    return args


def _parents(paths: Iterable[Path], bound: Iterable[Path]) -> list[Path]:
    """The folders above ``paths`` that the sandbox makes itself (none inside a folder bound from the host),
    parents first."""
    mounted = set(bound)
    found: set[Path] = set()
    for path in paths:
        for parent in path.parents:
            if parent in (Path("/"), Path("/tmp")) or parent in mounted or any(m in parent.parents for m in mounted):
                continue
            found.add(parent)
    return sorted(found, key=lambda p: (len(p.parts), str(p)))


def job_mounts(
    folder: JobFolder,
    interpreter: Interpreter,
    *,
    checkpoints: Path,
    data: Iterable[Path],
    home: Path,
    network: bool,
    tmpfs_bytes: int = DEFAULT_TMPFS_BYTES,
) -> JobMounts:
    """A job's mounts: ``interpreter`` (the environment it runs on) and ``data`` (its channels, the offline
    model, the data folders local jobs may read) read-only, its folder's working parts and ``checkpoints``
    writable (output/data, never the rest of output/). A data folder that holds the bot's home is left out: the
    store is never a job's to read."""
    readable = [*interpreter.read_only_paths()]
    for path in data:
        real = Path(os.path.realpath(path))
        if real == home or real in home.parents:
            logger.warning("%s holds TRAINBOT_HOME; it is not mounted into local jobs", real)
            continue
        readable.append(real)
    for path in (folder.code_dir, folder.model_dir, folder.output_dir, folder.env_dir, folder.scratch_dir,
                 folder.input_data_dir):
        path.mkdir(parents=True, exist_ok=True)
    writable = (folder.code_dir, folder.model_dir, folder.output_dir, folder.env_dir, folder.scratch_dir,
                folder.input_data_dir, checkpoints)
    hosts = hosts_file(folder.path / "sandbox-hosts")
    identity = sandbox_identity(folder.path / "sandbox-passwd", folder.path / "sandbox-group", folder.scratch_dir)
    return JobMounts(folder.path, writable, tuple(readable), network, cwd=folder.code_dir, hosts=hosts,
                     identity=identity, tmpfs_bytes=tmpfs_bytes, scratch_tmpfs=(folder.output_dir.parent,),
                     container=container_tree(folder, checkpoints))


def hand_over(mounts: JobMounts, uid: int) -> None:
    """The folders a job writes, made the job's own on the host (``uid``, the uid its user namespace maps
    onto): what is in them already (its code, its environment, its channels' copies, the checkpoints of its
    lineage's earlier attempts) included. Links are changed themselves, never followed."""
    for top in _outermost(mounts.writable):
        hand_over_tree(top, uid)


def hand_over_tree(top: Path, uid: int) -> None:
    """``top`` and all in it made ``uid``'s, where the bot is root and the job's uid differs; links changed
    themselves, never followed."""
    if os.geteuid() != 0 or uid == os.getuid():
        return
    os.chown(top, uid, uid, follow_symlinks=False)
    for root, dirs, files in os.walk(top):
        for name in (*dirs, *files):
            os.chown(os.path.join(root, name), uid, uid, follow_symlinks=False)


def sandbox_identity(passwd: Path, group: Path, home: Path) -> tuple[Path, Path]:
    """The sandbox's /etc/passwd and /etc/group: the host's users (uids only, never a password field) with
    JOB_USER at INSIDE_UID, so tools that look the job's uid up (getpass, torch's caches) find a name."""
    users = [line for line in _etc_lines("passwd") if line.split(":")[2:3] != [str(INSIDE_UID)]]
    groups = [line for line in _etc_lines("group") if line.split(":")[2:3] != [str(INSIDE_UID)]]
    passwd.write_text("\n".join([*users, f"{JOB_USER}:x:{INSIDE_UID}:{INSIDE_UID}::{home}:/bin/sh", ""]))
    group.write_text("\n".join([*groups, f"{JOB_USER}:x:{INSIDE_UID}:", ""]))
    return passwd, group


def _etc_lines(name: str) -> list[str]:
    try:
        lines = Path(f"/etc/{name}").read_text(errors="replace").splitlines()
    except OSError:
        return []
    kept = []
    for line in lines:
        fields = line.split(":")
        if len(fields) >= 4 and not line.startswith("#"):
            kept.append(":".join([fields[0], "x", *fields[2:]]))
    return kept


#: SageMaker's training container tree.
CONTAINER_ROOT = "/opt/ml"


def container_tree(folder: JobFolder, checkpoints: Path) -> tuple[tuple[Path, str, bool], ...]:
    """The job's folders at ``/opt/ml`` inside the sandbox, as the training image lays them out: the model, the
    output, the code, the input (its config read-only, its channels' data writable as the job's own copies) and
    the lineage's checkpoint folder (which SageMaker fills from checkpoint_s3_uri)."""
    tree = (
        (folder.model_dir, f"{CONTAINER_ROOT}/model", True),
        (folder.output_dir.parent, f"{CONTAINER_ROOT}/output", True),
        (folder.code_dir, f"{CONTAINER_ROOT}/code", True),
        (folder.config_dir, f"{CONTAINER_ROOT}/input/config", False),
        (folder.input_data_dir, f"{CONTAINER_ROOT}/input/data", True),
        (checkpoints, f"{CONTAINER_ROOT}/checkpoints", True),
    )
    for source, _, _ in tree:
        source.mkdir(parents=True, exist_ok=True)  # bwrap binds only what exists
    return tree


def hosts_file(path: Path) -> Path:
    """The job's /etc/hosts: the host's, with the sandbox's own name on loopback. torchrun --standalone
    advertises its rendezvous under the host name, and gloo binds to what that name resolves to: unresolvable,
    the workers of a job on several processes wait for the rendezvous until they time out."""
    try:
        host = Path("/etc/hosts").read_text(errors="replace")
    except OSError:
        host = "127.0.0.1\tlocalhost\n"
    path.write_text(f"{host.rstrip()}\n127.0.0.1\t{_HOSTNAME}\n")
    return path


def sandbox_environment(env: Mapping[str, str], scratch: Path) -> dict[str, str]:
    """The job's variables inside: HOME, temporary files and caches in its scratch folder (the bot's own
    HOME and Hugging Face cache are not mounted)."""
    inside = dict(env)
    inside.update(
        HOME=str(scratch),
        TMPDIR=str(scratch / "tmp"),
        HF_HOME=str(scratch / "huggingface"),
        XDG_CACHE_HOME=str(scratch / "cache"),
        MPLCONFIGDIR=str(scratch / "matplotlib"),
    )
    for name in ("HF_HUB_CACHE", "HF_DATASETS_CACHE", "TRANSFORMERS_CACHE"):
        inside.pop(name, None)
    for name in [n for n in inside if n.startswith("LD_")]:
        # The wrapper, bwrap and setpriv run as the bot (root, where it is) with this environment: a loader
        # variable would load a library of the job's into them.
        inside.pop(name)
    (scratch / "tmp").mkdir(parents=True, exist_ok=True)
    return inside


def _system_mounts() -> list[str]:
    args: list[str] = []
    for path in _SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for name in _ETC:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """The paths that exist, without those inside another one of them (one bind covers them), parents first."""
    kept: list[Path] = []
    for path in sorted({Path(p) for p in paths if Path(p).exists()}, key=lambda p: (len(p.parts), str(p))):
        if not any(path == k or k in path.parents for k in kept):
            kept.append(path)
    return kept


@lru_cache(maxsize=8)
def _probe(executable: str, job_uid: int | None) -> str | None:
    """Run the sandbox's own layers, namespaces and mounts around ``true``: None when that works."""
    found = shutil.which(executable)
    if found is None:
        return "bwrap is not installed on this machine"
    if job_uid is not None and shutil.which("setpriv") is None:
        return "setpriv (util-linux), which a root bot needs to run jobs as another user, is not installed"
    mounts = JobMounts(Path("/usr"), (), (), network=False, cwd=Path("/"), tmpfs_bytes=1 << 20)
    sandbox = Sandbox("bwrap", executable=found, job_uid=job_uid or DEFAULT_JOB_UID)
    argv = [*sandbox.arguments(mounts), "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap could not start ({exc})"
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        logger.warning("bwrap does not work here: %s", reason)
        return f"bwrap does not work on this machine ({reason})"
    return None

"""Starting, signalling and finding local training processes: the only place the local backend forks.

`ProcessRunner` is the port the `LocalBackend` is given (a constructor argument), so callers can
substitute their own; `SubprocessRunner` is the real one. Every job runs under `wrapper.py`,
detached in its own session, so a bot restart neither kills it nor loses its exit code.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

logger = logging.getLogger(__name__)

WRAPPER = Path(__file__).with_name("wrapper.py")


class ProcessRunner(Protocol):
    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log_path: Path) -> int:
        """Start `argv` detached (new session), stdout and stderr appended to `log_path`; return its pid.
        The pid is also the process group id, so `signal_group` reaches every process of the job."""
        ...

    def signal_group(self, pid: int, sig: int, *, spare: tuple[str, ...] = ()) -> None:
        """Send `sig` to the job's process group; a group that is gone already is not an error.
        `spare`: processes whose program or script (their command's first or second word) ends with one of
        these are left out (where /proc exists)."""
        ...

    def is_alive(self, pid: int) -> bool: ...

    def group_alive(self, pgid: int) -> bool:
        """Whether any process of group `pgid` still runs (a sandbox's inner processes outlive its first one
        for a moment); where there is no /proc, whether `pgid` itself does."""
        ...


class SubprocessRunner:
    """Real processes. Keeps the Popen objects it started so their exits are reaped (no zombies);
    processes started by an earlier bot process are checked through the OS."""

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def spawn(self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, log_path: Path) -> int:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # survives the bot; Ctrl-C in the bot's terminal does not reach it
                close_fds=True,
            )
        self._children[proc.pid] = proc
        logger.info("started local job process %d: %s", proc.pid, " ".join(argv[:6]))
        return proc.pid

    def signal_group(self, pid: int, sig: int, *, spare: tuple[str, ...] = ()) -> None:
        members = _group_members(pid) if spare else None
        if members is None:
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                logger.info("process group %d is gone already; signal %d not sent", pid, sig)
            return
        for member, argv in members.items():
            if any(word.endswith(spare) for word in argv[:2]):
                continue
            try:
                os.kill(member, sig)
            except (ProcessLookupError, PermissionError):
                continue

    def is_alive(self, pid: int) -> bool:
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # exists, owned by someone else: not ours any more (pid reused)
            return False
        return not _is_zombie(pid)

    def group_alive(self, pgid: int) -> bool:
        members = _group_members(pgid)
        if members is None:
            return self.is_alive(pgid)
        self.is_alive(pgid)  # reaps our own child, which would otherwise stay a zombie in the group
        return any(not _is_zombie(member) for member in members)


def _group_members(pgid: int) -> dict[int, list[str]] | None:
    """{pid: argv} of the processes in group `pgid`, from /proc; None where there is no /proc."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    members: dict[int, list[str]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            members[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except (OSError, IndexError, ValueError):
            continue
    return members


def _is_zombie(pid: int) -> bool:
    # A finished child of another process still answers kill(pid, 0) until it is reaped.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"


def training_command(
    python: str, script: Path, args: Sequence[str], *, processes: int, exit_file: Path
) -> list[str]:
    """The wrapper around either one Python process or `torchrun` with `processes` workers.

    torchrun runs standalone (a rendezvous on a free localhost port), so two local jobs never clash;
    on the CPU torch.distributed uses gloo."""
    if processes > 1:
        inner = [
            python,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes",
            "1",
            "--nproc_per_node",
            str(processes),
            str(script),
            *args,
        ]
    else:
        inner = [python, "-u", str(script), *args]
    return [*wrapper_command(exit_file), *inner]


def wrapper_command(exit_file: Path) -> list[str]:
    """The wrapper up to its ``--``: the bot's own interpreter, isolated (``-I -S``: no site, no PYTHON*
    variables), so nothing of the job's environment folder ever runs with the bot's rights."""
    return [sys.executable, "-I", "-S", str(WRAPPER), str(exit_file), "--"]


def with_wrapper_options(argv: Sequence[str], options: Sequence[str]) -> list[str]:
    """``argv`` (wrapper_command, then the job's command) with ``options`` for the wrapper before its ``--``."""
    cut = list(argv).index("--")
    return [*argv[:cut], *options, *argv[cut:]]


#: Signals the backend sends, named for readability at call sites.
SIGTERM = int(signal.SIGTERM)
SIGKILL = int(signal.SIGKILL)

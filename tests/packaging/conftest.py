"""The installed artifact, as a team deploys it: the wheel built from this tree and installed, not editable,
into clean virtual environments by tools/install.sh, the script the Dockerfile runs, from the committed locks.

- ``installed_bot``: ``.venv-installed-bot`` from locks/bot.txt (the image's set: no torch), with the wheel the
  same call built into dist/.
- ``installed_local``: ``.venv-installed-local`` from locks/local.txt with that wheel, for the console on the
  local backend (torch and transformers); installed in the background while the bot's tests run.

Once installed, each shares the files it has byte for byte in common with the suite's own venv (hard links, as
the local backend's runtimes do: jobs/backends/local/shared_files.py), so a CI disk holds torch once; what runs
is still exactly what the lock installed.

Each is made by the script when it is missing and brought up to date when it is there (the lock's packages
are then already in place, and the wheel of this tree is built and installed again), so what runs is this
tree's wheel. The tests that use them live in one module (one xdist worker); a file lock still keeps two
sessions from building at once.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobs.backends.local.shared_files import share_identical_files
from jobs.file_lock import exclusive_lock
from tests.support.environment import outside_env

ROOT = Path(__file__).resolve().parents[2]
INSTALL = ROOT / "tools" / "install.sh"
DIST = ROOT / "dist"
BUILD_LOCK = ROOT / ".venv-installed.lock"
INSTALL_TIMEOUT_S = 1200  # a first install downloads and unpacks every locked package (torch's for local)


@dataclass(frozen=True)
class Installed:
    venv: Path
    wheel: Path

    @property
    def trainbot(self) -> Path:
        return self.venv / "bin" / "trainbot"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        """The test's environment less anything that could put this tree on the path or reach real services."""
        env = outside_env("PYTHON", "VIRTUAL_ENV")
        env.update(TRAINBOT_HOME=str(home), PYTHONIOENCODING="utf-8", **extra)
        return env

    def run(self, *args: str, home: Path, timeout: float = 180, **extra: str) -> subprocess.CompletedProcess[str]:
        """``trainbot ARGS`` from the installed venv, in a folder outside the tree."""
        home.mkdir(parents=True, exist_ok=True)
        return subprocess.run([str(self.trainbot), *args], cwd=home, env=self.env(home, **extra),
                              capture_output=True, text=True, timeout=timeout, check=False)


def _install_command(venv: Path, lock: str, package: str) -> list[str]:
    return [str(INSTALL), str(venv), f"locks/{lock}.txt", package]


def _check(done: subprocess.CompletedProcess[str] | tuple[int, str], what: list[str]) -> None:
    code, output = (done.returncode, done.stdout + done.stderr) if isinstance(done, subprocess.CompletedProcess) else done
    assert code == 0, f"{' '.join(what[1:])} failed:\n" + output[-4000:]


def the_wheel() -> Path:
    wheels = sorted(DIST.glob("trainbot-*.whl"))
    assert len(wheels) == 1, f"tools/install.sh left {[w.name for w in wheels]} in dist/, not one wheel"
    return wheels[0]


class BackgroundInstall:
    """tools/install.sh running beside the bot's tests. The venv shares its files with the suite's after each of
    two steps: torch alone first (as the script itself starts, by the same pip call), then the script. So the
    disk never holds a second torch beside the runtimes being built, nor the rest until a test asks for it."""

    def __init__(self, command: list[str], wheel: Path) -> None:
        self.command, self.wheel = command, wheel
        venv = Path(command[1])
        torch_first = ["bash", "-c", 'set -e; [ -x "$1/bin/python" ] || "${PYTHON:-python3}" -m venv "$1"; '
                       '"$1/bin/python" -m pip install --quiet --disable-pip-version-check --no-input --no-deps '
                       "-r locks/torch.txt", "torch-first", str(venv)]
        self._steps = [torch_first, command]
        self.process: subprocess.Popen[str] | None = None
        self.output, self.returncode = "", 0
        self._stopping = threading.Event()
        self._done = threading.Thread(target=self._run, daemon=True)
        self._done.start()

    def _run(self) -> None:
        for step in self._steps:
            if self._stopping.is_set():
                self.returncode = -1
                return
            self.process = subprocess.Popen(step, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            text=True)
            output, _ = self.process.communicate()
            self.output += output or ""
            self.returncode = self.process.returncode
            if self.returncode != 0:
                return
            _shared(Installed(Path(self.command[1]), self.wheel))

    def installed(self) -> Installed:
        self._done.join(timeout=INSTALL_TIMEOUT_S)
        assert not self._done.is_alive(), f"{' '.join(self.command[1:])} took over {INSTALL_TIMEOUT_S} s"
        _check((self.returncode, self.output), self.command)
        return Installed(Path(self.command[1]), self.wheel)

    def stop(self) -> None:
        self._stopping.set()  # only the bot's tests ran: the local venv is not waited for
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
        self._done.join(timeout=60)


@dataclass
class Installs:
    """The bot's venv, ready; the local one, being installed beside the bot's tests (torch takes minutes)."""

    bot: Installed
    local_install: BackgroundInstall

    def local(self) -> Installed:
        return self.local_install.installed()


def _shared(installed: Installed) -> Installed:
    share_identical_files(installed.venv / "lib", [Path(sys.prefix) / "lib"])
    return installed


@pytest.fixture(scope="session")
def installs() -> Iterator[Installs]:
    command = _install_command(ROOT / ".venv-installed-bot", "bot", ".")
    with exclusive_lock(BUILD_LOCK):
        _check(subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                              check=False), command)
        wheel = the_wheel()
    local = BackgroundInstall(_install_command(ROOT / ".venv-installed-local", "local", str(wheel)), wheel)
    yield Installs(_shared(Installed(Path(command[1]), wheel)), local)
    local.stop()


@pytest.fixture(scope="session")
def installed_bot(installs: Installs) -> Installed:
    return installs.bot


@pytest.fixture(scope="session")
def installed_local(installs: Installs) -> Installed:
    return installs.local()

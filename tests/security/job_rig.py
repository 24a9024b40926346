"""A team's own code launched for real on the local backend, as `trainbot launch` does it: a script committed to a
git repository made here, fetched, run by the training toolkit on the image runtime in the real bwrap sandbox,
then read back by the backend the bot uses. Used by the tests of what a job may reach on the host
(test_job_privileges, test_job_files, test_job_limits)."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.errors import NotFound
from jobs.records import RemoteJob
from tests.security.cli import clean_env, trainbot
from tests.support.git_repos import make_repo
from tests.support.runtimes import link_runtimes

JOB_TIMEOUT_S = 300


@dataclass
class TeamJobs:
    """One bot home on the local backend and the team repository its jobs come from."""

    root: Path
    home: Path
    settings: dict[str, str] = field(default_factory=dict)  # TRAINBOT_* the CLI runs with

    @classmethod
    def at(cls, root: Path, home: Path | None = None, **settings: str) -> TeamJobs:
        home = home or root / "home"
        link_runtimes(home)  # own code runs on its image's runtime: the session's, built once
        return cls(root, home, {"TRAINBOT_LOCAL_SANDBOX": "bwrap", **settings})

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(self.home, TRAINBOT_CODE_SOURCES=f"file://{self.root / 'git'}/", **self.settings, **extra)

    def commit(self, name: str, script: str) -> str:
        """`code=...` of a repository whose jobs/run.py is ``script``."""
        repo = make_repo(self.root / "git", name)
        commit = repo.commit({"jobs/run.py": script})
        return f"code=git+{repo.url}@{commit} entry=jobs/run.py"

    def launch(self, name: str, script: str, *args: str) -> str:
        """The job (attempt 1) `trainbot launch` started for ``script``; ``args`` are more /train keys."""
        done = trainbot(self.env(), "launch", *self.commit(name, script).split(), *args)
        assert done.returncode == 0, done.stderr
        return f"{done.stdout.strip().splitlines()[-1]}-1"

    def backend(self) -> LocalBackend:
        """The backend the bot reads jobs with (a new one each time, as a restarted bot or the CLI makes)."""
        return LocalBackend(self.home, clock=SystemClock())

    def wait(self, job: str, *, timeout: float = JOB_TIMEOUT_S) -> RemoteJob:
        """The job once it ended, as the backend describes it."""
        deadline = time.monotonic() + timeout
        backend = self.backend()
        while True:
            try:
                remote = backend.describe(job)
                if remote.status.is_terminal():
                    return remote
            except NotFound:  # its folder is not there yet
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{job} did not end within {timeout:.0f} s: {self.log(job)[-3000:]}")
            time.sleep(0.5)

    def folder(self, job: str) -> Path:
        return self.home / "local-jobs" / job

    def log(self, job: str) -> str:
        try:
            return (self.folder(job) / "logs" / "train.log").read_text(errors="replace")
        except OSError:
            return ""

    def said(self, job: str, what: str) -> list[str]:
        """What the job's script printed on its `[probe] WHAT: ...` lines."""
        prefix = f"[probe] {what}: "
        return [line[len(prefix):] for line in self.log(job).splitlines() if line.startswith(prefix)]


def run_as(uid: int, *argv: str) -> subprocess.CompletedProcess[str]:
    """``argv`` run as ``uid`` (no groups), as another user of the machine would run it."""
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv],
                          capture_output=True, text=True, timeout=30, check=False)

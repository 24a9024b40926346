"""Real git repositories for the own-code tests: a working copy and the bare repository it pushes to,
reachable as ``file://`` (the bot fetches it exactly as it would fetch GitHub)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_IDENTITY = ["-c", "user.name=trainbot tests", "-c", "user.email=tests@trainbot.invalid", "-c", "commit.gpgsign=false"]


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *_IDENTITY, *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {done.stderr}")
    return done.stdout.strip()


@dataclass(frozen=True)
class GitRepo:
    work: Path  # a working copy, on branch main
    bare: Path  # what the bot fetches

    @property
    def url(self) -> str:
        return f"file://{self.bare}"

    def commit(self, files: Mapping[str, str], message: str = "change") -> str:
        """Write ``files`` (path -> text), commit them on main, push; returns the commit."""
        for name, text in files.items():
            path = self.work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", "-m", message)
        git(self.work, "push", "-q", "origin", "HEAD:main")
        return git(self.work, "rev-parse", "HEAD")

    def tag(self, name: str, *, annotated: bool = False) -> None:
        git(self.work, "tag", *(["-a", "-m", name] if annotated else []), name)
        git(self.work, "push", "-q", "origin", name)


def make_repo(root: Path, name: str = "repo") -> GitRepo:
    """An empty bare repository ``root/name.git`` and a working copy pushing to it."""
    bare, work = root / f"{name}.git", root / f"{name}-work"
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "--bare", "-b", "main", str(bare))
    git(root, "init", "-q", "-b", "main", str(work))
    git(work, "remote", "add", "origin", str(bare))
    return GitRepo(work, bare)

"""The first step of a local job with own code, as the local backend sets it up before the spawn: the job's
command put behind ``prepare.py`` (which builds the image runtime when it is not there yet, layers the job's
environment on it and installs its ``requirements.txt``, then becomes the job), and how that install runs
(requirements.py: the configured index, in bwrap with only the job's environment writable)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs.backends.local.environment import base_environment
from jobs.backends.local.interpreter import Interpreter
from jobs.backends.local.requirements import index_options
from jobs.backends.local.requirements import stage as stage_requirements
from jobs.backends.local.runtime import Runtime
from jobs.backends.local.sandbox import JobMounts, Sandbox, hand_over
from jobs.backends.local.state import JobFolder

PREPARE_MODULE = "jobs.backends.local.prepare"
PLAN_FILE = "prepare.json"  # read, then removed, by the step (prepare.main)


@dataclass(frozen=True)
class FirstStep:
    """The bot's side of a job's first step: ``home`` (TRAINBOT_HOME), the bot's ``python``, its ``sandbox``."""

    home: Path
    python: str
    sandbox: Sandbox

    def command(self, folder: JobFolder, runtime: Runtime, source: Path | None, argv: list[str],
                env: dict[str, str], *, isolated: bool) -> tuple[list[str], dict[str, str]]:
        """The job's command (``argv``: the wrapper and its options up to ``--``, then the job) behind its first
        step. The wrapper and the step are the bot's own code and run on the bot's Python, with the allowlisted
        environment and this machine's pip settings (the build reads them); the job keeps its own environment
        (``env``). ``source``: a team's code, whose requirements.txt the step installs (the bot's own scripts
        bring none to install). BadInput (one sentence) for a requirements.txt that names another source."""
        cut = argv.index("--") + 1
        wrapper, job = argv[:cut], argv[cut:]
        wrapper[0] = self.python  # the job's own Python does not exist until the first step layers it
        plan: dict[str, Any] = {
            "image": runtime.image.key, "home": str(self.home), "base_python": self.python,
            "env_dir": str(folder.env_dir), "command": job, "job_env": env,
            # The job's uid on the host: the environment the step layers is the job's to install into.
            "owner": self.sandbox.host_uid() if isolated else None,
        }
        # requirements.txt: its lines checked now and by the step; the code's own wheels copied beside it.
        if source is not None and (source / "requirements.txt").is_file():
            requirements = source / "requirements.txt"
            plan["requirements"] = str(stage_requirements(requirements, source, folder.path))
            plan["install"] = self.install(folder, runtime, isolated=isolated)
        plan_file = folder.path / PLAN_FILE
        plan_file.write_text(json.dumps(plan, indent=1))
        step_env = base_environment(self.python)
        step_env.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
        step_env["PYTHONUNBUFFERED"] = "1"
        return [*wrapper, self.python, "-m", PREPARE_MODULE, str(plan_file)], step_env

    def install(self, folder: JobFolder, runtime: Runtime, *, isolated: bool) -> dict[str, Any]:
        """How requirements.txt is installed: the configured index as explicit options, and (sandboxed) bwrap
        with the host's network, the job's environment and scratch folder writable, and the runtime, the system,
        the code's own wheels and the index's local folders read-only (requirements.py)."""
        index = index_options(Path(self.python))
        install: dict[str, Any] = {"index": index, "scratch": str(folder.scratch_dir)}
        if isolated:
            local_index = [Path(v.removeprefix("file://")) for v in index if v.startswith(("file://", "/"))]
            readable = (*Interpreter.planned(runtime.prefix, Interpreter.of(self.python)).read_only_paths(),
                        made(runtime.prefix.parent), *local_index, made(folder.path / "wheels"))
            mounts = JobMounts(folder.path, (made(folder.env_dir), made(folder.scratch_dir)), readable,
                               network=True, cwd=folder.scratch_dir)
            hand_over(mounts, self.sandbox.host_uid())  # pip runs as the job's uid there
            install["sandbox"] = self.sandbox.arguments(mounts)
        return install


def made(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path

"""How one local job is confined at launch: the sandbox around its command (sandbox.py) and the limits it runs
with (limits.py: its cgroups, the wrapper's disk watch), put together for the backend in one place."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from jobs.backends.local import limits as local_limits
from jobs.backends.local.interpreter import Interpreter
from jobs.backends.local.limits import JobLimits
from jobs.backends.local.runner import with_wrapper_options
from jobs.backends.local.sandbox import Sandbox, hand_over, job_mounts, sandbox_environment
from jobs.backends.local.state import JobFolder, JobState


@dataclass(frozen=True)
class Confinement:
    sandbox: Sandbox
    limits: JobLimits
    home: Path

    def wrap(
        self, folder: JobFolder, state: JobState, argv: list[str], env: dict[str, str], *, interpreter: Interpreter,
        checkpoints: Path, data: Iterable[Path], network: bool, isolated: bool,
    ) -> tuple[list[str], dict[str, str]]:
        """(argv, env) of the job confined: in the sandbox when ``isolated`` (its writable folders handed to the
        job's uid), in its cgroups (recorded in ``state``), its folders watched by the wrapper."""
        writable = [folder.code_dir, folder.model_dir, folder.output_dir, folder.env_dir, folder.scratch_dir,
                    folder.input_data_dir, checkpoints]
        if isolated:
            mounts = job_mounts(folder, interpreter, checkpoints=checkpoints, data=data, home=self.home,
                                network=network, tmpfs_bytes=self.limits.tmpfs_bytes)
            argv, env = self.sandbox.command(argv, mounts), sandbox_environment(env, folder.scratch_dir)
            hand_over(mounts, self.sandbox.host_uid())
        return with_wrapper_options(argv, self.limits.wrapper_options(writable, self._cgroups(folder, state))), env

    def note(self) -> str:
        """The plan card's words on the limits."""
        return self.limits.describe(local_limits.machine_cgroups()[0])

    def _cgroups(self, folder: JobFolder, state: JobState) -> list[Path]:
        """The job's cgroup folders with its limits, recorded in its state; none where the machine has no cgroup
        for the bot."""
        cgroups = local_limits.machine_cgroups()[0]
        if cgroups is None:
            return []
        made = cgroups.create(folder.name, self.limits)
        state.cgroups = [str(path) for path in made]
        return made

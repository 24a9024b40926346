"""Which Python a local job runs on, and what its command and environment are.

The bot's own scripts run on the bot's interpreter, except the LLM script (text-generation), which needs the
image's TRL and PEFT; it and a team's own script run on the image runtime of the training image the spec names
(runtime.py), with what that image's torch behaved like and, offline, the tiny BERT (or the tiny causal LM and
generated chats) saved by that runtime's transformers. The job itself runs on its own environment layered on that
interpreter (interpreter.py: what requirements.txt installs goes there), and the sandbox mounts the
interpreter's environment read-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.backends.local import container as local_container
from jobs.backends.local.cpu_standin import STANDIN_ENV
from jobs.backends.local.environment import base_environment
from jobs.backends.local.offline_assets import LocalAssets, ensure_local_assets
from jobs.backends.local.offline_chat import ChatAssets
from jobs.backends.local.runtime import (
    ImageRuntimes,
    Runtime,
    ensure_runtime_chat_assets,
    image_for,
    image_of,
    missing_runtime,
    no_local_runtime,
)
from jobs.backends.local.scaling import LocalLimits, LocalRun, script_arguments
from jobs.backends.local.state import JobFolder
from jobs.planning import own_code
from jobs.planning.spec import LLM_TASK, JobSpec

if TYPE_CHECKING:
    from jobs.planning.plan import LaunchPlan


@dataclass(frozen=True)
class JobPython:
    """The interpreter of one job: the bot's, or an image runtime's."""

    python: str
    runtime: Runtime | None = None

    @classmethod
    def of(cls, plan: LaunchPlan, runtimes: ImageRuntimes, bot_python: str) -> JobPython:
        """A team's own script and the LLM script: the image's runtime (built by the job's first step when it is
        not there yet, prepare.py; refused here in one sentence when the table lacks the image or it cannot run
        here); the bot's other scripts: the bot's Python."""
        if not runs_on_image_runtime(plan.spec):
            return cls(bot_python)
        image = image_for(plan.spec)
        return cls(str(runtimes.path(image) / "bin" / "python"), Runtime(image, runtimes.path(image) / "bin" / "python"))

    def assets(self, plan: LaunchPlan, runtimes: ImageRuntimes, home: Path, *,
               offline: bool) -> LocalAssets | ChatAssets | None:
        """The offline model and data this job is given, saved by the transformers it runs on."""
        if not offline:
            return None
        if self.runtime is None:  # the tiny model is needed even when the data is the person's own folder
            return ensure_local_assets(home)
        if plan.spec.task == LLM_TASK and not plan.spec.own_code:  # its tiny chat model, saved by the runtime
            return ensure_runtime_chat_assets(runtimes, runtimes.ensure(self.runtime.image))
        return None  # a team's script trains the model it names: the tiny one is only for the bot's presets

    def code_environment(self, code_env: dict[str, str], limits: LocalLimits) -> dict[str, str]:
        """The plan's environment (the spot entry's) plus the runtime's, with the entry's clock scaled to a
        local run of minutes."""
        env = dict(code_env)
        if self.runtime is None:
            return env
        env.update(self.runtime.environment())
        env[STANDIN_ENV] = "1"  # what the script asks of a GPU, read for the CPU (cpu_standin)
        if own_code.CHECKPOINT_MINUTES_ENV in env:
            planned = float(env[own_code.CHECKPOINT_MINUTES_ENV])
            env[own_code.CHECKPOINT_MINUTES_ENV] = f"{min(planned, limits.own_checkpoint_minutes):g}"
        return env

    def command(
        self, kind: str, folder: JobFolder, run: LocalRun, hps: dict[str, Any], channels: dict[str, Path], entry: str,
        *, threads: int, python: str | None = None,
    ) -> tuple[list[str], dict[str, str]]:
        """(argv, environment) of the job on ``python`` (the job's own environment layered on this interpreter,
        interpreter.py; this interpreter itself when None), ``threads`` per process: allowlisted variables only,
        never the bot's own."""
        python = python or self.python
        base = base_environment(python)
        if self.runtime is not None:
            base.pop("PYTHONPATH", None)  # the bot's modules would shadow the image's packages
        if run.offline:
            base.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
        if kind == local_container.TOOLKIT:
            env = local_container.toolkit_environment(base, folder, threads=threads)
            return local_container.toolkit_command(python, folder), env
        env = local_container.direct_environment(
            base, folder, hyperparameters=hps, channels=channels, entry_point=entry, threads=threads
        )
        argv = local_container.direct_command(python, folder, entry, script_arguments(hps), run.processes)
        return argv, env


def runs_on_image_runtime(spec: JobSpec) -> bool:
    """A team's script (as it would in the image), and the bot's LLM script (TRL and PEFT are the image's; the
    bot itself does not install them)."""
    return spec.own_code or spec.task == LLM_TASK


def runtime_note(plan: LaunchPlan, run: LocalRun, runtimes: ImageRuntimes) -> str:
    """The plan card's local line for the LLM script: the scaled run and the image runtime it runs on."""
    image = image_of(plan.spec)
    if image is None:
        return f"{run.note()}; ⚠ {missing_runtime(plan.spec)}"
    built = "" if runtimes.is_built(image) else " (built on the first launch, a few minutes, then kept)"
    return f"{run.note()}; {image.label()}{built}"


def own_code_note(plan: LaunchPlan, run: LocalRun, runtimes: ImageRuntimes) -> str:
    """The plan card's local line for own code: the scaled run and the image runtime it runs on."""
    image = image_of(plan.spec)
    if image is None:
        return f"{run.note()}; ⚠ {missing_runtime(plan.spec)}"
    if image.local:
        return f"{run.note()}; ⚠ {no_local_runtime(image)}"
    built = "" if runtimes.is_built(image) else " (built by the first job, a few minutes, then kept)"
    return f"{run.note()}; {image.label()}{built}; {local_container.RUNNER_LABELS[local_container.TOOLKIT]}"

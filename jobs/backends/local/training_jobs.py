"""The local backend: the project's `training/` scripts as processes on this machine, reported in
SageMaker's vocabulary, so the watcher, recovery and reports cannot tell it from the cloud.

A job is a folder `home/local-jobs/<job_name>/` laid out like a SageMaker container (model/, output/,
input/config/, code/, logs/) with its state in `state.json`. The process runs detached under a small
wrapper that records its exit code, so a new `LocalBackend` on the same home (a restarted bot, the CLI
next to the watcher) describes every job correctly. `checkpoint_s3_uri` maps to
`home/checkpoints/<bucket>/<key>`: attempts of one lineage share it, two lineages never do.

How a job's state reads as SageMaker statuses is in `local_status`; how a plan is scaled down to
this machine, in `local_scaling`; process handling, in `local_runner`.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.backends.archives import ArchiveLimits
from jobs.backends.code_sources import CodeMaterializer, GitCodeSources, RunnableSource, S3Tarballs
from jobs.backends.hub_token import TOKEN_ENV, HubTokenSecret
from jobs.backends.local import container as local_container
from jobs.backends.local import limits as local_limits
from jobs.backends.local import state as local_state
from jobs.backends.local import status as local_status
from jobs.backends.local.code import (
    job_hyperparameters,
    runnable_source,
    save_metric_definitions,
)
from jobs.backends.local.confinement import Confinement
from jobs.backends.local.first_step import FirstStep
from jobs.backends.local.interpreter import Interpreter, layered_environment
from jobs.backends.local.job_files import job_file_exists
from jobs.backends.local.job_python import JobPython, own_code_note, runs_on_image_runtime, runtime_note
from jobs.backends.local.limits import JobLimits
from jobs.backends.local.runner import SIGKILL, SIGTERM, ProcessRunner, SubprocessRunner
from jobs.backends.local.runtime import ImageRuntimes
from jobs.backends.local.sandbox import Sandbox, runs_as_root
from jobs.backends.local.scaling import (
    LocalLimits,
    check_own_channels,
    check_own_model,
    check_readable_folders,
    is_offline,
    local_forecast_target,
    scale_plan,
    threads_per_process,
)
from jobs.backends.local.state import JobFolder, JobState
from jobs.clock import Clock
from jobs.errors import BackendError, BadInput, ConfigError, InvalidState, NotFound, TrainbotError
from jobs.home import secure_home
from jobs.planning.hyperparameters import check_launch_hyperparameters
from jobs.records import JobSummary, MetricSeries, Progress, RemoteJob, RemoteStatus

if TYPE_CHECKING:
    from collections.abc import Sequence

    from jobs.planning.forecast import ForecastTarget
    from jobs.planning.plan import LaunchPlan

logger = logging.getLogger(__name__)

#: SageMaker gives a stopped container 120 s after SIGTERM before it kills it.
STOP_GRACE_SECONDS = 120
_JOB_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")  # SageMaker's TrainingJobName rule
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class LocalBackend:
    """The TrainingBackend port on local processes (see the module docstring)."""

    name = "local"

    def __init__(
        self,
        home: Path,
        *,
        clock: Clock,
        runner: ProcessRunner | None = None,
        python: str = sys.executable,
        offline: bool | None = None,
        limits: LocalLimits | None = None,
        use_toolkit: bool | None = None,
        runtimes: ImageRuntimes | None = None,
        sandbox: Sandbox | None = None,
        own_code_unsandboxed: bool = False,
        code_limits: ArchiveLimits | None = None,
        data_roots: Sequence[Path] = (),
        hub_token_arn: str = "",
        job_limits: JobLimits | None = None,
    ) -> None:
        self._home = Path(home).resolve()  # job processes run elsewhere: every path they get is absolute
        secure_home(self._home)
        self._jobs_root = self._home / "local-jobs"
        self._clock = clock
        self._runner = runner or SubprocessRunner()
        self._python = python
        self._offline = offline
        self._limits = limits or LocalLimits()
        self._use_toolkit = use_toolkit  # None: the toolkit where it can run, else the direct runner
        self._sandbox = sandbox or Sandbox()
        # The console (one person, their own machine) may run own code unsandboxed; serve and the CLI may not.
        self._own_code_unsandboxed = own_code_unsandboxed
        self._data_roots = tuple(data_roots)
        self._job_limits = job_limits or JobLimits.defaults()
        self._confinement = Confinement(self._sandbox, self._job_limits, self._home)
        code_limits = code_limits or ArchiveLimits()
        self._code = CodeMaterializer(
            self._home, GitCodeSources(self._home, limits=code_limits),
            S3Tarballs(self._home, _s3_client, limits=code_limits), limits=code_limits,
        )
        self._code_limits = code_limits
        # A team's own script runs on its training image's packages, not the bot's (runtime.py).
        self._runtimes = runtimes or ImageRuntimes(self._home)
        # A gated model's token: read at each launch, into the job process's environment only (hub_token.py).
        self._hub_token = HubTokenSecret.configured(hub_token_arn, _secrets_client)

    # ------------------------------------------------------------------ the port

    def launch(self, job_name: str, plan: LaunchPlan) -> None:
        if not _JOB_NAME.match(job_name):
            raise BadInput(
                f"Job name {job_name!r} is not valid: use letters, digits and hyphens, at most 63."
            )
        check_launch_hyperparameters(plan.estimator.get("hyperparameters") or {}, own=plan.spec.own_code)
        folder = JobFolder(self._jobs_root, job_name)
        with folder.locked():
            if folder.exists():  # a retried launch: the job is there, never start a second process
                logger.info("local job %s exists already; not starting it again", job_name)
                return
            self._job_limits.check_room(self._home)  # a full disk is told, never a launch that does nothing
            shutil.rmtree(folder.path, ignore_errors=True)  # leftovers of a launch that died before its state
            try:
                self._start(folder, plan)
            except TrainbotError:  # a refusal (the backend's or the code's): no half of a job stays
                shutil.rmtree(folder.path, ignore_errors=True)
                raise
            except OSError as exc:
                shutil.rmtree(folder.path, ignore_errors=True)
                raise BackendError(
                    f"Could not start local job {job_name}: {exc}; check disk space and {self._python}."
                ) from exc

    def describe(self, job_name: str) -> RemoteJob:
        folder = self._folder(job_name)
        return local_status.remote_job(folder, self._refresh(folder))

    def list_changed(self, since: datetime | None) -> list[JobSummary]:
        summaries = []
        for folder in self._folders():
            state = self._refresh(folder)
            if since is None or state.last_modified > since:
                summaries.append(JobSummary(state.name, RemoteStatus(state.status), state.last_modified))
        return sorted(summaries, key=lambda s: s.last_modified or _EPOCH, reverse=True)

    def stop(self, job_name: str) -> None:
        """SIGTERM to every process of the job (a best-effort save, where a host delivers it), SIGKILL
        after STOP_GRACE_SECONDS."""
        self._signal_job(job_name, "stop_requested_at", SIGTERM)

    def take_capacity(self, job_name: str) -> None:
        """Simulate a spot reclaim as SageMaker's image lives it: the toolkit never passes SIGTERM on to
        the script, so the job's processes die with nothing to act on (SIGKILL). Whatever came after the
        last checkpoint on disk is lost; the job ends Stopped / MaxWaitTimeExceeded. Only for spot jobs."""
        self._signal_job(job_name, "capacity_taken_at", SIGKILL)

    def log_tail(self, job_name: str, lines: int = 40) -> list[str]:
        return self._folder(job_name).log_tail(lines)

    def host_log_tails(self, job_name: str, lines: int) -> list[tuple[str, list[str]]]:
        """One host here: the job's log file (every local process writes to it), labelled by its path."""
        folder = self._folder(job_name)
        return [(str(folder.log_path), folder.log_tail(lines))]

    def metric_series(self, job_name: str) -> MetricSeries:
        folder = self._folder(job_name)
        return local_status.metric_series(folder)

    def trained_model(self, job_name: str) -> str | None:
        """jobs.backend.StandIn: the model this job's run trained (the tiny BERT offline)."""
        return self._folder(job_name).load().model_label or None

    def console_links(self, job_name: str, model_artifacts: str | None = None) -> dict[str, str]:
        folder = self._folder(job_name)
        state = folder.load()
        return {
            "log": str(folder.log_path),
            "model": str(folder.model_dir),
            "output": str(folder.output_dir),
            "checkpoints": state.checkpoint_dir,
        }

    def scaling_note(self, plan: LaunchPlan) -> str | None:
        run = scale_plan(plan, offline=is_offline(self._offline), limits=self._limits)
        isolation = f"{self._sandbox.describe(network=not run.offline)}; {self._confinement.note()}"
        if plan.spec.own_code:
            return f"{own_code_note(plan, run, self._runtimes)}; {isolation}"
        if runs_on_image_runtime(plan.spec):  # the LLM script: TRL and PEFT are the image's
            return f"{runtime_note(plan, run, self._runtimes)}; {isolation}"
        return f"{run.note()}; {local_container.RUNNER_LABELS[self._runner_kind(self._python)]}; {isolation}"

    @property
    def sandbox(self) -> Sandbox:
        """How this backend isolates other people's code (its endpoints' handlers use the same)."""
        return self._sandbox

    @property
    def own_code_unsandboxed(self) -> bool:
        """Whether other people's code may run here without the sandbox (the console, the demo)."""
        return self._own_code_unsandboxed

    def own_code_refusal(self) -> str | None:
        """The sentence own code (code=) is refused with here, before anything is recorded: on serve and the
        CLI it runs only sandboxed; None where it may run."""
        try:
            # As root, own code runs only in the sandbox, the console's included: unsandboxed it would run as root.
            if self._sandbox.active() or (self._own_code_unsandboxed and not runs_as_root()):
                return None
        except ConfigError as exc:
            return exc.user_message()
        return self._sandbox.refuse_own_code().user_message()

    def progress(self, job_names: Sequence[str]) -> dict[str, Progress]:
        """Each job's last `[progress]` line (a file read each, no API to batch)."""
        found: dict[str, Progress] = {}
        for name in job_names:
            try:
                line = self.job_progress(name)
            except NotFound:
                continue  # its folder is not there yet (launching)
            if line is not None:
                found[name] = local_state.as_progress(line, self._folder(name))
        return found

    def forecast_target(self, plan: LaunchPlan) -> ForecastTarget:
        """The scaled-down run this backend makes of ``plan``, on this machine's CPU."""
        run = scale_plan(plan, offline=is_offline(self._offline), limits=self._limits)
        return local_forecast_target(plan, run)

    # ------------------------------------------------------------------ SimulatedSpot (jobs.backend)

    def saved_checkpoint(self, job_name: str) -> bool:
        """trainer_state.json is written last into a checkpoint folder: its presence means a whole one."""
        folder = Path(self._folder(job_name).load().checkpoint_dir)
        try:  # the job's own folder: nothing in it is followed (a link to another lineage's checkpoints)
            names = [e.name for e in os.scandir(folder) if e.name.startswith("checkpoint-") and e.is_dir(
                follow_symlinks=False)]
        except OSError:
            return False
        return any(job_file_exists(folder, f"{name}/trainer_state.json") for name in names)

    def job_progress(self, job_name: str) -> dict[str, float | int] | None:
        """The last `[progress]` line: {"step", "max_steps", "loss", "eta_s"}; None before the first."""
        return local_state.last_progress(self._folder(job_name).log_tail(400))

    def resumed_from_step(self, job_name: str) -> int | None:
        """The checkpoint step this job resumed from, as its log says; None for a fresh start."""
        return local_status.resumed_from_step(self._folder(job_name))

    def steps_redone(self, job_name: str) -> int | None:
        """Steps this job trains again after the attempt before it was killed; None for a fresh start."""
        return local_status.steps_redone(self._folder(job_name))

    def checkpoint_folder(self, checkpoint_uri: str) -> Path:
        """The local folder standing in for `checkpoint_uri` (local_state.checkpoint_folder)."""
        return local_state.checkpoint_folder(self._home, checkpoint_uri)

    # ------------------------------------------------------------------ launching

    def _start(self, folder: JobFolder, plan: LaunchPlan) -> None:
        isolated = self._sandbox.active()  # before any code is fetched: a refusal leaves nothing behind
        if plan.spec.own_code and not isolated and (not self._own_code_unsandboxed or runs_as_root()):
            raise self._sandbox.refuse_own_code()
        offline = is_offline(self._offline)
        # The code first: a refused archive or repository costs no image runtime build (minutes, once).
        source = runnable_source(self._code, plan)
        job_python = JobPython.of(plan, self._runtimes, self._python)
        assets = job_python.assets(plan, self._runtimes, self._home, offline=offline)
        run = scale_plan(plan, offline=offline, limits=self._limits, assets=assets)
        if plan.spec.own_code:
            check_own_channels(plan, run)
            check_own_model(plan, run)
            if isolated and runs_as_root():  # the job reads the team's folders as another uid than their owner's
                check_readable_folders(run, self._sandbox.job_uid)
        # A team's script runs on its image runtime, which always has the toolkit (it may not be built yet).
        kind = local_container.TOOLKIT if job_python.runtime is not None else self._runner_kind(job_python.python)
        entry, code_env = self._snapshot(folder, source, unpack=kind == local_container.DIRECT)
        code_env = job_python.code_environment(code_env, self._limits)
        uri = plan.estimator.get("checkpoint_s3_uri")
        checkpoints = self.checkpoint_folder(uri) if uri else folder.path / "checkpoints"
        for path in (folder.model_dir, folder.output_dir, folder.config_dir, folder.log_path.parent, checkpoints):
            path.mkdir(parents=True, exist_ok=True)
        hps = job_hyperparameters(plan, run.hyperparameters, folder, checkpoints)
        save_metric_definitions(folder, plan)
        channels = run.channels
        instance_type = str(plan.estimator.get("instance_type", ""))
        local_container.write_container_config(
            folder, hyperparameters=hps, channels=channels, entry_point=entry, instance_type=instance_type,
            processes=run.processes, keep_free_bytes=self._job_limits.free_min_bytes,
        )
        now = self._clock.now()
        state = JobState(
            name=folder.name,
            created_at=now,
            last_modified=now,
            instance_type=instance_type,
            instance_count=int(plan.estimator.get("instance_count", 1)),
            spot=bool(plan.estimator.get("use_spot_instances")),
            task=plan.spec.task or "",
            runner=kind,
            isolation="bwrap" if isolated else "",
            processes=run.processes,
            offline=offline,
            note=f"{run.note()}; {local_container.RUNNER_LABELS[kind]}; {self._sandbox.describe(network=not offline)}",
            model_label=run.model_label,
            checkpoint_dir=str(checkpoints),
            hyperparameters=hps,
            max_run=plan.estimator.get("max_run"),
            transitions=[{"status": "Starting", "start": now.isoformat(), "end": None}],
            limits=self._job_limits.figures(),
        )
        folder.save(state)  # before the spawn: a crash in between leaves a record, never a stray process
        # The job's own environment, layered on the interpreter it runs on (the bot's, or its image runtime):
        # requirements.txt installs there, never into the interpreter's. A team's runtime may not be built yet:
        # the job's first step builds it and layers the environment (prepare.py), before the job itself starts.
        if job_python.runtime is not None:
            interpreter = Interpreter.planned(job_python.runtime.prefix, Interpreter.of(self._python))
            python = str(folder.env_dir / "bin" / "python")
        else:
            interpreter = Interpreter.of(job_python.python)
            python = str(layered_environment(interpreter, folder.env_dir))
        threads = threads_per_process(self._limits, run.processes, self._running_processes(), os.environ.get(
            "OMP_NUM_THREADS"))
        argv, env = job_python.command(kind, folder, run, hps, channels, entry, threads=threads, python=python)
        env.update(code_env)  # the plan's own variables (the spot entry's), as the estimator's environment=
        if self._hub_token is not None:  # the process's environment only: never the state, the note or the log
            env[TOKEN_ENV] = self._hub_token.token()
        runtimes = [_made(self._runtimes.path(job_python.runtime.image).parent)] if job_python.runtime else []
        data = [self._home / "assets", *([assets.root] if assets else []), *channels.values(), *self._data_roots,
                *_local_model(run.hyperparameters), *runtimes]
        argv, env = self._confinement.wrap(folder, state, argv, env, interpreter=interpreter, checkpoints=checkpoints,
                                           data=data, network=not offline, isolated=isolated)
        if job_python.runtime is not None:
            argv, env = FirstStep(self._home, self._python, self._sandbox).command(
                folder, job_python.runtime, Path(source.source_dir) if plan.spec.own_code else None, argv, env,
                isolated=isolated)
        try:
            state.pid = self._runner.spawn(argv, env=env, cwd=folder.path, log_path=folder.log_path)
        except OSError:
            local_limits.remove(state.cgroups)
            raise
        folder.save(state)
        logger.info("launched local job %s (pid %s, %d threads a process): %s", folder.name, state.pid, threads,
                    state.note)

    def _running_processes(self) -> int:
        """The training processes of the local jobs running now (their cores are taken)."""
        busy = 0
        for other in self._folders():
            try:
                state = other.load()
            except (OSError, ValueError, TypeError):
                continue  # an unreadable record: not worth refusing a launch over
            if state.status == "InProgress" and state.pid is not None and self._runner.is_alive(state.pid):
                busy += state.processes
        return busy

    def _runner_kind(self, python: str) -> str:
        if self._use_toolkit is None:
            usable = local_container.toolkit_available(python, own=python == self._python)
        else:
            usable = self._use_toolkit
        return local_container.TOOLKIT if usable else local_container.DIRECT

    def _snapshot(self, folder: JobFolder, source: RunnableSource, *, unpack: bool) -> tuple[str, dict[str, str]]:
        # A snapshot, as SageMaker uploads source_dir: editing the source never changes a running job.
        folder.path.mkdir(parents=True, exist_ok=True)
        local_container.write_sourcedir(Path(source.source_dir), folder.sourcedir_path, self._code_limits)
        if unpack:
            local_container.unpack_sourcedir(folder.sourcedir_path, folder.code_dir, self._code_limits)
        return source.entry_point, dict(source.environment)

    # ------------------------------------------------------------------ observing

    def _folder(self, job_name: str) -> JobFolder:
        folder = JobFolder(self._jobs_root, job_name)
        if not _JOB_NAME.match(job_name) or not folder.exists():
            raise NotFound(f"No local training job is named {job_name!r}; `trainbot jobs` lists them.")
        return folder

    def _folders(self) -> list[JobFolder]:
        if not self._jobs_root.is_dir():
            return []
        return [
            JobFolder(self._jobs_root, p.name)
            for p in sorted(self._jobs_root.iterdir())
            if not p.name.startswith(".") and (p / "state.json").is_file()
        ]

    def _refresh(self, folder: JobFolder) -> JobState:
        with folder.locked():
            return self._refresh_locked(folder)

    def _refresh_locked(self, folder: JobFolder) -> JobState:
        """Fold what the processes did since the last look into the state; persist any change."""
        state = folder.load()
        if RemoteStatus(state.status).is_terminal():
            if state.cgroups and local_limits.remove(state.cgroups):  # left by a wrapper killed with its job
                state.cgroups = []
                folder.save(state)
            return state
        now = self._clock.now()
        changed = self._enforce_deadlines(state, now)
        status, secondary = self._observe(folder, state, now)
        if (status, secondary) != (state.status, state.secondary_status):
            if RemoteStatus(status).is_terminal() or secondary == "Stopping":
                self._note_training(folder, state, now)
            local_status.move(state, status, secondary, now)
            changed = True
        if changed:
            state.last_modified = now
            folder.save(state)
        return state

    def _observe(self, folder: JobFolder, state: JobState, now: datetime) -> tuple[str, str]:
        if local_status.interrupted_for_now(state, now):
            # SageMaker reports the interruption before the job ends; the killed processes are gone at once.
            return RemoteStatus.IN_PROGRESS.value, "Interrupted"
        ended = folder.read_exit()
        if ended is None and not (state.pid is not None and self._runner.is_alive(state.pid)):
            ended = folder.read_exit()  # it may have been written between the two looks
            if ended is None:
                if local_limits.remove(state.cgroups):
                    state.cgroups = []
                return local_status.vanished_status(state, now)
        if ended is not None:
            state.exit_code = int(ended["exit_code"])
            state.wall_seconds = float(ended.get("wall_seconds") or 0.0)
            state.limit_hit = str(ended.get("limit") or "")
            if local_limits.remove(state.cgroups):  # the wrapper's to remove; gone already unless it could not
                state.cgroups = []
            state.ended_at = state.created_at + timedelta(seconds=state.wall_seconds)
            return local_status.ended_status(folder, state)
        return local_status.running_status(folder, state)

    def _enforce_deadlines(self, state: JobState, now: datetime) -> bool:
        """max_run, and SIGKILL after the stop grace period: checked whenever someone looks."""
        if state.pid is None or not self._runner.is_alive(state.pid):
            return False
        if (
            state.max_run
            and state.signalled_at() is None
            and now - state.created_at > timedelta(seconds=state.max_run)
        ):
            logger.info("local job %s ran past max_run (%s s); stopping it", state.name, state.max_run)
            state.runtime_exceeded_at = now
            self._terminate(state, SIGTERM)
            return True
        asked = state.signalled_at()
        if asked and state.killed_at is None and now - asked > timedelta(seconds=STOP_GRACE_SECONDS):
            logger.warning(
                "local job %s ignored SIGTERM for %s s; killing it", state.name, STOP_GRACE_SECONDS
            )
            state.killed_at = now
            self._runner.signal_group(state.pid, SIGKILL)
            return True
        return False

    def _note_training(self, folder: JobFolder, state: JobState, now: datetime) -> None:
        # A job that trained and ended between two looks still shows the Training step in its history.
        seen = {t["status"] for t in state.transitions}
        if "Training" not in seen and local_status.training_started(folder):
            local_status.move(state, RemoteStatus.IN_PROGRESS.value, "Training", now)

    def _signal_job(self, job_name: str, flag: str, sig: int) -> None:
        folder = self._folder(job_name)
        with folder.locked():
            state = self._refresh_locked(folder)
            if RemoteStatus(state.status).is_terminal():
                what = "stop" if flag == "stop_requested_at" else "take capacity from"
                raise InvalidState(
                    f"Job {job_name} has already ended ({state.status}); there is nothing to {what}."
                )
            if flag == "capacity_taken_at" and not state.spot:
                raise InvalidState(
                    f"Job {job_name} is not a spot job, so there is no spot capacity to take away."
                )
            if getattr(state, flag) is None:
                setattr(state, flag, self._clock.now())
                folder.save(state)  # the flag first, so whoever sees the exit knows why
                if state.pid is not None:
                    self._terminate(state, sig)
            self._refresh_locked(folder)

    def _terminate(self, state: JobState, sig: int) -> None:
        """`sig` to the job's processes. Under the toolkit, SIGTERM spares `train` itself: it would die at
        once and take the script's output pipes with it, so the best-effort save could never be logged."""
        assert state.pid is not None
        spare: tuple[str, ...] = ()
        if sig == SIGTERM:  # bwrap outside the sandbox would die of it, and take the sandbox with it
            spare = (("/train",) if state.runner == local_container.TOOLKIT else ()) + (
                ("bwrap",) if state.isolation == "bwrap" else ())
        self._runner.signal_group(state.pid, sig, spare=spare)


def _secrets_client(region: str) -> Any:
    # The standard AWS chain (AWS_ENDPOINT_URL included), as for an s3:// tarball.
    from jobs.backends.aws_session import make_boto_session

    return make_boto_session(region).client("secretsmanager")
def _made(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _local_model(hps: dict[str, Any]) -> list[Path]:
    name = hps.get("model_name_or_path")
    return [Path(name)] if isinstance(name, str) and Path(name).is_dir() else []


def _s3_client() -> Any:
    # Built only when a local job's code is an s3:// tarball: the standard AWS chain, AWS_ENDPOINT_URL included.
    from jobs.backends.aws_session import make_boto_session

    return make_boto_session().client("s3")



"""A local job's state and files, read as SageMaker would report the job (pure: no processes here).

Status mapping (TrainingJobStatus / SecondaryStatus):
- running: InProgress / Starting, then Training once the script logs a step;
- exit 0: Completed (even if a stop raced the end: the model is saved, as SageMaker would report);
- stop(): Stopping, then Stopped / Stopped;
- take_capacity() on a spot job: its processes are killed (no signal the script can act on); InProgress /
  Interrupted for INTERRUPTED_SECONDS after that (however fast they died), then Stopped /
  MaxWaitTimeExceeded, as SageMaker ends a spot job whose wait for capacity ran out;
- running past max_run: Stopped / MaxRuntimeExceeded;
- any other exit: Failed, "AlgorithmError: <the log's last error line>", or the sentence of the limit it went past
  (limits.py: memory, processes, disk); a process that vanished with no exit code: Failed,
  "InternalServerError: ..." (which recovery relaunches).
Billing: training_seconds is the process's wall time; a spot job bills SPOT_BILLABLE_FRACTION of it,
a typical managed-spot saving, so reports show spot savings as they would on SageMaker.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import datetime

from jobs.backends.local import state as local_state
from jobs.backends.local.limits import limit_sentence
from jobs.backends.local.log_scan import LogScan, scan
from jobs.backends.local.state import JobFolder, JobState
from jobs.planning.patterns import capped, linear
from jobs.records import MetricPoint, MetricSeries, RemoteJob, RemoteStatus, StatusTransition

#: Billable share of a spot job's training time (managed spot typically saves 60-90%).
SPOT_BILLABLE_FRACTION = 0.3

#: The bot's request that ended a job -> the SecondaryStatus SageMaker ends such a job with.
STOP_SECONDARY = {
    "capacity_taken_at": "MaxWaitTimeExceeded",
    "runtime_exceeded_at": "MaxRuntimeExceeded",
    "stop_requested_at": "Stopped",
}
MAX_SETUP_REASON = 600
_MESSAGES = {
    "Downloading": "Preparing the training image (the image runtime, requirements.txt).",
    "Starting": "Starting the training job (local processes).",
    "Training": "Training in progress.",
    "Completed": "Training job completed.",
    "Stopping": "Stopping the training job (SIGTERM sent).",
    "Stopped": "The job was stopped.",
    "Interrupted": "Spot capacity was taken (simulated locally); the job's processes were killed.",
    "MaxWaitTimeExceeded": "The job ended: spot capacity did not come back within the wait time.",
    "MaxRuntimeExceeded": "The job ran past max_run and was stopped.",
    "Failed": "Training job failed.",
}


#: How long a reclaimed local spot job shows InProgress / Interrupted before it ends Stopped, so a watcher
#: polling every few seconds sees the interruption as it would on SageMaker (which waits for capacity).
INTERRUPTED_SECONDS = 5.0


def interrupted_for_now(state: JobState, now: datetime) -> bool:
    taken = state.capacity_taken_at
    if taken is None or end_cause(state) != "capacity_taken_at":
        return False
    return state.secondary_status != "Interrupted" or (now - taken).total_seconds() < INTERRUPTED_SECONDS


def end_cause(state: JobState) -> str | None:
    """Which of the bot's requests came first (stop, capacity, max_run), if any."""
    asked = [(getattr(state, flag), flag) for flag in STOP_SECONDARY if getattr(state, flag) is not None]
    return min(asked)[1] if asked else None


def running_status(folder: JobFolder, state: JobState) -> tuple[str, str]:
    """Status of a job whose process is still alive."""
    cause = end_cause(state)
    if cause == "capacity_taken_at":
        return RemoteStatus.IN_PROGRESS.value, "Interrupted"
    if cause is not None:
        return RemoteStatus.STOPPING.value, "Stopping"
    if state.secondary_status == "Training" or training_started(folder):
        return RemoteStatus.IN_PROGRESS.value, "Training"
    setup = last_setup_line(local_state.tail_lines(folder.log_path, 200))
    if setup is not None:  # the job's first step: its image runtime built, requirements.txt installed (prepare.py)
        state.setup_message = setup
        return RemoteStatus.IN_PROGRESS.value, "Downloading"
    return RemoteStatus.IN_PROGRESS.value, "Starting"


_SETUP = "[setup] "
_SETUP_FAILED = "[setup] failed: "


def last_setup_line(lines: list[str]) -> str | None:
    """The latest ``[setup]`` line of the job's first step (its build's progress), without the marker."""
    for line in reversed(lines):
        if line.startswith(_SETUP):
            return line[len(_SETUP):].strip()[:300]
    return None


def ended_status(folder: JobFolder, state: JobState) -> tuple[str, str]:
    """Status of a job whose wrapper recorded an exit code (in `state.exit_code`)."""
    if state.exit_code == 0:  # finished before (or despite) a stop: the model is there
        return RemoteStatus.COMPLETED.value, "Completed"
    cause = end_cause(state)
    if cause is not None:
        return RemoteStatus.STOPPED.value, STOP_SECONDARY[cause]
    limit = limit_sentence(state.limit_hit, state.limits) if state.limit_hit else None
    tail = [] if limit else folder.log_tail(200)
    setup = next((line[len(_SETUP_FAILED):].strip() for line in reversed(tail) if line.startswith(_SETUP_FAILED)), None)
    if setup is not None:  # the first step's own sentence: the runtime build or requirements.txt
        state.failure_reason = f"AlgorithmError: {setup[:MAX_SETUP_REASON]}"
        return RemoteStatus.FAILED.value, "Failed"
    state.failure_reason = f"AlgorithmError: {limit or _no_gpu_reason(tail) or local_state.last_error_line(tail)}"
    return RemoteStatus.FAILED.value, "Failed"


#: transformers' refusals of half precision without a GPU (4.x: "... can only be used on CUDA devices").
_NO_GPU = linear(r"(?i)(fp16|bf16)\S*\) .{0,120}can only be used on CUDA|setup doesn't support (bf16)")
NO_GPU_REASON = (
    "the script turned on {kind} (half precision), which needs a GPU, and this machine has none: run it locally "
    "with {kind} off (hp.{kind}=false, where the script reads \"False\" as false; argparse type=bool reads any "
    "value as True), or on SageMaker"
)


def _no_gpu_reason(lines: list[str]) -> str | None:
    """One sentence for a script that insists on half precision on this CPU, instead of transformers' own."""
    for line in reversed(lines):
        match = _NO_GPU.search(capped(line))
        if match:
            return NO_GPU_REASON.format(kind=(match.group(1) or match.group(2)).lower())
    return None


def vanished_status(state: JobState, now: datetime) -> tuple[str, str]:
    """Status of a job whose processes are gone without an exit record (killed, machine restarted)."""
    state.ended_at = now
    state.wall_seconds = max(0.0, (now - state.created_at).total_seconds())
    cause = end_cause(state)
    if cause is not None:  # killed after the grace period, as SageMaker would
        return RemoteStatus.STOPPED.value, STOP_SECONDARY[cause]
    state.failure_reason = (
        f"InternalServerError: the local training process (pid {state.pid}) ended without an exit code;"
        " it was killed or the machine restarted. Launch it again to resume from its checkpoints."
    )
    return RemoteStatus.FAILED.value, "Failed"


def training_started(folder: JobFolder) -> bool:
    lines = folder.log_tail(400)
    return any(line.startswith(("[progress]", "[metric]")) for line in lines)


def move(state: JobState, status: str, secondary: str, now: datetime) -> None:
    """Record a new (status, secondary status), closing the open transition as SageMaker lists them."""
    stamp = now.isoformat()
    if state.transitions and state.transitions[-1]["end"] is None:
        state.transitions[-1]["end"] = stamp
    terminal = RemoteStatus(status).is_terminal()
    state.transitions.append({"status": secondary, "start": stamp, "end": stamp if terminal else None})
    state.status, state.secondary_status = status, secondary


def remote_job(folder: JobFolder, state: JobState) -> RemoteJob:
    status = RemoteStatus(state.status)
    training = billable = None
    if status.is_terminal() and state.wall_seconds is not None:
        training = max(1, math.ceil(state.wall_seconds))
        billable = max(1, math.ceil(training * SPOT_BILLABLE_FRACTION)) if state.spot else training
    read = scan(folder)  # once: the metrics and the resume lines come from the same look at the log
    transitions = [_transition(t) for t in state.transitions]
    if transitions and transitions[-1].status == "Downloading" and state.setup_message:
        transitions[-1] = replace(transitions[-1], message=state.setup_message)  # how far the build is now
    return RemoteJob(
        name=state.name,
        status=status,
        secondary_status=state.secondary_status,
        transitions=tuple(transitions),
        failure_reason=state.failure_reason,
        billable_seconds=billable,
        training_seconds=training,
        final_metrics=final_metrics(folder, read),
        model_artifacts=_model_artifacts(folder, status),
        resumed_from_step=read.resumed_from_step,
        steps_redone=read.steps_redone,
        instance_type=state.instance_type,
        instance_count=state.instance_count,
        spot=state.spot,
        created_at=state.created_at,
        started_at=state.created_at,
        ended_at=state.ended_at,
        last_modified=state.last_modified,
    )


def resumed_from_step(folder: JobFolder) -> int | None:
    """The checkpoint step the job resumed from, as the training script's log says; None for a fresh start."""
    return scan(folder).resumed_from_step


def steps_redone(folder: JobFolder) -> int | None:
    """Steps this attempt trains again because the one before it was killed past its last checkpoint."""
    return scan(folder).steps_redone


def final_metrics(folder: JobFolder, read: LogScan | None = None) -> dict[str, float]:
    """The last value of each metric the job's definitions find in its log (`[metric]` lines, a Trainer's
    printed dicts, a team's own), then the script's metrics.json on top of them. ``read``: the log's scan
    when the caller has it already."""
    metrics = dict((read or scan(folder)).last)
    written = folder.read_json("output/data/metrics.json")  # a job's file: no link, FIFO or device, 1 MB at most
    if isinstance(written, dict):
        numbers = {k: v for k, v in written.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        metrics.update({k: float(v) for k, v in numbers.items()})
    return metrics


def metric_series(folder: JobFolder) -> MetricSeries:
    """Every metric the definitions find in the log as {name: [MetricPoint(step, value)]}, ordered by step. A
    line without a step of its own (a Trainer's printed dict) is at the training step the log last showed (a
    ``[progress]`` line, or the Trainer's progress bar); one before any step is known is left out, never
    placed at a made-up step."""
    return {
        name: [MetricPoint(float(step), value) for step, value in sorted((int(k), v) for k, v in by_step.items())]
        for name, by_step in scan(folder).points.items()
    }



def _model_artifacts(folder: JobFolder, status: RemoteStatus) -> str | None:
    if status is not RemoteStatus.COMPLETED:
        return None
    return str(folder.model_dir) if folder.entries("model") else None


def _transition(raw: dict[str, str | None]) -> StatusTransition:
    status = raw["status"] or ""
    start, end = raw.get("start"), raw.get("end")
    return StatusTransition(
        status=status,
        start=datetime.fromisoformat(start) if start else None,
        end=datetime.fromisoformat(end) if end else None,
        message=raw.get("message") or _MESSAGES.get(status, ""),
    )

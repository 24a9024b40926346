"""What the bot tells people about a job's life: event kinds and their payloads, as plain JSON dicts.

The controller puts the notices of a running lineage into the store's outbox; an ending's announcement is
put there by the step after the ending that builds it (jobs/endings), with the report, the curves or the
log tail it could build. The chat surfaces (handlers/) render them into a thread reply or Block Kit. Every payload carries ``kind``, ``lineage_id``, ``job_name`` and ``text``,
a plain sentence a surface can post as is. The sentences live here, together, so they read as one voice.
"""

from __future__ import annotations

from typing import Any

from jobs.planning.batch import BatchSettings, change_words
from jobs.wording import Counted

JsonDict = dict[str, Any]

STATE = "state"  # a short line on any change of an attempt's status or secondary status
INTERRUPTED = "interrupted"  # spot capacity was reclaimed; SageMaker itself waits and resumes
RELAUNCHED = "relaunched"  # a new attempt of the lineage started from the same checkpoints
FAILED = "failed"  # the user's code failed: the reason and the last log lines; not retried
GAVE_UP = "gave_up"  # capacity kept failing past the restart cap or the fallback list
COMPLETED = "completed"  # training finished: the final report and the curves
STOPPED = "stopped"  # a person stopped the job
CURVES = "curves"  # the curves of a completed lineage, drawn after its report went out without them

KINDS = (STATE, INTERRUPTED, RELAUNCHED, FAILED, GAVE_UP, COMPLETED, STOPPED, CURVES)

#: How many log lines a `failed` event carries (Slack messages stay readable; /logs JOB shows more).
LOG_TAIL_LINES = 10
RESUMED_LOST = Counted("{redone:step} trained after it {redone:=was|were} lost with the interruption and "
                       "{redone:=is|are} trained again")
GAVE_UP_TEXT = Counted("Gave up on {lineage} after {attempts:attempt}: {reason}.")


def _base(kind: str, lineage_id: str, job_name: str | None, text: str) -> JsonDict:
    return {"kind": kind, "lineage_id": lineage_id, "job_name": job_name, "text": text}


def state_line(
    lineage_id: str, job_name: str, status: str, secondary_status: str, *, note: str = ""
) -> JsonDict:
    """`bert-squad-x-1: InProgress (Training)`, with an optional note on what comes next."""
    detail = f" ({secondary_status})" if secondary_status and secondary_status != status else ""
    text = f"{job_name}: {status}{detail}" + (f". {note}" if note else "")
    payload = _base(STATE, lineage_id, job_name, text)
    payload.update(status=status, secondary_status=secondary_status, note=note)
    return payload


def resumed(lineage_id: str, job_name: str, *, step: int, redone: int | None, checkpoint_uri: str) -> JsonDict:
    """What a relaunched (or restarted) attempt picked up: the checkpoint, and the steps the interruption cost."""
    lost = (RESUMED_LOST.format(redone=redone) if redone is not None else "the steps after it are trained again")
    text = f"{job_name} resumed from the checkpoint at step {step} ({checkpoint_uri}): {lost}."
    payload = _base(STATE, lineage_id, job_name, text)
    payload.update(status="InProgress", secondary_status="Training", note="", resumed_from_step=step,
                   steps_redone=redone)
    return payload


def interrupted(lineage_id: str, job_name: str, instance_type: str) -> JsonDict:
    text = (
        f"{job_name}: spot capacity for {instance_type} was reclaimed. SageMaker waits for capacity and "
        "resumes from the last checkpoint; nothing to do."
    )
    payload = _base(INTERRUPTED, lineage_id, job_name, text)
    payload["instance_type"] = instance_type
    return payload


def relaunch_scheduled_note(
    reason: str, instance_type: str, spot: bool, backoff_seconds: float, change: str = ""
) -> str:
    """The note on the state line of an attempt that capacity ended; ``change``: what the next attempt's
    type changes (batch.change_words: ``4 GPUs, per-device batch 8 instead of 32, global batch 32 as planned``)."""
    when = "now" if backoff_seconds <= 0 else f"in {_seconds(backoff_seconds)}"
    market = "spot" if spot else "on-demand"
    detail = f"; {change}" if change else ""
    return f"{reason}; relaunching from the checkpoints on {instance_type} ({market}{detail}) {when}"


def relaunched(
    lineage_id: str,
    job_name: str,
    *,
    attempt: int,
    instance_type: str,
    spot: bool,
    backoff_seconds: float,
    checkpoint_uri: str,
    resumed_from_step: int | None,
    planned: BatchSettings | None = None,
    used: BatchSettings | None = None,
) -> JsonDict:
    """``Relaunched as x-2 (attempt 2, ml.g5.xlarge, spot; 1 GPU as planned), resuming from step 30.``: what
    the type changed (another accelerator count: the per-device batch or accumulation; the global batch is kept)."""
    market = "spot" if spot else "on-demand"
    start = f"step {resumed_from_step}" if resumed_from_step else "the last checkpoint"
    change = change_words(planned, used) if planned is not None and used is not None else ""
    detail = f"; {change}" if change else ""
    text = f"Relaunched as {job_name} (attempt {attempt}, {instance_type}, {market}{detail}), resuming from {start}."
    payload = _base(RELAUNCHED, lineage_id, job_name, text)
    payload.update(
        attempt=attempt,
        instance_type=instance_type,
        spot=spot,
        backoff_seconds=backoff_seconds,
        checkpoint_uri=checkpoint_uri,
        resumed_from_step=resumed_from_step,
        change=change,
        batch=used.to_json() if used is not None else None,
        planned_batch=planned.to_json() if planned is not None else None,
    )
    return payload


def failed(lineage_id: str, job_name: str, reason: str, log_tail: list[str]) -> JsonDict:
    tail = list(log_tail)[-LOG_TAIL_LINES:]
    text = f"{job_name} failed: {reason or 'no reason given'}. It is not retried: fix the code or the data."
    payload = _base(FAILED, lineage_id, job_name, text)
    payload.update(reason=reason, log_tail=tail)
    return payload


def gave_up(lineage_id: str, job_name: str, reason: str, attempts: int) -> JsonDict:
    text = GAVE_UP_TEXT.format(lineage=lineage_id, attempts=attempts, reason=reason)
    payload = _base(GAVE_UP, lineage_id, job_name, text)
    payload.update(reason=reason, attempts=attempts)
    return payload


def completed(lineage_id: str, job_name: str, report: JsonDict, png_path: str | None) -> JsonDict:
    savings = report.get("spot_savings")
    cost = report.get("cost_usd")
    parts = [f"{lineage_id} completed"]
    if cost is not None:  # a local run's: what SageMaker would bill for it
        parts.append(f"cost ${cost:.2f}" + (" on SageMaker (free here)" if report.get("backend") == "local" else ""))
    if savings:
        parts.append(f"spot savings {savings}")
    payload = _base(COMPLETED, lineage_id, job_name, ", ".join(parts) + ".")
    payload.update(report=report, png_path=png_path)
    return payload


def curves(lineage_id: str, job_name: str, png_path: str) -> JsonDict:
    payload = _base(CURVES, lineage_id, job_name, f"The training curves of {lineage_id}, drawn after its report.")
    payload["png_path"] = png_path
    return payload


def stopped(lineage_id: str, job_name: str, reason: str = "") -> JsonDict:
    text = f"{job_name} was stopped" + (f": {reason}" if reason else "") + "."
    payload = _base(STOPPED, lineage_id, job_name, text)
    payload["reason"] = reason
    return payload


def _seconds(seconds: float) -> str:
    whole = int(round(seconds))
    return f"{whole} s" if whole < 120 else f"{whole // 60} min"

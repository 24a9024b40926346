"""A job's log on request (/logs, the Logs button, `trainbot logs`): the last N lines of every host's log,
each labelled, read through the backend (CloudWatch streams on SageMaker, the log file locally).

A backend that can tell its hosts apart implements `HostLogSource`; any other one is read through the
port's merged `log_tail` as a single labelled log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from jobs.errors import BadInput, InvalidState
from jobs.lineage import AttemptStatus

if TYPE_CHECKING:
    from jobs.backend import TrainingBackend
    from jobs.lineage import Attempt, Lineage

DEFAULT_LINES = 40
MAX_LINES = 500


@runtime_checkable
class HostLogSource(Protocol):
    def host_log_tails(self, job_name: str, lines: int) -> list[tuple[str, list[str]]]:
        """(label, the last `lines` lines, oldest first) for each host of the job, in host order."""
        ...


@dataclass(frozen=True)
class HostLog:
    label: str  # "algo-1", "algo-2" on SageMaker; the log file's path locally
    lines: tuple[str, ...]


@dataclass(frozen=True)
class JobLogs:
    lineage_id: str
    job_name: str
    lines: int  # asked for, per host
    hosts: tuple[HostLog, ...]

    @property
    def line_count(self) -> int:
        return sum(len(host.lines) for host in self.hosts)

    def to_text(self) -> str:
        """Every host's lines under a `== label ==` heading (the CLI prints it; the snippet file holds it)."""
        if not self.line_count:
            return f"{self.job_name} has no log lines yet."
        parts = []
        for host in self.hosts:
            parts.append(f"== {host.label} ({len(host.lines)} lines) ==")
            parts.extend(host.lines)
        return "\n".join(parts)


def check_lines(raw: str | int | None) -> int:
    """N of `/logs JOB [N]` and `--lines N`: 1 to MAX_LINES."""
    if raw is None or raw == "":
        return DEFAULT_LINES
    text = str(raw).strip()
    if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_LINES:
        raise BadInput(f"The number of lines must be a whole number from 1 to {MAX_LINES}, not {text[:20]!r}.")
    return int(text)


def attempt_for(lineage: Lineage, ref: str) -> Attempt:
    """The attempt ``ref`` names (a job name), else the lineage's latest attempt that reached the backend."""
    for attempt in lineage.attempts:
        if attempt.job_name == ref.strip():
            return attempt
    ran = [a for a in lineage.attempts if a.status is not AttemptStatus.LAUNCH_FAILED]
    chosen = (ran or list(lineage.attempts))[-1:]
    if not chosen:
        raise InvalidState(f"{lineage.id} has no training job yet, so it has no logs.")
    return chosen[0]


def check_readable(lineage: Lineage, attempt: Attempt, backend: TrainingBackend) -> None:
    """InvalidState when this backend cannot have the attempt's logs (another backend, never started)."""
    if lineage.backend != backend.name:
        raise InvalidState(
            f"{lineage.id} ran on the {lineage.backend} backend and this bot runs {backend.name}: read its "
            f"logs from a bot with TRAINBOT_BACKEND={lineage.backend}."
        )
    if attempt.status is AttemptStatus.LAUNCH_FAILED:
        reason = attempt.failure_reason.rstrip(".") or "the backend refused it"
        raise InvalidState(f"{attempt.job_name} never started ({reason}), so it has no logs.")


def read_job_logs(lineage: Lineage, attempt: Attempt, backend: TrainingBackend, lines: int) -> JobLogs:
    check_readable(lineage, attempt, backend)
    if isinstance(backend, HostLogSource):
        tails = backend.host_log_tails(attempt.job_name, lines)
    else:
        tails = [(attempt.job_name, backend.log_tail(attempt.job_name, lines))]
    hosts = tuple(HostLog(label, tuple(found[-lines:])) for label, found in tails)
    return JobLogs(lineage_id=lineage.id, job_name=attempt.job_name, lines=lines, hosts=hosts)

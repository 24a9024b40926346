"""What one watch cycle did, for `trainbot watch --once`, the benchmarks and the tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from jobs.records import RemoteJob


@dataclass
class CycleResult:
    api_calls: int = 0  # backend port calls (list_changed counts once however many pages it read)
    listed: int = 0  # summaries list_changed returned
    described: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)  # "job: InProgress/Training -> InProgress/Interrupted"
    actions: list[str] = field(default_factory=list)  # "relaunched x-2", "notified interrupted x-1", ...
    errors: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """What `trainbot watch --once` prints: a count line, then each change, action and error."""
        head = (f"{self.api_calls} API calls, {self.listed} listed, {len(self.described)} described, "
                f"{len(self.changes)} changes, {len(self.actions)} actions, {len(self.errors)} errors")
        details = [f"  change: {c}" for c in self.changes] + [f"  action: {a}" for a in self.actions]
        return "\n".join([head, *details, *(f"  error: {e}" for e in self.errors)])


def change_key(job_name: str, remote: RemoteJob) -> str:
    """The outbox dedup key of one observed change of one job: announced once, whoever sees it."""
    return f"{job_name}:{remote.status.value}:{remote.secondary_status}"

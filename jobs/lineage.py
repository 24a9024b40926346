"""The domain of a job's life: lineages, attempts, their statuses, and the named moves between statuses.

A *lineage* is what a person launched (one `/train`); an *attempt* is one backend job of it
(``<lineage>-<n>``); spot recovery adds attempts to the same lineage, all sharing one checkpoint URI.
Every change of status is one of the named moves below, and the store carries it out as a guarded update
(``UPDATE ... WHERE status IN (sources)``): two processes acting on the same snapshot never both move, and
the loser learns it from the return value. The store refuses any move that is not in the tables, so a new
path through the life of a job has to be added here, where it can be seen (and tested) with all the others.

    PENDING ──confirm──▶ RUNNING ──schedule relaunch──▶ RELAUNCHING ──relaunched──▶ RUNNING
       │                   │  ▲                             │  └─(refused, decided again)─┘
       └──── complete / fail / stop / give up ─────────────┴──▶ COMPLETED | FAILED | STOPPED | GAVE_UP

This module is the ground floor: it imports nothing of the core but the spec a lineage carries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from jobs.planning.spec import JobSpec


class LineageStatus(str, Enum):
    PENDING = "pending"  # recorded; the first attempt's launch is not confirmed yet
    RUNNING = "running"  # an attempt is on the backend (starting, training or interrupted)
    RELAUNCHING = "relaunching"  # capacity took the last attempt; a new one is due after the backoff
    COMPLETED = "completed"  # an attempt finished training; the model is saved
    FAILED = "failed"  # the user's code failed or the launch was refused; not retried
    STOPPED = "stopped"  # a person stopped it
    GAVE_UP = "gave_up"  # past the restart cap, the fallback list or the money cap; or the bot could not go on

    def is_terminal(self) -> bool:
        return self in _TERMINAL_LINEAGE

    def phrase(self) -> str:
        """As a sentence says it after the job's name: ``is running``, ``failed``, ``was given up on`` (never
        "is gave up")."""
        return _PHRASES[self]


_PHRASES = {
    LineageStatus.PENDING: "is pending",
    LineageStatus.RUNNING: "is running",
    LineageStatus.RELAUNCHING: "is relaunching",
    LineageStatus.COMPLETED: "completed",
    LineageStatus.FAILED: "failed",
    LineageStatus.STOPPED: "was stopped",
    LineageStatus.GAVE_UP: "was given up on",
}

_TERMINAL_LINEAGE = {
    LineageStatus.COMPLETED,
    LineageStatus.FAILED,
    LineageStatus.STOPPED,
    LineageStatus.GAVE_UP,
}


class AttemptStatus(str, Enum):
    LAUNCHING = "launching"  # recorded before the backend call; outcome not known yet
    RUNNING = "running"  # the backend has the job (InProgress or Stopping)
    COMPLETED = "completed"  # the backend says Completed
    FAILED = "failed"  # the backend says Failed (any reason; see failure_reason)
    STOPPED = "stopped"  # the backend says Stopped (by a person or MaxWaitTimeExceeded)
    LAUNCH_FAILED = "launch_failed"  # the create call was refused or raised, or never arrived: no such job

    def is_terminal(self) -> bool:
        return self not in (AttemptStatus.LAUNCHING, AttemptStatus.RUNNING)


S = TypeVar("S", LineageStatus, AttemptStatus)


@dataclass(frozen=True)
class Move(Generic[S]):
    """One named edge (or bundle of edges into one status): from any of ``sources`` to ``target``."""

    name: str
    sources: tuple[S, ...]
    target: S


L = LineageStatus
_LIVE = (L.PENDING, L.RUNNING, L.RELAUNCHING)

# -- lineage moves ----------------------------------------------------------------------------------
CONFIRM_LAUNCH = Move("launch confirmed", (L.PENDING,), L.RUNNING)
SCHEDULE_RELAUNCH = Move("relaunch scheduled", (L.PENDING, L.RUNNING), L.RELAUNCHING)
# A relaunch whose create call was refused is decided again: it may be due once more, later.
RESCHEDULE_RELAUNCH = Move("relaunch rescheduled", (L.RELAUNCHING,), L.RELAUNCHING)
FINISH_RELAUNCH = Move("relaunched", (L.RELAUNCHING,), L.RUNNING)
COMPLETE = Move("completed", (L.PENDING, L.RUNNING), L.COMPLETED)
FAIL = Move("failed", _LIVE, L.FAILED)
STOP = Move("stopped", _LIVE, L.STOPPED)
GIVE_UP = Move("gave up", _LIVE, L.GAVE_UP)

LINEAGE_MOVES: tuple[Move[LineageStatus], ...] = (
    CONFIRM_LAUNCH, SCHEDULE_RELAUNCH, RESCHEDULE_RELAUNCH, FINISH_RELAUNCH, COMPLETE, FAIL, STOP, GIVE_UP,
)

A = AttemptStatus
_ACTIVE = (A.LAUNCHING, A.RUNNING)

# -- attempt moves ----------------------------------------------------------------------------------
ATTEMPT_CONFIRMED = Move("attempt confirmed", (A.LAUNCHING,), A.RUNNING)
ATTEMPT_NOT_LAUNCHED = Move("attempt not launched", (A.LAUNCHING,), A.LAUNCH_FAILED)
# The backend's ending is mirrored from LAUNCHING too: a job may end before its launch was confirmed.
ATTEMPT_COMPLETED = Move("attempt completed", _ACTIVE, A.COMPLETED)
ATTEMPT_FAILED = Move("attempt failed", _ACTIVE, A.FAILED)
ATTEMPT_STOPPED = Move("attempt stopped", _ACTIVE, A.STOPPED)

ATTEMPT_MOVES: tuple[Move[AttemptStatus], ...] = (
    ATTEMPT_CONFIRMED, ATTEMPT_NOT_LAUNCHED, ATTEMPT_COMPLETED, ATTEMPT_FAILED, ATTEMPT_STOPPED,
)


def _edges(moves: tuple[Move[S], ...]) -> frozenset[tuple[S, S]]:
    return frozenset((source, move.target) for move in moves for source in move.sources)


#: Every allowed (from, to) pair; anything else is refused by the store.
LINEAGE_EDGES: frozenset[tuple[LineageStatus, LineageStatus]] = _edges(LINEAGE_MOVES)
ATTEMPT_EDGES: frozenset[tuple[AttemptStatus, AttemptStatus]] = _edges(ATTEMPT_MOVES)

#: An attempt's ending as the backend reports it ("Completed", "Failed", "Stopped") -> its move.
ATTEMPT_ENDING = {"Completed": ATTEMPT_COMPLETED, "Failed": ATTEMPT_FAILED, "Stopped": ATTEMPT_STOPPED}


# -- the records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    lineage_id: str
    number: int
    job_name: str  # f"{lineage_id}-{number}"
    instance_type: str
    spot: bool
    status: AttemptStatus
    remote_status: str
    secondary_status: str
    failure_reason: str
    billable_seconds: int | None
    training_seconds: int | None
    metrics: dict[str, float]
    model_artifacts: str | None
    resumed_from_step: int | None  # checkpoint step this attempt started from
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None
    steps_redone: int | None = None  # steps past that checkpoint the interruption lost, so trained again
    # The batch settings it trained with (None: the script's own, or recorded before they were kept).
    per_device_batch: int | None = None
    accumulation: int | None = None
    forecast: dict[str, Any] | None = None  # Forecast.to_json() of the run on its type; None: the lineage's


@dataclass(frozen=True)
class EndingFacts:
    """Why a lineage ended, as the controller decided it; the store records it in the write that ends the
    lineage, so an ending is never lost between the move and what follows it (jobs/endings)."""

    job_name: str | None  # the attempt it ended on
    reason: str = ""  # in words; "" for a completed lineage
    details: dict[str, Any] = field(default_factory=dict)  # what the steps after it need (JSON)


@dataclass(frozen=True)
class Lineage:
    id: str
    spec: JobSpec
    backend: str
    checkpoint_uri: str
    status: LineageStatus
    launched_by: str  # Actor.user_id
    origin: str  # Actor.via
    channel: str | None  # where its card lives (thread parent)
    message_ts: str | None
    schedule: str | None
    request_id: str | None
    estimated_usd: float
    restarts: int  # relaunches so far
    next_relaunch_at: datetime | None
    next_instance_type: str | None
    next_spot: bool | None
    created_at: datetime
    updated_at: datetime
    attempts: tuple[Attempt, ...]  # ordered by number
    launch_plan: dict[str, Any] | None = None  # LaunchPlan.stored() as approved; None before schema 30

    @property
    def latest_attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

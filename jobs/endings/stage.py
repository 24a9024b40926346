"""The stage after an ending: named steps run for each recorded ending, each remembered as done, each retried
on its own with a doubling backoff, so one step's fault (an unwritable plots folder, a backend outage) delays
that step and what waits for it, never the others, and never changes how the lineage ended.

The controller records an ending with its facts in the write that ends the lineage (``store.endings``);
``EndingStage.process_due`` (each watch cycle, wherever jobs are watched) claims the due ones and runs their
steps in the order given:

- a step runs once for each ending whose outcome is in its ``on``;
- ``needs``: steps that must be done first (one that gave up skips this one, said in its error);
- ``waits_for``: steps waited for until they are done or have failed ``PATIENCE`` times, then gone on
  without (the announcement waits a little for the curves, then goes out without them);
- what a step returns (JSON) is kept, for the steps after it (``ctx.result("report")``);
- a step that raises is tried again after 5 s, 10 s, 20 s ... (at most an hour), ``MAX_TRIES`` times in all.

A step may run again after a crash between its effect and its record: make its effect idempotent (an outbox
entry under a dedup key, an upsert, a file overwritten). Adding one is one line where the stage is built
(bot/wiring.py, ``ending_steps``)::

    Step("register_model", registry.register, on=COMPLETED_ONLY, needs=("report",)),
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from jobs.clock import Clock
from jobs.errors import NotFound, TrainbotError
from jobs.lineage import Lineage, LineageStatus
from jobs.store.rows import Ending
from jobs.store.store import Store

log = logging.getLogger(__name__)

#: Every terminal status: a step for every ending.
ANY_ENDING = frozenset(s for s in LineageStatus if s.is_terminal())
COMPLETED_ONLY = frozenset({LineageStatus.COMPLETED})
#: Tries of a step in all before it is given up (about 2.5 hours of retries at the backoff below).
MAX_TRIES = 12
#: Failures of a waited-for step after which the steps waiting for it go on without it.
PATIENCE = 3
FIRST_BACKOFF_SECONDS = 5.0
MAX_BACKOFF_SECONDS = 3600.0
#: How long one process holds an ending it is working on (far longer than any step takes).
CLAIM_SECONDS = 300.0

StepState = dict[str, Any]  # {"tries", "done_at", "gave_up", "error", "next_try_at", "result"}


@dataclass(frozen=True)
class StepContext:
    """What a step gets: the ending, the lineage as it is now, and what the steps before it returned."""

    ending: Ending
    lineage: Lineage
    now: datetime
    _states: dict[str, StepState]

    def result(self, step: str) -> Any:
        """What ``step`` returned; None when it returned nothing, is not done, or gave up."""
        state = self._states.get(step) or {}
        return state.get("result") if state.get("done_at") else None

    def done(self, step: str) -> bool:
        return bool((self._states.get(step) or {}).get("done_at"))


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[StepContext], object]  # returns what later steps may read (JSON), or None
    on: frozenset[LineageStatus] = ANY_ENDING
    needs: tuple[str, ...] = ()
    waits_for: tuple[str, ...] = ()


@dataclass
class EndingPass:
    """What one `process_due` did, for `trainbot watch --once` and the tests."""

    endings: int = 0
    done: list[str] = field(default_factory=list)  # "lineage: step"
    deferred: list[str] = field(default_factory=list)  # "lineage: step (error)"
    gave_up: list[str] = field(default_factory=list)

    def summary(self) -> str:
        head = (f"endings: {self.endings} processed, {len(self.done)} steps done, {len(self.deferred)} deferred, "
                f"{len(self.gave_up)} given up")
        return "\n".join([head, *(f"  deferred: {d}" for d in self.deferred),
                          *(f"  given up: {g}" for g in self.gave_up)])


class EndingStage:
    def __init__(self, store: Store, clock: Clock, steps: Sequence[Step]) -> None:
        names = [step.name for step in steps]
        if len(set(names)) != len(names):
            raise ValueError(f"two ending steps share a name: {names}")
        unknown = {n for step in steps for n in (*step.needs, *step.waits_for)} - set(names)
        if unknown:
            raise ValueError(f"ending steps wait for steps that are not there: {sorted(unknown)}")
        self._store = store
        self._clock = clock
        self._steps = tuple(steps)

    @property
    def steps(self) -> tuple[Step, ...]:
        return self._steps

    def process_due(self, *, limit: int = 20, lineage_id: str | None = None) -> EndingPass:
        """Run the due steps of the due endings (of ``lineage_id`` alone, if given)."""
        result = EndingPass()
        for ending in self._store.endings.due(limit=limit, claim_seconds=CLAIM_SECONDS, lineage_id=lineage_id):
            result.endings += 1
            try:
                self._work(ending, result)
            except Exception:  # the store itself failed: the claim runs out and the next pass retries
                log.exception("could not work on the ending of %s", ending.lineage_id)
        return result

    # -- one ending -----------------------------------------------------------------------------------

    def _work(self, ending: Ending, result: EndingPass) -> None:
        states = {name: dict(state) for name, state in ending.steps.items()}
        mine = [step for step in self._steps if ending.outcome in step.on]
        try:
            lineage = self._store.get_lineage(ending.lineage_id)
        except NotFound:
            log.warning("the ending of %s names no lineage; dropped", ending.lineage_id)
            self._store.endings.save(ending.lineage_id, states, next_try_at=self._clock.now(), settled=True)
            return
        progressed = True
        while progressed:  # a step that finished may let a step listed before it go on
            progressed = False
            for step in mine:
                state = states.setdefault(step.name, {"tries": 0})
                if _finished(state) or not self._due(state):
                    continue
                ready = self._ready(step, mine, states)
                if ready is None:
                    continue
                if ready:
                    self._run(step, StepContext(ending, lineage, self._clock.now(), states), state, result)
                else:
                    state.update(gave_up=True, error=f"skipped: {', '.join(step.needs)} gave up")
                    result.gave_up.append(f"{ending.lineage_id}: {step.name} (a step it needs gave up)")
                progressed = True
                # Remembered at once: a crash after this step never runs it again.
                self._store.endings.save(ending.lineage_id, states, next_try_at=self._claimed_until(),
                                         settled=False)
        pending = [states[step.name] for step in mine if not _finished(states[step.name])]
        next_try = min((_at(state["next_try_at"]) for state in pending if state.get("next_try_at")),
                       default=self._clock.now())
        self._store.endings.save(ending.lineage_id, states, next_try_at=next_try, settled=not pending)

    def _ready(self, step: Step, mine: list[Step], states: dict[str, StepState]) -> bool | None:
        """True: run it; False: skip it (a need gave up); None: not yet."""
        applicable = {s.name for s in mine}
        for need in step.needs:
            if need not in applicable:
                continue
            state = states.get(need) or {}
            if state.get("gave_up"):
                return False
            if not state.get("done_at"):
                return None
        for waited in step.waits_for:
            state = states.get(waited) or {}
            if waited in applicable and not _finished(state) and int(state.get("tries", 0)) < PATIENCE:
                return None
        return True

    def _run(self, step: Step, ctx: StepContext, state: StepState, result: EndingPass) -> None:
        where = f"{ctx.lineage.id}: {step.name}"
        try:
            value = step.run(ctx)
            json.dumps(value)  # kept in the store as JSON: an unserialisable result is the step's fault
        except Exception as exc:
            tries = int(state.get("tries", 0)) + 1
            error = exc.message if isinstance(exc, TrainbotError) else f"{type(exc).__name__}: {exc}"
            state.update(tries=tries, error=error[:500])
            if tries >= MAX_TRIES:
                state["gave_up"] = True
                state.pop("next_try_at", None)
                log.error("ending step %s gave up after %d tries: %s", where, tries, error)
                result.gave_up.append(f"{where} ({error[:200]})")
                return
            delay = min(MAX_BACKOFF_SECONDS, FIRST_BACKOFF_SECONDS * 2 ** (tries - 1))
            state["next_try_at"] = (self._clock.now() + timedelta(seconds=delay)).isoformat()
            log.warning("ending step %s failed (try %d, again in %.0f s): %s", where, tries, delay, error)
            result.deferred.append(f"{where} ({error[:200]})")
            return
        state.update(done_at=self._clock.now().isoformat(), result=value, error="")
        state.pop("next_try_at", None)
        result.done.append(where)

    def _due(self, state: StepState) -> bool:
        at = state.get("next_try_at")
        return at is None or _at(at) <= self._clock.now()

    def _claimed_until(self) -> datetime:
        return self._clock.now() + timedelta(seconds=CLAIM_SECONDS)


def _finished(state: StepState) -> bool:
    return bool(state.get("done_at") or state.get("gave_up"))


def _at(iso: str) -> datetime:
    return datetime.fromisoformat(iso)

"""The events a chat platform delivered (jobs/store/inbound.py): one claim per event_id across every process
on the store, given back when its delivery failed, pruned after Slack has stopped retrying."""

from __future__ import annotations

from pathlib import Path

from jobs.store.inbound import KEEP, PRUNE_EVERY, InboundEvents
from jobs.store.store import Store
from tests.support.clock import FakeClock


def test_one_claim_per_event_across_processes_given_back_when_not_handled(tmp_path: Path) -> None:
    clock = FakeClock()
    url = f"sqlite:///{tmp_path / 'bot.db'}"
    here, there = Store(url, clock=clock), Store(url, clock=clock)
    here.migrate()
    ours, theirs = InboundEvents(here, clock), InboundEvents(there, clock)
    assert ours.claim("Ev1") and not theirs.claim("Ev1") and not ours.claim("Ev1")
    assert theirs.claim("Ev2")
    theirs.release("Ev2")  # its delivery was not handled (a listener failed): the retry is taken
    assert ours.claim("Ev2")


def test_claims_are_pruned_once_slack_has_stopped_retrying(tmp_path: Path) -> None:
    clock = FakeClock()
    store = Store(f"sqlite:///{tmp_path / 'bot.db'}", clock=clock)
    store.migrate()
    inbound = InboundEvents(store, clock)
    assert inbound.claim("EvOld")
    clock.advance((KEEP + PRUNE_EVERY).total_seconds() + 1)
    assert inbound.claim("EvNew")  # prunes on its way
    assert inbound.claim("EvOld")  # forgotten: a delivery this late is not a retry Slack sends

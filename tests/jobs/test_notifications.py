"""Notification rules and subscriptions: /notify's grammar, what a subscription matches, the access rules,
and who wants a DM."""

from __future__ import annotations

import pytest

from jobs.errors import BadInput, PermissionDenied
from jobs.notifications import rules
from jobs.notifications.rules import Filter, JobFacts, matches, parse_notify
from jobs.notifications.service import NotificationService
from jobs.permissions import AccessPolicy
from jobs.records import Actor
from jobs.store.store import Store
from tests.support.clock import FakeClock

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
BOB = Actor("U_BOB", channel_id="C_ML", via="slack")
ADMIN = Actor("U_ADMIN", channel_id="C_ML", via="slack")


def service(store: Store, clock: FakeClock, **policy: frozenset[str]) -> NotificationService:
    return NotificationService(store, clock=clock, policy=AccessPolicy(**policy))


# ---------------------------------------------------------------- the grammar


def test_on_defaults_to_failures_gave_up_and_regression() -> None:
    command = parse_notify("on", me="U_ME")
    assert command.verb == "on" and command.events == ("failed", "gave-up", "regression")
    assert command.filter == Filter()


@pytest.mark.parametrize(("text", "events", "flt"), [
    ("on completed,failed", ("completed", "failed"), Filter()),
    ("on launched gave_up endpoint-idle", ("launched", "gave-up", "endpoint-idle"), Filter()),
    ("on all", rules.EVENTS, Filter()),
    ("on failed user=<@U123ABC|alice>", ("failed",), Filter("user", "U123ABC")),
    ("on failed user=@U123ABC", ("failed",), Filter("user", "U123ABC")),
    ("on user=me", rules.DEFAULT_EVENTS, Filter("user", "U_ME")),
    ("on completed schedule=nightly-squad", ("completed",), Filter("schedule", "nightly-squad")),
    ("ON Relaunched preset=distilbert-spot", ("relaunched",), Filter("preset", "distilbert-spot")),
    ("on failed user=console:root", ("failed",), Filter("user", "console:root")),
])
def test_events_and_one_filter_are_read(text: str, events: tuple[str, ...], flt: Filter) -> None:
    command = parse_notify(text, me="U_ME")
    assert (command.events, command.filter) == (events, flt)


@pytest.mark.parametrize(("text", "named"), [
    ("on explode", "explode"),
    ("on failed team=ml", "team"),
    ("on failed user=@alice", "alice"),
    ("on user=U1AB schedule=x", "One filter"),
    ("off failed", "failed"),
    ("dm maybe", "/notify dm on"),
    ("subscribe", "subscribe"),
    ("on schedule=", "needs a value"),
    ('on "failed', "unbalanced"),
])
def test_bad_input_is_one_sentence_naming_the_word(text: str, named: str) -> None:
    with pytest.raises(BadInput) as caught:
        parse_notify(text, me="U_ME")
    assert named in caught.value.message and "\n" not in caught.value.message


def test_list_help_and_dm_verbs() -> None:
    assert parse_notify("", me="U").verb == "help" and parse_notify("help", me="U").verb == "help"
    assert parse_notify("list", me="U").verb == "list"
    assert parse_notify("dm on", me="U").dm is True and parse_notify("dm off", me="U").dm is False


def test_a_filter_matches_on_launcher_schedule_or_preset() -> None:
    job = JobFacts(launched_by="U_ALICE", schedule="nightly", preset="bert-squad")
    assert matches(Filter(), job)
    assert matches(Filter("user", "U_ALICE"), job) and not matches(Filter("user", "U_BOB"), job)
    assert matches(Filter("schedule", "nightly"), job) and not matches(Filter("schedule", "weekly"), job)
    assert matches(Filter("preset", "bert-squad"), job) and not matches(Filter("preset", "roberta-mnli"), job)


# ---------------------------------------------------------------- subscriptions


def test_subscriptions_route_each_event_only_to_channels_that_asked(store: Store, clock: FakeClock) -> None:
    notes = service(store, clock)
    notes.subscribe(ALICE, "C_ALERTS", ("failed", "gave-up"), Filter())
    notes.subscribe(ALICE, "C_SQUAD", ("completed",), Filter("preset", "bert-squad"))
    notes.subscribe(BOB, "C_BOB", ("failed",), Filter("user", "U_BOB"))
    alice_squad = [JobFacts("U_ALICE", None, "bert-squad")]
    assert notes.channels_for("failed", alice_squad) == ["C_ALERTS"]
    assert notes.channels_for("completed", alice_squad) == ["C_SQUAD"]
    assert notes.channels_for("completed", [JobFacts("U_ALICE", None, "distilbert-spot")]) == []
    assert notes.channels_for("failed", [JobFacts("U_BOB", None, None)]) == ["C_ALERTS", "C_BOB"]
    assert notes.channels_for("launched", alice_squad) == []
    assert notes.channels_for("endpoint-idle", None) == []  # an event about no job: unfiltered ones only


def test_subscribing_again_with_the_same_filter_replaces_the_events(store: Store, clock: FakeClock) -> None:
    notes = service(store, clock)
    first = notes.subscribe(ALICE, "C_ML", ("failed",), Filter())
    second = notes.subscribe(ALICE, "C_ML", ("completed", "launched"), Filter())
    assert first.before is None and second.before == ("failed",)
    assert first.subscription.id == second.subscription.id
    assert notes.list("C_ML")[0].events == ("completed", "launched")
    assert [e.action for e in store.audit_log()] == ["notify.on", "notify.on"]


def test_only_the_subscriber_or_an_admin_removes_a_subscription(store: Store, clock: FakeClock) -> None:
    notes = service(store, clock, admins=frozenset({"U_ADMIN"}))
    notes.subscribe(ALICE, "C_ML", ("failed",), Filter())
    notes.subscribe(BOB, "C_ML", ("completed",), Filter("user", "U_BOB"))
    result = notes.unsubscribe(BOB, "C_ML", None)
    assert [s.created_by for s in result.removed] == ["U_BOB"] and [s.created_by for s in result.kept] == ["U_ALICE"]
    assert notes.unsubscribe(ADMIN, "C_ML", Filter()).removed and notes.list("C_ML") == []


def test_the_access_rules_apply_to_subscribing_and_to_routing(store: Store, clock: FakeClock) -> None:
    open_policy = service(store, clock)
    open_policy.subscribe(ALICE, "C_OLD", ("failed",), Filter())
    strict = service(store, clock, allowed_users=frozenset({"U_ALICE"}), allowed_channels=frozenset({"C_ML"}))
    with pytest.raises(PermissionDenied):
        strict.subscribe(BOB, "C_ML", ("failed",), Filter())
    with pytest.raises(PermissionDenied):
        strict.subscribe(Actor("U_ALICE", channel_id="C_ELSEWHERE", via="slack"), "C_ELSEWHERE", ("failed",), Filter())
    with pytest.raises(PermissionDenied):
        strict.set_dm_default(BOB, True)
    strict.subscribe(ALICE, "C_ML", ("failed",), Filter())
    # C_OLD was subscribed before the channel rule was set: it gets nothing now.
    assert strict.channels_for("failed", [JobFacts("U_ALICE", None, None)]) == ["C_ML"]


def test_dm_wanted_by_the_job_then_the_person_then_failures_only(store: Store, clock: FakeClock) -> None:
    notes = service(store, clock)
    assert notes.wants_dm("U_ALICE", None, failure=True) and not notes.wants_dm("U_ALICE", None, failure=False)
    assert notes.wants_dm("U_ALICE", "dm", failure=False) and not notes.wants_dm("U_ALICE", "none", failure=True)
    notes.set_dm_default(ALICE, True)
    assert notes.wants_dm("U_ALICE", None, failure=False) and notes.dm_default("U_ALICE") is True
    notes.set_dm_default(ALICE, False)
    assert not notes.wants_dm("U_ALICE", None, failure=True) and notes.wants_dm("U_ALICE", "dm", failure=True)
    assert notes.dm_default("U_BOB") is None

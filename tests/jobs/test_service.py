"""JobService against a real SQLite store and the scripted in-memory backend (a peer, not a mock)."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest

from jobs.errors import (
    BackendUnavailable,
    BudgetExceeded,
    CapacityError,
    ConfigError,
    InvalidState,
    NotFound,
    PermissionDenied,
    SpecError,
    TrainbotError,
)
from jobs.lifecycle.service import JobService, default_lineage_id
from jobs.lineage import AttemptStatus, LineageStatus
from jobs.planning.grammar import parse_command
from jobs.planning.plan import LINEAGE_PLACEHOLDER
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.store import Store
from tests.jobs.fakes import ScriptedBackend
from tests.support.clock import FakeClock

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
BOB = Actor("U_BOB", channel_id="C_ML", via="slack")
ADMIN = Actor("U_ADMIN", channel_id="C_OTHER", via="slack")
SPOT = "distilbert-spot"  # worst case $6.38: 6 attempts x 1000 s on the dearest fallback, its own ml.p3.2xlarge


@pytest.fixture
def backend(clock: FakeClock) -> ScriptedBackend:
    return ScriptedBackend(clock=clock)


def make_service(store: Store, backend: ScriptedBackend, clock: FakeClock, **settings: Any) -> JobService:
    counter = iter(range(1, 1000))
    return JobService(
        store=store,
        backend=backend,
        clock=clock,
        settings=Settings(trainbot_bucket="bkt", **settings),
        new_lineage_id=lambda spec: f"{spec.preset or 'job'}-{next(counter):08x}",
    )


@pytest.fixture
def service(store: Store, backend: ScriptedBackend, clock: FakeClock) -> JobService:
    return make_service(store, backend, clock, trainbot_admins=("U_ADMIN",))


def actions(store: Store, target: str | None = None) -> list[str]:
    return [e.action for e in reversed(store.audit_log(target=target))]


# -- plan and ids ----------------------------------------------------------------------------------------


def test_plan_records_nothing_and_calls_no_backend(
    service: JobService, store: Store, backend: ScriptedBackend
) -> None:
    plan = service.plan("bert-squad spot=yes")
    assert plan.spec.spot and plan.lineage_id == LINEAGE_PLACEHOLDER
    assert backend.calls == [] and store.list_lineages() == []
    with pytest.raises(SpecError):
        service.plan("bert-squad instances=lots")


def test_default_lineage_ids_are_valid_job_name_prefixes() -> None:
    pattern = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?")
    ids = {default_lineage_id(parse_command(t)) for t in ("bert-squad", "roberta-mnli", SPOT)}
    custom = default_lineage_id(parse_command("model=bert-base-uncased dataset=squad"))
    assert custom.startswith("qa-")
    for lid in [*ids, custom]:
        assert pattern.fullmatch(lid) and len(lid) <= 50 and re.search(r"-[0-9a-f]{8}$", lid)
    assert {i.rsplit("-", 1)[0] for i in ids} == {"bert-squad", "roberta-mnli", SPOT}
    assert default_lineage_id(parse_command(SPOT)) != default_lineage_id(parse_command(SPOT))


def test_an_invalid_injected_lineage_id_is_refused(
    store: Store, backend: ScriptedBackend, clock: FakeClock
) -> None:
    service = JobService(
        store=store, backend=backend, clock=clock, settings=Settings(), new_lineage_id=lambda spec: "bad_id!"
    )
    with pytest.raises(ValueError):
        service.launch(SPOT, actor=ALICE)
    assert backend.calls == []


# -- launch -------------------------------------------------------------------------------------------------


def test_launch_records_then_launches_then_completes_the_record(
    service: JobService, store: Store, backend: ScriptedBackend
) -> None:
    seen: list[tuple[LineageStatus, AttemptStatus]] = []

    def at_launch(job_name: str) -> None:  # what a crash at this instant would leave behind
        lineage = store.find(job_name)
        assert lineage.latest_attempt is not None
        seen.append((lineage.status, lineage.latest_attempt.status))

    backend.on_launch = at_launch
    lineage = service.launch(f"{SPOT} hp.seed=7", actor=ALICE)

    assert seen == [(LineageStatus.PENDING, AttemptStatus.LAUNCHING)]
    assert lineage.id == "distilbert-spot-00000001"
    assert lineage.status is LineageStatus.RUNNING
    assert [(a.job_name, a.status, a.spot) for a in lineage.attempts] == [
        ("distilbert-spot-00000001-1", AttemptStatus.RUNNING, True)
    ]
    assert backend.created == ["distilbert-spot-00000001-1"]
    plan = backend.plans["distilbert-spot-00000001-1"]
    assert plan.lineage_id == lineage.id and plan.spec == lineage.spec
    assert plan.estimator["checkpoint_s3_uri"] == lineage.checkpoint_uri
    assert lineage.checkpoint_uri.startswith("s3://bkt/") and lineage.id in lineage.checkpoint_uri
    assert lineage.estimated_usd == pytest.approx(plan.cost.worst_case_usd)
    assert (lineage.launched_by, lineage.origin, lineage.channel, lineage.backend) == (
        "U_ALICE",
        "slack",
        "C_ML",
        "fake",
    )
    assert actions(store, lineage.id) == ["launch"]


def test_two_lineages_never_share_a_checkpoint_uri(service: JobService) -> None:
    a = service.launch(SPOT, actor=ALICE)
    b = service.launch(SPOT, actor=ALICE)
    assert a.checkpoint_uri != b.checkpoint_uri


def test_a_crash_before_the_cloud_call_leaves_records_that_say_so(
    service: JobService, store: Store, backend: ScriptedBackend
) -> None:
    def crash(job_name: str) -> None:
        raise SystemExit("killed")  # the process dies mid-launch

    backend.on_launch = crash
    with pytest.raises(SystemExit):
        service.launch(SPOT, actor=ALICE)
    (lineage,) = store.list_lineages()
    assert lineage.status is LineageStatus.PENDING
    assert [a.status for a in store.active_attempts()] == [AttemptStatus.LAUNCHING]
    assert backend.created == []


@pytest.mark.parametrize(
    "error",
    [
        CapacityError("No spot capacity for ml.p3.2xlarge in us-east-1 right now: try spot=no or another type."),
        ConfigError("AWS has no credentials for the bot: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY."),
    ],
    ids=["capacity", "misconfigured"],
)
def test_a_refused_launch_is_recorded_as_failed_with_the_reason(
    service: JobService, store: Store, backend: ScriptedBackend, error: TrainbotError
) -> None:
    backend.fail_launch(error)
    with pytest.raises(type(error)) as raised:
        service.launch(SPOT, actor=ALICE)
    assert raised.value is error
    (lineage,) = store.list_lineages()
    assert lineage.status is LineageStatus.FAILED
    attempt = lineage.attempts[0]
    assert attempt.status is AttemptStatus.LAUNCH_FAILED and attempt.failure_reason == error.message
    assert attempt.ended_at is not None
    assert store.active_attempts() == []
    assert actions(store, lineage.id) == ["launch", "launch.failed"]


def test_same_request_id_launches_once(service: JobService, backend: ScriptedBackend) -> None:
    first = service.launch(SPOT, actor=ALICE, request_id="trigger-1")
    again = service.launch(SPOT, actor=ALICE, request_id="trigger-1")
    other = service.launch(SPOT, actor=ALICE, request_id="trigger-2")
    assert again.id == first.id != other.id
    assert len(backend.created) == 2


def test_same_request_id_from_two_threads_launches_once(
    service: JobService, backend: ScriptedBackend
) -> None:
    barrier = threading.Barrier(2)
    got: list[str] = []

    def click() -> None:
        barrier.wait()
        got.append(service.launch(SPOT, actor=ALICE, request_id="double-click").id)

    threads = [threading.Thread(target=click) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(got) == 2 and got[0] == got[1]
    assert len(backend.created) == 1


def test_a_spec_object_and_a_schedule_can_be_launched(service: JobService, store: Store) -> None:
    lineage = service.launch(parse_command(SPOT), actor=Actor("U_ALICE", via="schedule"), schedule="nightly")
    assert lineage.schedule == "nightly" and lineage.origin == "schedule"
    assert [x.id for x in store.list_lineages(schedule="nightly")] == [lineage.id]


def test_strangers_are_refused_and_audited(store: Store, backend: ScriptedBackend, clock: FakeClock) -> None:
    service = make_service(store, backend, clock, trainbot_allowed_users=("U_ALICE",))
    with pytest.raises(PermissionDenied, match="TRAINBOT_ALLOWED_USERS"):
        service.launch(SPOT, actor=BOB, request_id="r-1")
    assert backend.calls == [] and store.list_lineages() == []
    (entry,) = store.audit_log()
    assert (entry.action, entry.user, entry.detail["kind"]) == ("launch.refused", "U_BOB", "PermissionDenied")
    assert service.launch(SPOT, actor=ALICE).status is LineageStatus.RUNNING


def test_the_per_job_budget_refuses_and_audits(
    store: Store, backend: ScriptedBackend, clock: FakeClock
) -> None:
    service = make_service(store, backend, clock, trainbot_max_job_usd=100)
    with pytest.raises(BudgetExceeded, match="TRAINBOT_MAX_JOB_USD"):
        service.launch("bert-squad", actor=ALICE)  # 2 x p3.16xlarge for 24 h
    assert backend.calls == [] and store.list_lineages() == []
    assert actions(store) == ["launch.refused"]
    assert service.launch(SPOT, actor=ALICE).status is LineageStatus.RUNNING


def test_the_daily_budget_counts_today_only(store: Store, backend: ScriptedBackend, clock: FakeClock) -> None:
    # A launch is checked at its lineage's worst case ($6.38); a running attempt counts at its own
    # ($1.06: 1000 s of ml.p3.2xlarge on-demand), so the second one passes $7.00.
    service = make_service(store, backend, clock, trainbot_daily_budget_usd=7.0)
    backend.fail_launch(
        BackendUnavailable("SageMaker could not be reached: check AWS_ENDPOINT_URL and the network.")
    )
    with pytest.raises(BackendUnavailable):
        service.launch(SPOT, actor=ALICE)  # refused by the backend: it costs nothing
    service.launch(SPOT, actor=ALICE)
    with pytest.raises(BudgetExceeded, match="TRAINBOT_DAILY_BUDGET_USD") as refused:
        service.launch(SPOT, actor=BOB)
    assert ("$1.06" in refused.value.message and "$6.38" in refused.value.message
            and "$7.00" in refused.value.message)
    assert len(backend.created) == 1
    clock.advance(15 * 3600)  # 00:00 UTC the next day
    assert service.launch(SPOT, actor=BOB).status is LineageStatus.RUNNING


def test_bad_text_launches_nothing(service: JobService, store: Store, backend: ScriptedBackend) -> None:
    with pytest.raises(SpecError):
        service.launch("bert-squad instance_count=999", actor=ALICE)
    assert backend.calls == [] and store.list_lineages() == []


# -- stop, get, list ----------------------------------------------------------------------------------------


def test_the_launcher_stops_by_lineage_or_job_name(
    service: JobService, store: Store, backend: ScriptedBackend
) -> None:
    lineage = service.launch(SPOT, actor=ALICE)
    stopped = service.stop(f"{lineage.id}-1", actor=ALICE)
    assert stopped.status is LineageStatus.STOPPED
    assert backend.stopped == [f"{lineage.id}-1"]
    assert actions(store, lineage.id) == ["launch", "stop"]
    with pytest.raises(InvalidState, match="already ended"):
        service.stop(lineage.id, actor=ALICE)


def test_only_the_launcher_or_an_admin_may_stop(
    service: JobService, store: Store, backend: ScriptedBackend
) -> None:
    lineage = service.launch(SPOT, actor=ALICE)
    with pytest.raises(PermissionDenied, match="U_ALICE"):
        service.stop(lineage.id, actor=BOB)
    assert backend.stopped == []
    assert actions(store, lineage.id) == ["launch", "stop.refused"]
    assert service.stop(lineage.id, actor=ADMIN).status is LineageStatus.STOPPED


def test_stopping_a_launch_that_never_reached_the_backend(
    service: JobService, store: Store, backend: ScriptedBackend
) -> None:
    backend.on_launch = lambda name: (_ for _ in ()).throw(SystemExit("killed"))
    with pytest.raises(SystemExit):
        service.launch(SPOT, actor=ALICE)
    (lineage,) = store.list_lineages()
    assert service.stop(lineage.id, actor=ALICE).status is LineageStatus.STOPPED  # backend: NotFound, fine


def test_a_stop_during_the_launch_stops_the_new_job(
    service: JobService, store: Store, backend: ScriptedBackend
) -> None:
    def stop_meanwhile(job_name: str) -> None:
        backend.on_launch = None
        service.stop(job_name, actor=ALICE)  # another process stops it while the create call is in flight

    backend.on_launch = stop_meanwhile
    lineage = service.launch(SPOT, actor=ALICE)
    assert lineage.status is LineageStatus.STOPPED
    assert backend.stopped == [f"{lineage.id}-1"]


def test_get_list_and_attach_message(service: JobService) -> None:
    a = service.launch(SPOT, actor=ALICE)
    b = service.launch(SPOT, actor=ALICE)
    service.stop(a.id, actor=ALICE)
    assert [x.id for x in service.list()] == [b.id, a.id]
    assert [x.id for x in service.list(active_only=True)] == [b.id]
    service.attach_message(b.id, "C_ML", "1700000000.000100")
    got = service.get(f"{b.id}-1")
    assert (got.id, got.channel, got.message_ts) == (b.id, "C_ML", "1700000000.000100")
    with pytest.raises(NotFound):
        service.get("nothing-here")

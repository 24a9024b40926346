"""The steps after a completion, in the core: each completed lineage with a model becomes one model package
(in the store: no remote registry here), numbered per model line, found again rather than made twice; and a
scheduled run with `endpoint=` is promoted when it beats the previous one with `deploy_if_better=yes`, offered
otherwise, never promoted when it regressed, with one line in the schedule's channel each time. On a real
store (SQLite and PostgreSQL); the endpoint is the in-memory EndpointBackend peer."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest

from bot.scheduler import ApsCronCalendar
from jobs import lineage as moves
from jobs.endings.stage import EndingStage
from jobs.endpoints.revisions import RevisionStatus
from jobs.endpoints.service import EndpointService
from jobs.lifecycle.service import JobService
from jobs.lineage import Lineage
from jobs.records import Actor
from jobs.registry.port import Approval
from jobs.registry.service import RegistryService, group_for
from jobs.releases.steps import ReleaseSteps
from jobs.schedules.service import ScheduleService
from jobs.settings import Settings
from jobs.store.store import Store
from tests.jobs.fakes import ScriptedBackend
from tests.support.clock import FakeClock
from tests.support.endpoints import FakeEndpoints

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
NIGHTLY = datetime(2026, 3, 2, 2, 0, tzinfo=timezone.utc)
TRAIN = "bert-squad"


@dataclass
class Rig:
    clock: FakeClock
    store: Store
    jobs: JobService
    schedules: ScheduleService
    endpoints: EndpointService
    fake: FakeEndpoints
    registry: RegistryService
    releases: ReleaseSteps
    stage: EndingStage

    def run(self, day: int, metrics: dict[str, float], *, schedule: str = "nightly") -> Lineage:
        """One nightly run, completed with these metrics and a model, then the steps after completion."""
        self.clock.advance(86400)
        lineage = self.schedules.fire(schedule, NIGHTLY + timedelta(days=day)).lineage
        assert lineage is not None
        job = lineage.attempts[-1].job_name
        self.store.transition_attempt(job, moves.ATTEMPT_COMPLETED, metrics=metrics,
                                      model_artifacts=f"s3://bkt/{job}/output/model.tar.gz")
        self.store.transition_lineage(lineage.id, moves.COMPLETE)
        self.stage.process_due()
        return self.store.get_lineage(lineage.id)

    def lines(self) -> list[dict]:
        return [n.payload for n in self.store.outbox.due_notifications(limit=200) if n.kind == "release"]


@pytest.fixture
def rig(database_url: str) -> Rig:
    clock = FakeClock(datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc))
    store = Store(database_url, clock=clock)
    store.migrate()
    settings = Settings(trainbot_bucket="bkt")
    backend = ScriptedBackend(clock=clock, name="sagemaker")
    tag, counter = uuid.uuid4().hex[:4], iter(range(1, 1000))
    jobs = JobService(store=store, backend=backend, clock=clock, settings=settings,
                      new_lineage_id=lambda spec: f"run-{tag}-{next(counter)}")
    schedules = ScheduleService(store=store, jobs=jobs, calendar=ApsCronCalendar(), settings=settings, clock=clock)
    registry = RegistryService(store=store, remote=None, settings=settings, clock=clock)
    fake = FakeEndpoints()
    endpoints = EndpointService(store=store, backend=fake, settings=settings, clock=clock, registry=registry)
    releases = ReleaseSteps(store=store, registry=registry, schedules=schedules, endpoints=endpoints)
    stage = EndingStage(store, clock, releases.all())
    yield Rig(clock, store, jobs, schedules, endpoints, fake, registry, releases, stage)
    store.dispose()


def deploy_prod(rig: Rig, lineage: Lineage) -> None:
    rig.endpoints.deploy(lineage.id, options={"name": "prod"}, actor=ALICE)
    rig.fake.set_status("prod", "InService")
    rig.endpoints.poll_once()


def test_one_package_per_lineage_numbered_per_line_and_found_again(rig: Rig) -> None:
    rig.schedules.add_from_text("nightly_qa", f'cron="0 2 * * *" {TRAIN}', actor=ALICE, channel="C_ML")
    first = rig.run(0, {"eval_f1": 80.0}, schedule="nightly_qa")
    second = rig.run(1, {"eval_f1": 81.0}, schedule="nightly_qa")
    assert group_for(first) == "nightly-qa"  # a schedule's name, as a Model Package Group may be named
    packages = rig.registry.list("nightly-qa")
    assert [(p.lineage_id, p.version, p.approval) for p in packages] == [
        (second.id, 2, Approval.PENDING), (first.id, 1, Approval.PENDING)]
    assert packages[0].metrics == {"eval_f1": 81.0} and packages[0].task == "question-answering"
    assert packages[0].model_data == f"s3://bkt/{second.id}-1/output/model.tar.gz" and packages[0].released_at
    assert rig.registry.register(first.id) == rig.registry.find(first.id)  # a second run makes nothing new
    assert rig.stage.process_due().endings == 0  # both steps done: the ending is not due again
    assert rig.registry.groups() == [("nightly-qa", 2)]
    assert rig.registry.groups() == [("nightly-qa", 2)]
    assert [e.action for e in rig.store.audit_log(target=first.id)] == ["registry.register", "launch"]


def test_registry_names_the_line_and_old_completions_are_left_alone(rig: Rig) -> None:
    rig.schedules.add_from_text("nightly", f'cron="0 2 * * *" {TRAIN} registry=sentiment', actor=ALICE,
                                channel="C_ML")
    lineage = rig.run(0, {"eval_f1": 80.0})
    assert group_for(lineage) == "sentiment" and rig.registry.find(lineage.id).label == "sentiment v1"
    rig.schedules.add_from_text("other", f'cron="0 3 * * *" {TRAIN}', actor=ALICE, channel=None)
    rig.clock.advance(86400)
    late = rig.schedules.fire("other", NIGHTLY + timedelta(days=1)).lineage
    job = late.attempts[-1].job_name
    rig.store.transition_attempt(job, moves.ATTEMPT_COMPLETED, model_artifacts="s3://bkt/m.tar.gz")
    rig.store.transition_lineage(late.id, moves.COMPLETE)
    assert rig.registry.find(late.id) is None  # nothing registers before the stage runs its steps
    rig.stage.process_due()
    assert rig.registry.find(late.id).label == "other v1" and not rig.lines()[1:]  # no channel: no line


def test_a_better_run_is_promoted_a_worse_one_offered_with_one_line_each(rig: Rig) -> None:
    rig.schedules.add_from_text("nightly", f'cron="0 2 * * *" deploy_if_better=yes endpoint=prod {TRAIN}',
                                actor=ALICE, channel="C_ML")
    first = rig.run(0, {"eval_f1": 80.0, "eval_exact_match": 70.0})
    deploy_prod(rig, first)
    [first_line] = rig.lines()
    assert first_line["verdict"] == "first" and first_line["offer"] is False  # prod did not exist then
    assert "prod does not exist yet" in first_line["text"]

    second = rig.run(1, {"eval_f1": 82.0, "eval_exact_match": 71.0})
    [(_, endpoint, update)] = rig.fake.of("update")
    assert endpoint == "prod" and update.model.model_data.startswith(f"s3://bkt/{second.id}-1/")
    line = rig.lines()[-1]
    assert line["verdict"] == "promote" and line["revision"] and line["offer"] is False
    assert line["text"].startswith(f":rocket: Schedule nightly: {second.id} beat {first.id}")
    assert f"promoted into prod in place (it served {first.id})" in line["text"]
    rig.fake.finish_update("prod")
    rig.endpoints.poll_once()
    assert rig.endpoints.get("prod").lineage_id == second.id
    assert rig.registry.find(second.id).approval is Approval.APPROVED
    assert rig.registry.find(second.id).approval_by == "U_ALICE"  # the schedule acts for who added it

    third = rig.run(2, {"eval_f1": 75.0, "eval_exact_match": 71.0})
    assert len(rig.fake.of("update")) == 1  # a regression never promotes
    line = rig.lines()[-1]
    assert line["verdict"] == "regressed" and line["offer"] is True and line["lineage_id"] == third.id
    assert f"keeps serving {second.id}" in line["text"]
    assert len(rig.lines()) == 3
    for again in (third, second):  # a step run twice (a crash between its effect and its record) says nothing twice
        rig.releases.register_model_package(again.id)
        rig.releases.promote_if_scheduled(again.id)
    assert len(rig.lines()) == 3 and len(rig.fake.of("update")) == 1


def test_without_deploy_if_better_a_better_run_is_offered_and_a_refusal_is_said(rig: Rig) -> None:
    rig.schedules.add_from_text("nightly", f'cron="0 2 * * *" endpoint=prod {TRAIN}', actor=ALICE, channel="C_ML")
    first = rig.run(0, {"eval_f1": 80.0})
    deploy_prod(rig, first)
    rig.run(1, {"eval_f1": 82.0})
    line = rig.lines()[-1]
    assert line["verdict"] == "better" and line["offer"] is True and "deploy_if_better off" in line["text"]
    assert rig.fake.of("update") == []


def test_a_promotion_the_endpoint_refuses_is_said_with_a_promote_button(rig: Rig) -> None:
    rig.schedules.add_from_text("nightly", f'cron="0 2 * * *" deploy_if_better=yes endpoint=prod {TRAIN}',
                                actor=ALICE, channel="C_ML")
    first = rig.run(0, {"eval_f1": 80.0})
    deploy_prod(rig, first)
    rig.endpoints.undeploy("prod", actor=ALICE)
    rig.run(1, {"eval_f1": 82.0})
    line = rig.lines()[-1]
    assert line["verdict"] == "promote" and line["revision"] is None
    assert "was not promoted into prod: Endpoint prod is deleted" in line["text"]
    assert rig.endpoints.promotions.revisions.with_status("prod", RevisionStatus.UPDATING) == []

"""Promotions and rollbacks in the core: a live endpoint updated in place through the EndpointBackend port
(an in-memory peer whose updates the test finishes, as SageMaker's would), against a real store (SQLite and
PostgreSQL): the card's two sides, the caps, who may, the history, the packages' approvals, the messages,
and a rollback back to the config served before."""

from __future__ import annotations

import pytest

from jobs.endpoints.port import EndpointStatus
from jobs.endpoints.revisions import Action, RevisionStatus
from jobs.endpoints.service import EndpointService
from jobs.errors import (
    BackendError,
    BadInput,
    BudgetExceeded,
    InvalidState,
    NotFound,
    PermissionDenied,
    SpecError,
)
from jobs.records import Actor
from jobs.registry.port import Approval
from jobs.registry.service import RegistryService
from jobs.settings import Settings
from jobs.store.rows import Notification
from jobs.store.store import Store
from tests.support.clock import FakeClock
from tests.support.endpoints import LAUNCHER, FakeEndpoints, completed_lineage

BOB = Actor("U_BOB", channel_id="C_ML", via="slack")
ADMIN = Actor("U_ADMIN", channel_id="C_OPS", via="slack")


@pytest.fixture
def backend() -> FakeEndpoints:
    return FakeEndpoints()


@pytest.fixture
def settings() -> Settings:
    return Settings(trainbot_admins=("U_ADMIN",), trainbot_max_endpoint_usd_per_hour=20.0)


@pytest.fixture
def registry(store: Store, clock: FakeClock, settings: Settings) -> RegistryService:
    return RegistryService(store=store, remote=None, settings=settings, clock=clock)


@pytest.fixture
def service(store, backend, clock, settings, registry) -> EndpointService:
    return EndpointService(store=store, backend=backend, settings=settings, clock=clock, registry=registry)


def trained(store: Store, lineage_id: str, metrics: dict[str, float], **kwargs) -> None:
    completed_lineage(store, lineage_id, **kwargs)
    store.update_attempt(f"{lineage_id}-1", metrics=metrics)


def outbox(store: Store, kind: str) -> list[Notification]:
    return [n for n in store.outbox.due_notifications(limit=100) if n.kind == kind]


def prod(service: EndpointService, backend: FakeEndpoints, store: Store, options: dict[str, str] | None = None) -> str:
    """bert-1 deployed as `prod` and in service."""
    trained(store, "bert-1", {"eval_f1": 80.0, "eval_exact_match": 70.0})
    name = service.deploy("bert-1", options={"name": "prod", **(options or {})}, actor=LAUNCHER).name
    backend.set_status(name, "InService")
    service.poll_once()
    return name


def test_a_promotion_updates_the_endpoint_in_place_and_the_thread_hears_what_serves(service, backend, store, registry):
    name = prod(service, backend, store)
    trained(store, "bert-2", {"eval_f1": 84.5, "eval_exact_match": 75.0})
    registry.register("bert-2")
    plan = service.promotions.plan("bert-2", name, options={}, actor=LAUNCHER)
    assert (plan.current.lineage_id, plan.new.lineage_id) == ("bert-1", "bert-2")
    assert plan.new.metrics == {"eval_f1": 84.5, "eval_exact_match": 75.0} and plan.current.metrics["eval_f1"] == 80.0
    assert plan.new.package == "trainbot-question-answering v1" and plan.new.approval == "PendingManualApproval"
    assert plan.current.hourly_usd == plan.new.hourly_usd and plan.new.hourly_usd is not None
    assert backend.of("update") == []  # a plan has no side effect
    revision = service.promotions.promote(plan, actor=LAUNCHER, reason="better F1")
    [(_, endpoint, update)] = backend.of("update")
    assert endpoint == name and update.endpoint == name  # the same endpoint: same name, same URL
    assert update.config_name == plan.model.model_name != name and update.config_name.startswith("prod-")
    assert update.model.model_data == "s3://bkt/bert-2-1/output/model.tar.gz"
    assert revision.status is RevisionStatus.UPDATING and service.get(name).lineage_id == "bert-1"
    service.poll_once()  # SageMaker is still moving it: nothing changes
    assert service.get(name).updating_revision == revision.id and outbox(store, "endpoint_promoted") == []

    backend.finish_update(name)
    service.poll_once()
    service.poll_once()
    endpoint = service.get(name)
    assert (endpoint.lineage_id, endpoint.config_name, endpoint.updating_revision) == ("bert-2", update.config_name, None)
    assert endpoint.status is EndpointStatus.IN_SERVICE
    [deploy, promote] = reversed(service.promotions.history(name)[1])
    assert (deploy.action, deploy.status, promote.action, promote.status) == (
        Action.DEPLOY, RevisionStatus.REPLACED, Action.PROMOTE, RevisionStatus.SERVING)
    package = registry.find("bert-2")
    assert package is not None and package.approval is Approval.APPROVED and package.approval_by == "U_ALICE"
    assert "promoted into prod" in package.approval_reason
    [note] = outbox(store, "endpoint_promoted")
    assert note.lineage_id == "bert-2" and "prod now serves bert-2 (package trainbot-question-answering v1)" in note.payload["text"]
    assert "served bert-1 before" in note.payload["text"]
    assert [e.action for e in store.audit_log(target=name)] == ["endpoint.promote"]


def test_only_the_owner_or_an_admin_promotes_or_rolls_back(service, backend, store):
    name = prod(service, backend, store)
    trained(store, "bert-2", {"eval_f1": 84.5}, actor=BOB)
    with pytest.raises(PermissionDenied, match=r"Only the owner of endpoint prod \(U_ALICE, who deployed it\)"):
        service.promotions.plan("bert-2", name, options={}, actor=BOB)  # even the new model's launcher
    with pytest.raises(PermissionDenied):
        service.promotions.check_rollback(name, actor=BOB)
    service.promotions.promote(service.promotions.plan("bert-2", name, options={}, actor=ADMIN), actor=ADMIN)
    assert len(backend.of("update")) == 1


def test_promotion_checks_the_caps_the_task_and_what_serves(service, backend, store):
    name = prod(service, backend, store)
    trained(store, "bert-2", {"eval_f1": 84.5})
    with pytest.raises(BudgetExceeded, match="per-endpoint limit"):
        service.promotions.plan("bert-2", name, options={"instance_type": "ml.p4d.24xlarge"}, actor=LAUNCHER)
    trained(store, "cls-1", {"eval_accuracy": 0.9}, text="distilbert-spot")
    with pytest.raises(InvalidState, match="serves question-answering, but cls-1 is a text-classification"):
        service.promotions.plan("cls-1", name, options={}, actor=LAUNCHER)
    with pytest.raises(InvalidState, match="already serves bert-1"):
        service.promotions.plan("bert-1", name, options={}, actor=LAUNCHER)
    with pytest.raises(NotFound, match="no endpoint 'nope'"):
        service.promotions.plan("bert-2", "nope", options={}, actor=LAUNCHER)
    service.promotions.promote(service.promotions.plan("bert-2", name, options={}, actor=LAUNCHER), actor=LAUNCHER)
    trained(store, "bert-3", {"eval_f1": 85.0})
    with pytest.raises(InvalidState, match="being updated already .to bert-2, asked by U_ALICE"):
        service.promotions.plan("bert-3", name, options={}, actor=LAUNCHER)
    assert len(backend.of("update")) == 1


def test_the_instance_cap_applies_to_the_new_config(store, backend, clock, registry):
    tight = Settings(trainbot_max_instances=2)
    service = EndpointService(store=store, backend=backend, settings=tight, clock=clock, registry=registry)
    name = prod(service, backend, store)
    trained(store, "bert-2", {"eval_f1": 84.5})
    with pytest.raises(SpecError, match=r"between 1 and 2 \(TRAINBOT_MAX_INSTANCES\), not 3"):
        service.promotions.plan("bert-2", name, options={"instance_count": "3"}, actor=LAUNCHER)
    plan = service.promotions.plan("bert-2", name, options={"instance_count": "2", "alarm": "yes"}, actor=LAUNCHER)
    assert plan.model.instance_count == 2 and plan.update.rollout.canary_percent == 10
    assert plan.update.rollout.alarm == "prod-5xx"


def test_a_rollback_returns_to_the_config_served_before_and_rejects_the_package(service, backend, store, registry):
    name = prod(service, backend, store)
    first_config = service.get(name).config_name
    trained(store, "bert-2", {"eval_f1": 84.5})
    service.promotions.promote(service.promotions.plan("bert-2", name, options={}, actor=LAUNCHER), actor=LAUNCHER)
    backend.finish_update(name)
    service.poll_once()
    serving = service.promotions.current(name)
    revision = service.promotions.rollback(name, actor=ADMIN, reason="answers got worse", expected=serving.id)
    [_, (_, _, update)] = backend.of("update")
    assert (update.endpoint, update.config_name, update.model) == (name, first_config, None)
    assert revision.action is Action.ROLLBACK and revision.lineage_id == "bert-1"
    rejected = registry.find("bert-2")
    assert rejected is not None and rejected.approval is Approval.REJECTED and rejected.approval_by == "U_ADMIN"
    assert "answers got worse" in rejected.approval_reason
    backend.finish_update(name)
    service.poll_once()
    endpoint = service.get(name)
    assert (endpoint.lineage_id, endpoint.config_name) == ("bert-1", first_config)
    statuses = [(r.action, r.status) for r in service.promotions.history(name)[1]]
    assert statuses == [(Action.ROLLBACK, RevisionStatus.SERVING), (Action.PROMOTE, RevisionStatus.ROLLED_BACK),
                        (Action.DEPLOY, RevisionStatus.RESTORED)]
    [note] = outbox(store, "endpoint_rolled_back")
    assert note.lineage_id == "bert-2" and "rolled back by U_ADMIN" in note.payload["text"]
    with pytest.raises(InvalidState, match="nothing to roll back to"):
        service.promotions.rollback(name, actor=ADMIN)
    with pytest.raises(InvalidState, match="no longer serves bert-2"):  # a Rollback button pressed late
        service.promotions.check_rollback(name, actor=ADMIN, expected=serving.id)
    assert [e.action for e in store.audit_log(target=name)] == ["endpoint.rollback", "endpoint.promote"]


def test_an_update_sagemaker_rolled_back_is_failed_rejected_and_told(service, backend, store, registry):
    name = prod(service, backend, store)
    trained(store, "bert-2", {"eval_f1": 84.5})
    plan = service.promotions.plan("bert-2", name, options={"alarm": "prod-errors"}, actor=LAUNCHER)
    service.promotions.promote(plan, actor=LAUNCHER)
    service.poll_once()  # Updating: seen
    backend.finish_update(name, rolled_back=True)  # the alarm fired: back on the old config
    service.poll_once()
    assert service.get(name).lineage_id == "bert-1" and service.get(name).updating_revision is None
    failed = service.promotions.history(name)[1][0]
    assert failed.status is RevisionStatus.FAILED and "alarm prod-errors" in failed.failure_reason
    package = registry.find("bert-2")
    assert package is not None and package.approval is Approval.REJECTED
    [note] = outbox(store, "endpoint_update_failed")
    assert "did not take bert-2" in note.payload["text"] and "still serves bert-1" in note.payload["text"]
    trained(store, "bert-3", {"eval_f1": 85.0})  # the next promotion inherits the alarm
    assert service.promotions.plan("bert-3", name, options={}, actor=LAUNCHER).update.rollout.alarm == "prod-errors"


def test_a_refused_update_leaves_the_endpoint_free_and_says_why(service, backend, store):
    name = prod(service, backend, store)
    trained(store, "bert-2", {"eval_f1": 84.5})
    backend.update_error = BackendError("AWS denied UpdateEndpoint: give the role sagemaker:UpdateEndpoint.")
    with pytest.raises(BackendError, match="denied UpdateEndpoint"):
        service.promotions.promote(service.promotions.plan("bert-2", name, options={}, actor=LAUNCHER), actor=LAUNCHER)
    assert service.get(name).updating_revision is None
    assert service.promotions.history(name)[1][0].status is RevisionStatus.FAILED
    backend.update_error = None
    service.promotions.promote(service.promotions.plan("bert-2", name, options={}, actor=LAUNCHER), actor=LAUNCHER)
    assert len(backend.of("update")) == 2


def test_a_keyed_promotion_happens_once(service, backend, store):
    name = prod(service, backend, store)
    trained(store, "bert-2", {"eval_f1": 84.5})
    first = service.promotions.promote_once("bert-2", name, request_id="schedule:bert-2", actor=LAUNCHER)
    again = service.promotions.promote_once("bert-2", name, request_id="schedule:bert-2", actor=LAUNCHER)
    assert first.id == again.id and len(backend.of("update")) == 1


def test_undeploy_deletes_every_config_the_endpoint_served(service, backend, store):
    name = prod(service, backend, store)
    trained(store, "bert-2", {"eval_f1": 84.5})
    plan = service.promotions.plan("bert-2", name, options={}, actor=LAUNCHER)
    service.promotions.promote(plan, actor=LAUNCHER)
    backend.finish_update(name)
    service.poll_once()
    service.undeploy(name, actor=LAUNCHER)
    [(_, deleted, configs)] = backend.of("delete")
    assert deleted == name and plan.update.config_name in configs
    assert {r.status for r in service.promotions.history(name)[1]} == {RevisionStatus.RETIRED}


def test_a_deploy_into_an_existing_name_is_a_promotion_offer_and_rollout_options_need_one(service, backend, store):
    name = prod(service, backend, store)
    assert service.promotion_target({"name": name}) == name and service.promotion_target({"name": "other"}) is None
    trained(store, "bert-2", {"eval_f1": 84.5})
    with pytest.raises(BadInput, match="alarm= and canary= apply when promoting"):
        service.plan("bert-2", options={"name": "fresh", "alarm": "yes"}, actor=LAUNCHER)

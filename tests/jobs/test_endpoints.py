"""EndpointService against a real SQLite store and an in-memory endpoint backend peer: what is deployed
from which job, who may, how endpoints are followed, asked, removed, and reported when idle."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from jobs.endpoints.options import DEFAULT_INSTANCE_TYPE, normalize_answer, parse_options
from jobs.endpoints.port import EndpointStatus
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
from jobs.lineage import LineageStatus
from jobs.planning import versions
from jobs.planning.prices import hourly_usd
from jobs.planning.serving import Framework, choose_framework
from jobs.records import Actor
from jobs.settings import Settings
from jobs.store.rows import Notification
from jobs.store.store import Store
from tests.support.clock import FakeClock
from tests.support.endpoints import LAUNCHER, FakeEndpoints, completed_lineage

BOB = Actor("U_BOB", channel_id="C_ML", via="slack")
ADMIN = Actor("U_ADMIN", channel_id="C_OPS", via="slack")
QA = {"question": "What is the city?", "context": "the city is kalo ."}


@pytest.fixture
def backend() -> FakeEndpoints:
    return FakeEndpoints()


@pytest.fixture
def service(store: Store, backend: FakeEndpoints, clock: FakeClock) -> EndpointService:
    settings = Settings(trainbot_admins=("U_ADMIN",), trainbot_endpoint_idle_hours=24)
    return EndpointService(store=store, backend=backend, settings=settings, clock=clock)


def outbox(store: Store, kind: str) -> list[Notification]:
    return [n for n in store.outbox.due_notifications(limit=100) if n.kind == kind]


def live(service: EndpointService, backend: FakeEndpoints, store: Store, lineage: str = "bert-1") -> str:
    """A deployed, in-service endpoint of a completed job."""
    completed_lineage(store, lineage)
    name = service.deploy(lineage, options={}, actor=LAUNCHER).name
    backend.set_status(name, "InService")
    service.poll_once()
    return name


# ---------------------------------------------------------------- deploy


def test_deploy_sends_the_jobs_model_with_its_inference_versions_and_records_creating(
    service, backend, store
):
    lineage = completed_lineage(store, "bert-1")
    endpoint = service.deploy("bert-1-1", options={}, actor=LAUNCHER)  # a job name finds its lineage too
    [(_, name, request)] = backend.of("deploy")
    assert name == endpoint.name == "bert-1-ep"
    assert (
        request.model_data == lineage.attempts[0].model_artifacts == "s3://bkt/bert-1-1/output/model.tar.gz"
    )
    assert request.framework == Framework("4.28.1", "2.0.0", "py310")
    assert (request.instance_type, request.instance_count, request.serverless) == (
        DEFAULT_INSTANCE_TYPE,
        1,
        False,
    )
    assert request.task == "question-answering" and request.model_name.startswith("bert-1-ep-20260301-")
    assert endpoint.status is EndpointStatus.CREATING and endpoint.channel == "C_ML"
    assert [e.action for e in store.audit_log(target="bert-1")] == ["endpoint.deploy"]


def test_only_completed_jobs_with_a_model_are_deployed(service, backend, store):
    completed_lineage(store, "run-1", status=LineageStatus.RUNNING)
    with pytest.raises(InvalidState, match="running, not completed"):
        service.deploy("run-1", options={}, actor=LAUNCHER)
    completed_lineage(store, "local-1", backend="local", model_artifacts="/tmp/model")
    with pytest.raises(InvalidState, match="trained on the local backend"):
        service.deploy("local-1", options={}, actor=LAUNCHER)
    with pytest.raises(NotFound, match="no job"):
        service.deploy("nope", options={}, actor=LAUNCHER)
    assert backend.of("deploy") == []


def test_deploy_and_undeploy_need_the_launcher_or_an_admin(service, backend, store):
    completed_lineage(store, "bert-1")
    with pytest.raises(PermissionDenied, match=r"Only the person who launched bert-1 \(U_ALICE\)"):
        service.deploy("bert-1", options={}, actor=BOB)
    name = service.deploy("bert-1", options={}, actor=ADMIN).name
    with pytest.raises(PermissionDenied):
        service.undeploy(name, actor=BOB)
    assert backend.of("delete") == []
    service.undeploy(name, actor=LAUNCHER)
    assert [c[1] for c in backend.of("delete")] == [name]


def test_training_versions_without_an_inference_image_deploy_on_the_nearest_and_say_so(
    service, backend, store
):
    assert not versions.inference_supported("4.36.0", "2.1.0")
    completed_lineage(store, "old-1", text="bert-squad transformers=4.36.0 pytorch=2.1.0 py=py310")
    plan = service.plan("old-1", options={}, actor=LAUNCHER)
    assert plan.request.framework == Framework("4.37.0", "2.1.0", "py310")
    assert "no Hugging Face inference image" in plan.summary() and "transformers 4.37.0" in plan.summary()
    endpoint = service.start(plan, actor=LAUNCHER)
    assert endpoint.framework_note == plan.framework_note
    assert backend.of("deploy")[0][2].framework == Framework("4.37.0", "2.1.0", "py310")


@pytest.mark.parametrize(
    ("training", "deployed"),
    [
        (("4.28.1", "2.0.0", "py310"), ("4.28.1", "2.0.0", "py310")),
        (("4.46.1", "2.3.0", "py311"), ("4.48.0", "2.3.0", "py311")),
        (("4.49.0", "2.5.1", "py311"), ("4.49.0", "2.6.0", "py312")),
        (("4.56.2", "2.8.0", "py312"), ("4.51.3", "2.6.0", "py312")),
    ],
)
def test_framework_choice(training, deployed):
    choice = choose_framework(*training)
    assert (choice.framework.transformers, choice.framework.pytorch, choice.framework.py) == deployed
    assert (choice.note is None) == (training == deployed)
    assert versions.inference_supported(deployed[0], deployed[1])


def test_options_serverless_instances_and_refusals():
    assert parse_options({"serverless": "yes", "memory_mb": "3072"}).memory_mb == 3072
    assert parse_options({"memory_mb": "4096"}).serverless  # implied
    opts = parse_options({"instance_type": "g4dn.2xlarge", "instances": "2", "name": "my-ep"})
    assert (opts.instance_type, opts.instance_count, opts.name, opts.serverless) == (
        "ml.g4dn.2xlarge",
        2,
        "my-ep",
        False,
    )
    for bad, message in [
        ({"gpu": "yes"}, "no option 'gpu'"),
        ({"serverless": "maybe"}, "not a yes/no"),
        ({"memory_mb": "1500"}, "not offered"),
        ({"serverless": "no", "memory_mb": "2048"}, "serverless endpoints only"),
        ({"serverless": "yes", "instance_type": "ml.m5.large"}, "no instances"),
        ({"instance_count": "0"}, "out of range"),
        ({"name": "bad_name!"}, "cannot be an endpoint name"),
    ]:
        with pytest.raises(BadInput, match=message):
            parse_options(bad)


def test_serverless_deploy_sends_memory_and_concurrency(service, backend, store):
    completed_lineage(store, "bert-1")
    service.deploy(
        "bert-1", options={"serverless": "yes", "memory_mb": "6144", "max_concurrency": "2"}, actor=LAUNCHER
    )
    request = backend.of("deploy")[0][2]
    assert (request.serverless, request.memory_mb, request.max_concurrency) == (True, 6144, 2)


def test_a_live_name_is_not_deployed_twice_but_can_be_after_undeploy(service, backend, store):
    completed_lineage(store, "bert-1")
    name = service.deploy("bert-1", options={}, actor=LAUNCHER).name
    with pytest.raises(InvalidState, match="already exists"):
        service.deploy("bert-1", options={}, actor=LAUNCHER)
    second = service.deploy("bert-1", options={"name": "bert-1-b"}, actor=LAUNCHER)
    assert second.name == "bert-1-b"
    service.undeploy(name, actor=LAUNCHER)
    assert service.deploy("bert-1", options={}, actor=LAUNCHER).status is EndpointStatus.CREATING
    assert len(backend.of("deploy")) == 3


def test_a_refused_deploy_is_recorded_failed_told_in_the_thread_and_raised(service, backend, store):
    completed_lineage(store, "bert-1")
    backend.deploy_error = BackendError("AWS denied CreateModel: give the role sagemaker:CreateModel.")
    with pytest.raises(BackendError, match="denied"):
        service.deploy("bert-1", options={}, actor=LAUNCHER)
    assert service.get("bert-1-ep").status is EndpointStatus.FAILED
    [note] = outbox(store, "endpoint_failed")
    assert note.lineage_id == "bert-1" and "denied CreateModel" in note.payload["text"]
    backend.deploy_error = None
    assert service.deploy("bert-1", options={}, actor=LAUNCHER).status is EndpointStatus.CREATING


# ---------------------------------------------------------------- following


def test_poll_follows_creating_to_in_service_and_posts_links_and_snippets_once(service, backend, store):
    completed_lineage(store, "bert-1")
    name = service.deploy("bert-1", options={"instances": "2"}, actor=LAUNCHER).name
    assert service.poll_once().ready == [] and outbox(store, "endpoint_ready") == []
    backend.set_status(name, "InService")
    assert service.poll_once().ready == [name]
    assert service.poll_once().followed == 0
    endpoint = service.get(name)
    assert endpoint.status is EndpointStatus.IN_SERVICE and endpoint.ready_at is not None
    [note] = outbox(store, "endpoint_ready")
    payload, text = note.payload, note.payload["text"]
    assert note.lineage_id == "bert-1" and note.channel == "C_ML"
    assert payload["console_url"] == backend.access(name).console_url and payload["console_url"] in text
    assert (
        payload["invocation_url"].endswith(f"/endpoints/{name}/invocations")
        and payload["invocation_url"] in text
    )
    assert payload["cli"].startswith(
        f"aws sagemaker-runtime invoke-endpoint --region us-east-1 --endpoint-name {name} "
    )
    assert '--body \'{"inputs": {"question":' in payload["cli"] and payload["cli"] in text
    assert 'boto3.client("sagemaker-runtime", region_name="us-east-1")' in payload["python"]
    assert f'invoke_endpoint(EndpointName="{name}"' in payload["python"] and payload["python"] in text
    assert f"{2 * hourly_usd('ml.g4dn.xlarge'):.2f}/h" in text and f"/undeploy {name}" in text


def test_snippets_paste_as_working_python(service, backend, store):
    """The boto3 snippet is valid Python that sends the example payload."""
    name = live(service, backend, store)
    snippet = outbox(store, "endpoint_ready")[0].payload["python"]
    compile(snippet, "<snippet>", "exec")
    assert "'question': 'What is the city?'" in snippet and name in snippet


def test_poll_marks_a_failed_endpoint_tells_the_thread_and_cleans_it_up(service, backend, store):
    completed_lineage(store, "bert-1")
    name = service.deploy("bert-1", options={}, actor=LAUNCHER).name
    backend.set_status(name, "Failed", "The primary container failed the ping health check.")
    assert service.poll_once().failed == [name]
    endpoint = service.get(name)
    assert endpoint.status is EndpointStatus.FAILED and "ping health check" in endpoint.failure_reason
    [note] = outbox(store, "endpoint_failed")
    assert note.lineage_id == "bert-1" and "ping health check" in note.payload["text"]
    assert [c[1] for c in backend.of("delete")] == [name]
    assert service.poll_once().failed == [] and len(outbox(store, "endpoint_failed")) == 1


# ---------------------------------------------------------------- predict and undeploy


def test_predict_sends_the_inference_toolkit_json_and_answers_with_answer_and_score(service, backend, store):
    name = live(service, backend, store)
    backend.answers.append({"score": 0.93, "start": 12, "end": 16, "answer": "kalo"})
    answer = service.predict(name, QA, actor=BOB)
    assert backend.of("invoke")[-1][2] == {"inputs": QA}
    assert (answer["answer"], answer["score"]) == ("kalo", 0.93)
    endpoint = service.get(name)
    assert endpoint.invocations == 1 and endpoint.last_invoked_at is not None


def test_classification_answers_are_normalised():
    assert normalize_answer([{"label": "LABEL_1", "score": 0.8}]) == {
        "label": "LABEL_1",
        "score": 0.8,
        "answer": "LABEL_1",
    }
    assert normalize_answer([[{"label": "positive", "score": 1}]])["answer"] == "positive"
    assert normalize_answer("odd") == {"answer": "odd", "score": None}


def test_predict_refusals(service, backend, store):
    completed_lineage(store, "bert-1")
    name = service.deploy("bert-1", options={}, actor=LAUNCHER).name
    with pytest.raises(InvalidState, match="is creating"):
        service.predict(name, QA, actor=LAUNCHER)
    backend.set_status(name, "InService")
    with pytest.raises(BadInput, match="needs both"):
        service.predict(name, {"question": "Who?"}, actor=LAUNCHER)
    with pytest.raises(BadInput, match='question="..." context="..."'):
        service.predict(name, {}, actor=LAUNCHER)
    with pytest.raises(NotFound, match="no endpoint 'nope'"):
        service.predict("nope", QA, actor=LAUNCHER)
    backend.answers.append({"answer": "x", "score": 0.5})
    assert service.predict(name, QA, actor=LAUNCHER)["answer"] == "x"  # the predict itself found it ready
    assert service.get(name).status is EndpointStatus.IN_SERVICE and len(outbox(store, "endpoint_ready")) == 1


def test_undeploy_deletes_endpoint_keeps_record_and_refuses_later_use(service, backend, store):
    name = live(service, backend, store)
    ended = service.undeploy(name, actor=LAUNCHER)
    assert ended.status is EndpointStatus.DELETED and [c[1] for c in backend.of("delete")] == [name]
    assert service.list() == [] and [e.name for e in service.list(include_ended=True)] == [name]
    with pytest.raises(NotFound, match="deleted"):
        service.predict(name, QA, actor=LAUNCHER)
    with pytest.raises(NotFound, match="deleted"):
        service.undeploy(name, actor=LAUNCHER)
    assert [e.action for e in store.audit_log(target="bert-1")][:1] == ["endpoint.undeploy"]


# ---------------------------------------------------------------- idle endpoints


def test_idle_endpoints_are_listed_with_cost_once_a_day(service, backend, store, clock):
    name = live(service, backend, store)
    clock.advance(23 * 3600)
    assert service.idle_report() == []
    clock.advance(2 * 3600)
    [idle] = service.idle_report()
    assert idle.endpoint.name == name and idle.idle_seconds == pytest.approx(25 * 3600)
    assert idle.running_usd == pytest.approx(hourly_usd("ml.g4dn.xlarge") * 25)
    service.idle_report()  # the same day: no second note
    [note] = outbox(store, "endpoints_idle")
    assert note.channel == "C_ML" and note.lineage_id is None
    assert name in note.payload["text"] and f"${idle.running_usd:,.2f} so far" in note.payload["text"]
    clock.advance(24 * 3600)
    service.idle_report()
    assert len(outbox(store, "endpoints_idle")) == 2


def test_an_endpoint_in_use_is_not_idle(service, backend, store, clock):
    name = live(service, backend, store)
    clock.advance(20 * 3600)
    backend.answers.append({"answer": "x", "score": 0.5})
    service.predict(name, QA, actor=LAUNCHER)
    clock.advance(20 * 3600)
    assert service.idle_report() == []


# ---------------------------------------------------------------- storage


def test_the_endpoints_table_is_part_of_the_migrated_schema(store: Store, database_url: str, clock: FakeClock):
    assert "endpoints" in inspect(store.engine).get_table_names()
    again = Store(database_url, clock=clock)
    assert again.migrate() == []
    again.dispose()


def test_a_second_service_on_the_same_database_sees_the_endpoint(service, backend, store, clock):
    name = live(service, backend, store)
    other = EndpointService(store=store, backend=backend, settings=Settings(), clock=clock)
    assert other.get(name).status is EndpointStatus.IN_SERVICE
    assert other.poll_once().followed == 0  # nothing left to follow, so nothing announced twice


def test_deploy_caps_are_checked_before_anything_is_created(store, backend, clock):
    settings = Settings(trainbot_max_instances=2, trainbot_max_endpoint_usd_per_hour=5.0)
    capped = EndpointService(store=store, backend=backend, settings=settings, clock=clock)
    completed_lineage(store, "bert-1")
    with pytest.raises(SpecError, match="TRAINBOT_MAX_INSTANCES"):
        capped.deploy("bert-1", options={"instance_count": "3"}, actor=LAUNCHER)
    with pytest.raises(BudgetExceeded, match=r"TRAINBOT_MAX_ENDPOINT_USD_PER_HOUR"):
        capped.deploy("bert-1", options={"instance_type": "ml.p3.16xlarge"}, actor=LAUNCHER)
    assert backend.of("deploy") == [] and capped.list(include_ended=True) == []
    assert capped.deploy("bert-1", options={"instance_type": "ml.g5.xlarge"}, actor=LAUNCHER).name


def test_endpoint_hours_count_toward_todays_spend(store, backend, clock, service):
    from jobs.budget import SpendLedger
    from jobs.endpoints.store import EndpointStore

    live(service, backend, store)
    ledger = SpendLedger(store, EndpointStore(store, clock=clock), daily_budget_usd=100.0)
    before = ledger.spent_today(clock.now())
    clock.advance(3600)
    hourly = service.list()[0].hourly_usd()
    assert hourly and ledger.spent_today(clock.now()) - before == pytest.approx(hourly)


# ---------------------------------------------------------------- a deploy and its poller


class PolledWhileDeploying(FakeEndpoints):
    """The SDK takes a moment to create the model, its config and the endpoint: the watcher's poller (another
    thread) runs in between, before the endpoint exists on the backend."""

    poller: EndpointService | None = None

    def deploy(self, request):  # type: ignore[no-untyped-def]
        if self.poller is not None:
            self.poller.poll_once()
        super().deploy(request)


def test_a_poll_during_the_deploy_call_leaves_the_endpoint_coming_up(store, clock):
    """Reproduces bug 4 of issue 21: `start()` recorded the endpoint CREATING before the SDK had created it;
    a poll in between got NotFound and marked it "failed to come up" (1 to 2 deploys in 10 on moto with a
    1 s poll)."""
    backend = PolledWhileDeploying()
    service = EndpointService(store=store, backend=backend, settings=Settings(), clock=clock)
    backend.poller = service
    completed_lineage(store, "bert-1")
    name = service.deploy("bert-1", options={}, actor=LAUNCHER).name
    assert [c[0] for c in backend.calls] == ["describe", "deploy"]  # the poll did look, and found nothing
    assert service.get(name).status is EndpointStatus.CREATING and outbox(store, "endpoint_failed") == []
    backend.set_status(name, "InService")
    assert service.poll_once().ready == [name]


def test_a_deploy_that_never_reached_the_backend_fails_after_the_grace(service, backend, store, clock):
    class Died(BaseException):
        """The process died between the record and the backend call."""

    completed_lineage(store, "bert-1")
    backend.deploy_error = Died()  # type: ignore[assignment]
    with pytest.raises(Died):
        service.deploy("bert-1", options={}, actor=LAUNCHER)
    assert service.poll_once().failed == []  # it may still be on its way
    clock.advance(11 * 60)
    [name] = service.poll_once().failed
    assert "never reached the backend" in service.get(name).failure_reason

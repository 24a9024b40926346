"""Local endpoints for real: a tiny BERT fine-tuned on the generated SQuAD data by the local backend,
deployed as a detached HTTP process on loopback, asked questions from its own test data, found again by
a restarted bot, and undeployed (the process ends, the folder goes)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jobs.backends.local.endpoints import LocalEndpoints
from jobs.backends.local.offline_assets import LocalAssets, ensure_local_assets
from jobs.backends.local.scaling import LocalLimits
from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.endpoints.port import DeployRequest, EndpointStatus
from jobs.endpoints.service import EndpointService
from jobs.errors import BadInput, NotFound
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
from jobs.lineage import LineageStatus
from jobs.records import Actor, RemoteStatus
from jobs.settings import Settings
from jobs.store.store import Store
from tests.support.assets import seed_assets
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)

ALICE = Actor("U_ALICE", channel_id="C_ML", via="console")
#: Enough for the tiny BERT to answer single-fact questions (~97% exact on the generated test data).
LIMITS = LocalLimits(
    max_steps=120,
    train_batch_size=32,
    max_seq_length=96,
    save_steps=1000,
    train_samples=2000,
    eval_samples=100,
    max_processes=1,
)
CUES = ("the city is", "the captain is called", "their ship was named")
CANARY = "canary-secret-3b9e"
BOT_SECRETS = {"SLACK_BOT_TOKEN": f"xoxb-{CANARY}", "AWS_SECRET_ACCESS_KEY": CANARY, "TRAINBOT_ADMINS": CANARY}


@dataclass
class Deployed:
    home: Path
    store: Store
    service: EndpointService
    name: str
    lineage_id: str
    test_rows: list[dict[str, Any]]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory, local_assets: LocalAssets) -> Iterator[Deployed]:
    home = seed_assets(tmp_path_factory.mktemp("local-endpoints"), local_assets)
    clock = SystemClock()
    store = Store(f"sqlite:///{home / 'trainbot.db'}", clock=clock)
    store.migrate()
    settings = Settings(trainbot_home=home, trainbot_backend="local")
    training = LocalBackend(home, clock=clock, offline=True, limits=LIMITS)
    jobs = JobService(store=store, backend=training, settings=settings, clock=clock)
    lineage = jobs.launch("bert-squad distribution=none instances=1 instance_type=ml.p3.2xlarge", actor=ALICE)
    job = f"{lineage.id}-1"
    wait_for(lambda: training.describe(job).status.is_terminal(), "the local training job")
    assert training.describe(job).status is RemoteStatus.COMPLETED, training.log_tail(job, 20)
    Watcher(store, training, clock, settings).poll_once()
    service = EndpointService(
        store=store, backend=LocalEndpoints(home, clock), settings=settings, clock=clock
    )
    with pytest.MonkeyPatch.context() as patch:  # the bot's environment holds secrets when it deploys
        for variable, value in BOT_SECRETS.items():
            patch.setenv(variable, value)
        name = service.deploy(lineage.id, options={}, actor=ALICE).name
    wait_for(lambda: service.get(name).status is not EndpointStatus.CREATING or bool(service.poll_once().ready),
             "the endpoint")
    assets = ensure_local_assets(home)
    rows = [json.loads(line) for line in next(assets.squad_test.glob("*.jsonl")).read_text().splitlines()]
    yield Deployed(home, store, service, name, lineage.id, rows)
    with contextlib.suppress(NotFound):
        service.undeploy(name, actor=ALICE)


# Before the tests that restart or undeploy the module's endpoint: its process must still be running.
def test_the_running_server_does_not_see_the_bots_secrets(deployed: Deployed) -> None:
    folder = deployed.home / "local-endpoints" / deployed.name
    pid = json.loads((folder / "endpoint.json").read_text())["pid"]
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    seen = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
    assert CANARY not in raw
    assert not [k for k in seen if k.startswith(("SLACK_", "AWS_", "TRAINBOT_"))]
    assert seen["HF_HUB_OFFLINE"] == "1" and "PATH" in seen


def test_the_trained_model_is_served_and_answers_questions_from_its_data(deployed: Deployed) -> None:
    assert deployed.store.get_lineage(deployed.lineage_id).status is LineageStatus.COMPLETED
    endpoint = deployed.service.get(deployed.name)
    assert endpoint.status is EndpointStatus.IN_SERVICE and endpoint.backend == "local"
    single_fact = [r for r in deployed.test_rows if sum(cue in r["context"] for cue in CUES) == 1][:5]
    answers = [
        deployed.service.predict(
            deployed.name, {"question": r["question"], "context": r["context"]}, actor=ALICE
        )
        for r in single_fact
    ]
    right = [a["answer"] == r["answers"]["text"][0] for a, r in zip(answers, single_fact, strict=True)]
    assert sum(right) >= 4, list(zip(answers, single_fact, strict=True))
    assert all(0.0 < a["score"] <= 1.0 for a in answers)
    assert deployed.service.get(deployed.name).invocations == 5


def test_the_ready_message_gives_a_loopback_url_that_answers_the_curl_body(deployed: Deployed) -> None:
    [note] = [n for n in deployed.store.outbox.due_notifications(limit=100) if n.kind == "endpoint_ready"]
    url = note.payload["invocation_url"]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/invocations") and url in note.payload["cli"]
    import urllib.request

    body = json.dumps(
        {"inputs": {"question": "what is the city ?", "context": "the city is kalo ."}}
    ).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    answer = json.loads(urllib.request.urlopen(request, timeout=30).read())
    assert set(answer) == {"answer", "score", "start", "end"} and answer["answer"] == "kalo"


def test_bad_inputs_are_refused_with_a_sentence(deployed: Deployed) -> None:
    with pytest.raises(BadInput, match='question="..." context="..."'):
        deployed.service.predict(deployed.name, {"prompt": "hi"}, actor=ALICE)


def test_a_restarted_bot_finds_the_running_endpoint(deployed: Deployed) -> None:
    fresh = LocalEndpoints(deployed.home, SystemClock())  # no memory of the process it did not start
    assert fresh.describe(deployed.name).status == "InService"
    answer = fresh.invoke(
        deployed.name,
        {"inputs": {"question": "who is the captain ?", "context": "the captain is called zeru ."}},
    )
    assert answer["answer"] == "zeru"


def test_undeploy_ends_the_process_and_removes_its_folder(deployed: Deployed) -> None:
    folder = deployed.home / "local-endpoints" / deployed.name
    pid = json.loads((folder / "endpoint.json").read_text())["pid"]
    deployed.service.undeploy(deployed.name, actor=ALICE)
    assert not folder.exists()
    wait_for(lambda: not _running(pid), "the server process to end")
    with pytest.raises(NotFound):
        deployed.service.predict(deployed.name, {"text": "x"}, actor=ALICE)


def test_a_server_that_dies_at_start_is_reported_failed_with_its_log(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    backend = LocalEndpoints(tmp_path, SystemClock(), python="/bin/false")
    backend.deploy(
        DeployRequest(
            name="dies",
            model_name="dies-1",
            model_data=str(model),
            task="question-answering",
            framework=None,
            instance_type="local",
            instance_count=1,
        )
    )
    wait_for(lambda: backend.describe("dies").status != "Creating", "the failure")
    remote = backend.describe("dies")
    assert remote.failed and "exited" in remote.failure_reason and "server.log" in remote.failure_reason
    backend.delete("dies")
    with pytest.raises(NotFound):
        backend.describe("dies")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().rsplit(")", 1)[-1].split()[0] == "Z")

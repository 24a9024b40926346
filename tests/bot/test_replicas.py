"""Two `trainbot serve` processes (real processes) on one real PostgreSQL server, with SageMaker on a moto
server and Slack on the loopback API: every change is acted on once (one relaunch, one message), each
schedule's run fires once, and when the scheduler's leader is killed with SIGKILL the other process carries on
(its schedules, its watching) within one lease period.

The processes start together on an empty database, so they also race to migrate it (once, under the lock).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from bot.scheduler import ApsCronCalendar
from jobs import lineage as moves
from jobs.clock import SystemClock
from jobs.lifecycle.service import JobService
from jobs.lineage import AttemptStatus, LineageStatus
from jobs.planning.grammar import parse_command
from jobs.planning.plan import build_plan
from jobs.records import Actor
from jobs.schedules.service import ScheduleService
from jobs.settings import Settings
from jobs.store.migrate import head_revision
from jobs.store.rate_ledger import StoreRateLedger
from jobs.store.schema import read_transaction, schedule_runs
from jobs.store.store import Store
from tests.support.clock import FakeClock
from tests.support.moto_server import (  # noqa: F401  (fixtures)
    MotoAws,
    free_port,
    moto_aws,
    moto_server,
    sagemaker_backend,
    set_training_job_state,
)
from tests.support.slack_api import BOT_TOKEN, SlackApiServer

ROOT = Path(__file__).resolve().parents[2]
SECRET = "replica-signing-secret"
ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")
LEASE_SECONDS = 6.0  # TRAINBOT_SCHEDULER_LEASE_SECONDS for the two bots (60 by default)
LINEAGES = 3
_IDS = itertools.count(1)

pytestmark = pytest.mark.timeout(420)


@dataclass
class Replica:
    name: str
    home: Path
    port: int
    process: subprocess.Popen[bytes]

    def log(self) -> str:
        path = self.home / "trainbot.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False


@dataclass
class Cluster:
    aws: MotoAws
    slack: SlackApiServer
    store: Store
    jobs: JobService
    url: str
    replicas: list[Replica] = field(default_factory=list)

    def logs(self) -> str:
        return "\n".join(r.log() for r in self.replicas)

    def launch_running(self) -> str:
        """A lineage whose first job runs on SageMaker, with its card in #C_ML, as a Slack launch leaves it.
        The job is made InProgress before the store names it: moto creates jobs Completed, and the bots
        would see that first."""
        lineage_id = f"rep{next(_IDS):03d}-{datetime.now():%H%M%S%f}"
        plan = build_plan(parse_command("distilbert-spot"), bucket=self.aws.bucket, lineage_id=lineage_id)
        job = f"{lineage_id}-1"
        self.aws.client("sagemaker").create_training_job(**_create_request(job, self.aws, plan))
        set_training_job_state(job, "InProgress", "Training")
        self.store.create_lineage(lineage_id=lineage_id, spec=plan.spec, backend="sagemaker",
                                  checkpoint_uri=plan.checkpoint_uri, actor=ALICE, estimated_usd=1.0,
                                  launch_plan=plan.stored())
        self.store.set_message(lineage_id, "C_ML", f"1699999999.{next(_IDS):06d}")
        self.store.add_attempt(lineage_id, number=1, instance_type=plan.spec.instance_type, spot=plan.spec.spot)
        self.store.transition_attempt(job, moves.ATTEMPT_CONFIRMED)
        self.store.transition_lineage(lineage_id, moves.CONFIRM_LAUNCH)
        return lineage_id

    def posts(self) -> list[str]:
        return [str(call.params.get("text", "")) for call in self.slack.calls_to("chat.postMessage")]

    def add_due_schedule(self, name: str) -> None:
        """A nightly schedule whose run fell due two minutes ago (added ten minutes ago): the leader fires it
        at its next cycle, once; its next run is tomorrow."""
        now = datetime.now(timezone.utc)
        due = now - timedelta(minutes=2)
        schedules = ScheduleService(store=self.store, jobs=self.jobs, calendar=ApsCronCalendar(),
                                    settings=Settings(trainbot_bucket=self.aws.bucket),
                                    clock=FakeClock(now - timedelta(minutes=10)))
        schedules.add(name, f"{due.minute} {due.hour} * * *", "UTC", "distilbert-spot", actor=ALICE, channel="C_ML")

    def runs(self, name: str) -> list[Any]:
        with read_transaction(self.store.engine) as conn:
            return list(conn.execute(schedule_runs.select().where(schedule_runs.c.schedule == name)))


def _create_request(job: str, aws: MotoAws, plan: Any) -> dict[str, Any]:
    return {
        "TrainingJobName": job,
        "AlgorithmSpecification": {"TrainingImage": "huggingface:latest", "TrainingInputMode": "File"},
        "RoleArn": aws.role_arn,
        "OutputDataConfig": {"S3OutputPath": f"s3://{aws.bucket}/{job}/output"},
        "ResourceConfig": {"InstanceType": plan.spec.instance_type, "InstanceCount": 1, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 1000, "MaxWaitTimeInSeconds": 3600},
        "EnableManagedSpotTraining": True,
        "CheckpointConfig": {"S3Uri": plan.checkpoint_uri},
    }


def _start(cluster: Cluster, name: str, tmp_path: Path) -> Replica:
    home = tmp_path / name
    home.mkdir()
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": cluster.slack.base_url,
        "TRAINBOT_HOME": str(home),
        "TRAINBOT_DATABASE_URL": cluster.url,
        "TRAINBOT_ROLE_ARN": cluster.aws.role_arn,
        "TRAINBOT_BUCKET": cluster.aws.bucket,
        "TRAINBOT_POLL_SECONDS": "1",
        "TRAINBOT_RELAUNCH_BACKOFF_SECONDS": "0",
        "TRAINBOT_SCHEDULER_LEASE_SECONDS": str(LEASE_SECONDS),
    }
    process = subprocess.Popen([sys.executable, "-m", "bot", "serve", "--http", "--port", str(port)], env=env,
                               cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return Replica(name, home, port, process)


@pytest.fixture
def cluster(moto_aws: MotoAws, postgres_url: str, tmp_path: Path) -> Iterator[Cluster]:  # noqa: F811
    slack = SlackApiServer().start()
    store = Store(postgres_url, clock=SystemClock())
    backend = sagemaker_backend(moto_aws)
    jobs = JobService(store=store, backend=backend, clock=SystemClock(),
                      settings=Settings(trainbot_bucket=moto_aws.bucket, trainbot_role_arn=moto_aws.role_arn,
                                        trainbot_home=tmp_path),
                      new_lineage_id=lambda spec: f"rep{next(_IDS):03d}-{datetime.now():%H%M%S%f}")
    made = Cluster(moto_aws, slack, store, jobs, postgres_url)
    try:
        # Both start at once on an empty database: they race to migrate it.
        made.replicas = [_start(made, name, tmp_path) for name in ("a", "b")]
        _wait(lambda: all(r.healthy() for r in made.replicas), 90, "both bots to answer /healthz",
              made.replicas)
        yield made
    finally:
        for replica in made.replicas:
            if replica.process.poll() is None:
                replica.process.send_signal(signal.SIGTERM)
        for replica in made.replicas:
            try:
                replica.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                replica.process.kill()
        store.dispose()
        slack.stop()


def test_two_bots_on_one_postgres_act_once_and_carry_on_when_one_is_killed(cluster: Cluster) -> None:
    # Both migrated-at-start processes found the store at head; the lock let one of them do it.
    assert cluster.store.schema_revision() == head_revision()
    assert cluster.logs().count("store schema upgraded") == 1

    # Every change acted on once: a spot job loses its capacity in each of three lineages.
    lineages = [cluster.launch_running() for _ in range(LINEAGES)]
    _wait(lambda: all(cluster.store.get_attempt(f"{lid}-1").status is AttemptStatus.RUNNING for lid in lineages),
          60, "the bots to see the jobs running", cluster.replicas)
    for lid in lineages:
        set_training_job_state(f"{lid}-1", "Stopped", "MaxWaitTimeExceeded", billable_seconds=60,
                               training_seconds=300)
    _wait(lambda: all(_relaunch_announced(cluster, lid) for lid in lineages), 90,
          "one relaunch of each lineage, announced", cluster.replicas)
    _more_cycles(cluster, 4)  # a few more watch cycles of the bots: nothing may happen twice
    launched = Counter(_launched_jobs(cluster.logs()))
    for lid in lineages:
        assert launched[f"{lid}-2"] == 1, launched
        assert [a.number for a in cluster.store.get_lineage(lid).attempts] == [1, 2]
    assert "already exists; counted as launched" not in cluster.logs()

    # The schedules run on the leader only, each run once.
    cluster.add_due_schedule("nightly-a")
    _wait(lambda: [r.outcome for r in cluster.runs("nightly-a")] == ["launched"], 60,
          "the leader to fire nightly-a", cluster.replicas)
    leader = _leader(cluster)
    assert leader is not None
    fired_by = [r.name for r in cluster.replicas if "schedule nightly-a (" in r.log()]
    assert fired_by == [leader.name]
    # Kill the leader once its run's message is out: one claimed and not yet posted would wait out the
    # outbox claim (handlers.notify.CLAIM_SECONDS, 5 minutes) before the survivor took it over.
    _wait(lambda: any("nightly-a" in text for text in cluster.posts()), 60, "nightly-a's message to be delivered",
          cluster.replicas)

    # SIGKILL the leader: no shutdown, no lease release. The other takes over within a lease period.
    survivor = next(r for r in cluster.replicas if r is not leader)
    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait(timeout=30)
    killed_at = time.monotonic()
    cluster.add_due_schedule("nightly-b")
    _wait(lambda: [r.outcome for r in cluster.runs("nightly-b")] == ["launched"], LEASE_SECONDS * 4 + 30,
          "the survivor to take over the lease and fire nightly-b", [survivor])
    took_over = time.monotonic() - killed_at
    assert _leader(cluster) is survivor
    # Taking over waits for the lease to run out, plus at most one renewal interval and a launch.
    assert took_over < LEASE_SECONDS + LEASE_SECONDS / 4 + 20, took_over

    # And it watches alone: one more lost job is relaunched once.
    last = lineages[0]
    set_training_job_state(f"{last}-2", "InProgress", "Training")  # moto made it Completed
    late = cluster.launch_running()
    _wait(lambda: cluster.store.get_attempt(f"{late}-1").status is AttemptStatus.RUNNING, 60,
          "the survivor to see the new job running", [survivor])
    set_training_job_state(f"{late}-1", "Stopped", "MaxWaitTimeExceeded")
    _wait(lambda: _relaunch_announced(cluster, late), 60, "the survivor to relaunch it", [survivor])

    # One message per change, whichever bot delivered it. A run's message is delivered after its run is
    # recorded (the outbox's own loop): wait for nightly-b's too, then read everything posted.
    def both_said() -> bool:
        said = cluster.posts()
        return any("nightly-a" in text for text in said) and any("nightly-b" in text for text in said)

    _wait(both_said, 60, "both schedules' messages to be delivered", [survivor])
    posts = cluster.posts()
    assert [text for text, n in Counter(posts).items() if n > 1] == []
    assert sum("nightly-a" in text for text in posts) >= 1 and sum("nightly-b" in text for text in posts) >= 1
    for lid in [*lineages, late]:
        assert sum(text.startswith(f"Relaunched as {lid}-2 ") for text in posts) == 1, posts
    assert cluster.store.get_lineage(late).status is not LineageStatus.GAVE_UP
    # Their Slack calls drew on one budget: the rate-limit buckets both governors keep in the store.
    shared = StoreRateLedger(cluster.store.engine).buckets()
    assert "chat.postMessage" in shared and any(key.startswith("channel:") for key in shared)


def _more_cycles(cluster: Cluster, count: int) -> None:
    """Until the bots have finished ``count`` more full watch cycles (each stamps the store as it ends)."""
    from jobs.lifecycle.watcher import watched_key

    stamps = {cluster.store.get_meta(watched_key("sagemaker"))}

    def enough() -> bool:
        stamps.add(cluster.store.get_meta(watched_key("sagemaker")))
        return len(stamps) > count

    _wait(enough, 60, f"{count} more watch cycles", cluster.replicas)


def _relaunch_announced(cluster: Cluster, lineage_id: str) -> bool:
    relaunched = len(cluster.store.get_lineage(lineage_id).attempts) == 2
    return relaunched and any(text.startswith(f"Relaunched as {lineage_id}-2 ") for text in cluster.posts())


def _launched_jobs(logs: str) -> list[str]:
    marker = "launched SageMaker training job "
    return [line.split(marker, 1)[1].strip() for line in logs.splitlines() if marker in line]


def _leader(cluster: Cluster) -> Replica | None:
    """The replica holding an unexpired scheduler lease (its holder names the process id)."""
    from bot.scheduler import LeaderLease

    holder = LeaderLease(cluster.store.engine, SystemClock(), holder="test-reader").current_holder()
    if holder is None:
        return None
    pid = int(holder.split(":")[1])
    return next((r for r in cluster.replicas if r.process.pid == pid), None)


def _wait(condition: Callable[[], bool], timeout: float, what: str, replicas: list[Replica]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for replica in replicas:
            if replica.process.poll() is not None:
                _, stderr = replica.process.communicate()
                pytest.fail(f"bot {replica.name} exited while waiting for {what}: {stderr.decode()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)

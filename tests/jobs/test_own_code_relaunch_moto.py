"""A lineage of own code keeps its commit: after the branch moves, a relaunch (spot capacity lost) uploads
the tree of the commit planned at launch. The real SageMakerBackend against moto, real git on a repository
the test makes; the watcher decides the relaunch as in production."""

from __future__ import annotations

import io
import json
import tarfile
from datetime import datetime, timezone
from pathlib import Path

from jobs.backends.code_sources import GitCodeSources
from jobs.lifecycle.service import JobService
from jobs.lifecycle.watcher import Watcher
from jobs.planning.reader import CommandReader
from jobs.records import Actor
from jobs.reporting.reports import build_report
from jobs.settings import Settings
from jobs.store.store import Store
from tests.support.clock import FakeClock
from tests.support.git_repos import make_repo
from tests.support.moto_server import (  # noqa: F401  (fixtures)
    CallRecorder,
    MotoAws,
    moto_aws,
    moto_server,
    sagemaker_backend,
    set_training_job_state,
)

ALICE = Actor("U_ALICE", channel_id="C_ML", via="slack")


def _script_in(aws: MotoAws, request: dict) -> str:
    submit = json.loads(request["HyperParameters"]["sagemaker_submit_directory"])
    bucket, _, key = submit.removeprefix("s3://").partition("/")
    body = aws.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as archive:
        member = archive.extractfile("train.py")
        assert member is not None
        return member.read().decode()


def test_a_branch_moved_after_launch_still_relaunches_the_pinned_commit(moto_aws: MotoAws, tmp_path: Path) -> None:  # noqa: F811
    repo = make_repo(tmp_path / "git", "team")
    pinned = repo.commit({"jobs/train.py": "print('planned')\n"})
    clock = FakeClock(datetime.now(timezone.utc))
    store = Store(f"sqlite:///{tmp_path / 'trainbot.db'}", clock=clock)
    store.migrate()
    created = CallRecorder("CreateTrainingJob")
    home = tmp_path / "home"
    backend = sagemaker_backend(moto_aws, moto_aws.boto_session(recorders=[created]), code_home=home)
    settings = Settings(trainbot_bucket=moto_aws.bucket, trainbot_role_arn=moto_aws.role_arn, trainbot_home=home,
                        trainbot_relaunch_backoff_seconds=0, trainbot_code_sources=(repo.url,))
    reader = CommandReader.of(max_instances=16, code_sources=(repo.url,), resolver=GitCodeSources(home))
    service = JobService(store=store, backend=backend, settings=settings, clock=clock, reader=reader,
                         new_lineage_id=lambda spec: f"own-{datetime.now():%H%M%S%f}")
    watcher = Watcher(store, backend, clock, settings)

    lineage = service.launch(f"distilbert-spot code=git+{repo.url}@main entry=jobs/train.py", actor=ALICE)
    assert lineage.spec.code_commit == pinned
    first = created.by_name(f"{lineage.id}-1")
    assert _script_in(moto_aws, first) == "print('planned')\n"

    repo.commit({"jobs/train.py": "print('moved on')\n"}, "main moves after the launch")
    set_training_job_state(f"{lineage.id}-1", "Stopped", "MaxWaitTimeExceeded", billable_seconds=60, training_seconds=200)
    clock.advance(1)
    watcher.poll_once()

    second = created.by_name(f"{lineage.id}-2")
    assert _script_in(moto_aws, second) == "print('planned')\n"
    # spot= alone runs the team's own entry, as its HuggingFace(...) call would (the bot's spot entry only with
    # checkpoint_minutes=): no bot variable in the job's environment.
    assert json.loads(second["HyperParameters"]["sagemaker_program"]) == "train.py"
    assert "TRAINBOT_USER_ENTRY" not in second.get("Environment", {})
    relaunched = store.get_lineage(lineage.id)
    assert relaunched.spec.code_commit == pinned and len(relaunched.attempts) == 2
    report = build_report(relaunched, backend).to_text()
    assert f"@{pinned[:7]} (main)" in report

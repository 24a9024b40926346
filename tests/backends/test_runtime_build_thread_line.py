"""The job's first step on the local backend, seen from the job's thread (issue 32): own code on an image whose
runtime is not built yet starts with the build, for real, and the watcher's state line says ``Downloading`` with
the build's step (the card then shows how far it is), as SageMaker's own Downloading line says the image is being
fetched. The job is stopped during the build: the test waits for the line, never for the build."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from bot.wiring import build_watcher
from jobs.backends.local.training_jobs import LocalBackend
from jobs.lifecycle import events
from jobs.planning.grammar import parse_command
from jobs.records import RemoteJob
from jobs.settings import Settings
from jobs.store.store import Store
from tests.jobs.test_watcher import ALICE, make_service
from tests.support.clock import FakeClock
from tests.support.git_repos import make_repo
from tests.support.waiting import wait_for

BUILDING = "building the transformers 4.28.1 runtime, as the training image (once, a few minutes): step "


@pytest.mark.timeout(600)
def test_a_runtime_being_built_is_the_jobs_downloading_line_with_its_step(tmp_path: Path) -> None:
    clock = FakeClock(datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc))
    home = tmp_path / "home"  # no runtimes linked: the job's first step builds the 4.28.1 runtime here
    store = Store(f"sqlite:///{tmp_path / 'trainbot.db'}", clock=clock)
    store.migrate()
    repo = make_repo(tmp_path / "git", "team")
    commit = repo.commit({"train.py": "print('trained')\n"})
    settings = Settings(trainbot_bucket="", trainbot_home=home, trainbot_backend="local",
                        trainbot_code_sources=repo.url)
    backend = LocalBackend(home, clock=clock, own_code_unsandboxed=True)
    service = make_service(store, backend, clock, settings)
    watcher = build_watcher(store, backend, clock, settings)
    spec = parse_command(f"code=git+{repo.url}@main entry=train.py transformers_version=4.28.1").model_copy(
        update={"code_commit": commit})
    lineage = service.launch(spec, actor=ALICE)
    job = f"{lineage.id}-1"
    seen: list[RemoteJob] = []

    def building() -> bool:
        seen[:] = [backend.describe(job)]
        return seen[0].secondary_status == "Downloading" and BUILDING in seen[0].transitions[-1].message

    try:
        wait_for(building, f"{job} to show its runtime build")
        clock.advance(1)
        watcher.poll_once()
        lines = [n.payload for n in store.outbox.due_notifications(limit=100) if n.kind == events.STATE]
        downloading = [p for p in lines if p["secondary_status"] == "Downloading"]
        assert downloading, lines
        text = downloading[-1]["text"]
        assert text.startswith(f"{job}: InProgress (Downloading). {BUILDING}")
        assert " of 3, " in text  # which of the build's three steps it is on
        assert store.get_attempt(job).secondary_status == "Downloading"
    finally:
        backend.stop(job)
        wait_for(lambda: backend.describe(job).status.is_terminal(), f"{job} to stop")

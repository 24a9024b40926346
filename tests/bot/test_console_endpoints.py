"""Issue 35, item 9: local endpoints and the console, and what a failed deploy leaves.

- `trainbot console --script`: a job completes (a scripted training peer that reports the session's tiny BERT as
  its model) and is deployed as a real local endpoint server; when the console ends, the server it started is
  stopped and the console says so (each holds a model in memory: about 420 MB for the real one);
- `trainbot deploy` of a model that cannot be served fails in one sentence, and `trainbot undeploy` removes the
  failed endpoint (before, it said the endpoint was failed and nothing could remove it).
"""

from __future__ import annotations

import io
import os
import signal
import threading
from datetime import timedelta
from pathlib import Path

import pytest

from bot.cli import main
from bot.console import run_console
from bot.wiring import build_runtime
from jobs.backends.local.offline_assets import LocalAssets
from jobs.clock import SystemClock
from jobs.records import RemoteStatus
from jobs.settings import Settings
from jobs.store.store import Store
from tests.jobs.fakes import ScriptedBackend
from tests.support.endpoints import completed_lineage


def processes_under(folder: Path) -> list[int]:
    """The pids whose command line names ``folder`` (the endpoint server's argv names its state folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in cmdline:
            found.append(int(entry.name))
    return found


def completing_with(backend: ScriptedBackend, model: Path) -> None:
    def later(job_name: str) -> None:
        def complete() -> None:
            now = backend.clock.now()
            backend.set_remote(job_name, RemoteStatus.COMPLETED, created_at=now, ended_at=now,
                               last_modified=now + timedelta(seconds=1), training_seconds=10, billable_seconds=10,
                               final_metrics={"eval_f1": 1.0}, model_artifacts=str(model))

        threading.Timer(0.2, complete).start()

    backend.on_launch = later


@pytest.mark.timeout(180)
def test_quitting_the_console_stops_the_endpoint_servers_it_started(tmp_path: Path,
                                                                    local_assets: LocalAssets) -> None:
    home = tmp_path / "home"
    backend = ScriptedBackend(clock=SystemClock(), name="local")
    completing_with(backend, local_assets.model_dir)
    script = tmp_path / "deploy.txt"
    script.write_text("/train bert-squad\nlaunch\n/wait $last\n/deploy $last name=qa\n")
    out = io.StringIO()
    servers = home.resolve() / "local-endpoints" / "qa"
    try:
        code = run_console(build_runtime(Settings(trainbot_home=home), clock=backend.clock, backend=backend),  # type: ignore[arg-type]
                           script, stdout=out)
        transcript = out.getvalue()
        assert code == 0, transcript
        assert "Deploying " in transcript
        assert "Stopped endpoint qa, which this console started (its server holds a model in memory); " \
               "`/deploy bert-squad-" in transcript
        assert processes_under(servers) == []
    finally:
        for pid in processes_under(servers):  # only what this test's console started
            os.kill(pid, signal.SIGKILL)


def test_a_failed_deploy_can_be_undeployed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("TRAINBOT_HOME", str(home))
    monkeypatch.setenv("TRAINBOT_BACKEND", "local")
    empty = tmp_path / "model-without-config"
    empty.mkdir()
    store = Store(Settings(trainbot_home=home).database_url, clock=SystemClock())
    store.migrate()
    completed_lineage(store, "qa-1a2b3c4d", backend="local", model_artifacts=str(empty))
    store.dispose()

    assert main(["deploy", "qa-1a2b3c4d", "name=broken"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"trainbot: The model folder {empty} of this job is gone or incomplete, so it cannot be "
                   "served: train the job again."]

    assert main(["undeploy", "broken"]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.strip() == "broken: endpoint and its config deleted; the model is kept"
    assert main(["endpoint", "broken", "--json"]) == 0
    assert '"status": "deleted"' in capsys.readouterr().out
    assert main(["undeploy", "broken"]) == 2  # gone now: nothing left to remove, said in one sentence

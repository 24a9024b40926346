"""Undeploying a local endpoint ends every process of its server, not only the first one.

A sandboxed server is several processes (bwrap's, then the server's); the first can end before the others, and
the console said "Stopped endpoint" while the rest still held the model in memory (a CI run caught two left).
Here a server's helper process ignores SIGTERM, as a slow-to-exit inner process would: the stop ends it too,
and returns only when the whole process group is gone.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from jobs.backends.local import endpoints as local_endpoints
from jobs.backends.local.endpoints import LocalEndpoints
from jobs.backends.local.sandbox import Sandbox
from jobs.clock import SystemClock
from jobs.endpoints.port import DeployRequest
from tests.support.waiting import wait_for


def live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that have not exited (a zombie holds no memory and is not counted)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def test_undeploy_returns_only_when_every_process_of_the_server_has_ended(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_endpoints, "STOP_WAIT_SECONDS", 1.0)  # the SIGTERM grace before SIGKILL
    ready = tmp_path / "helper-ignores-sigterm"
    server = tmp_path / "server"
    # The "interpreter" the endpoint starts: its helper ignores SIGTERM, then the first process waits on it.
    server.write_text(f"#!/bin/sh\n(trap '' TERM; : > {ready}; while :; do sleep 1; done) &\nwait\n")
    server.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    backend = LocalEndpoints(tmp_path / "home", SystemClock(), python=str(server), sandbox=Sandbox("off"))
    backend.deploy(DeployRequest(name="slow", model_name="slow-1", model_data=str(model),
                                 task="text-classification", framework=None, instance_type="local",
                                 instance_count=1))
    pid = json.loads((tmp_path / "home" / "local-endpoints" / "slow" / "endpoint.json").read_text())["pid"]
    try:
        wait_for(ready.exists, "the server's helper to ignore SIGTERM")
        assert len(live_members(pid)) >= 2

        backend.delete("slow")

        assert live_members(pid) == []
    finally:
        for member in live_members(pid):  # only this test's server
            os.kill(member, signal.SIGKILL)

"""What the watcher would post about a local job that failed on a poisoned data file: the file, the record
and what is wrong, never the record's content (no secret in the failure reason, the log tail or the event)."""

from __future__ import annotations

import json
from pathlib import Path

from jobs.backends.local.training_jobs import LocalBackend
from jobs.clock import SystemClock
from jobs.lifecycle import events
from jobs.planning.grammar import parse_command
from jobs.planning.plan import build_plan
from jobs.records import RemoteStatus
from tests.backends.test_local_backend import wait_terminal

SECRET = "AKIAZ7QW3EXAMPLE9SECRET"


def test_a_poisoned_record_is_summarised_in_what_the_watcher_posts(local_home: Path) -> None:
    trainbot_home = local_home
    data = trainbot_home / "data" / "reviews"
    data.mkdir(parents=True)
    good = json.dumps({"text": "a fine film", "label": 1})
    (data / "reviews.jsonl").write_text(f"{good}\n{good}\n" + json.dumps({"text": SECRET, "label": SECRET}) + "\n")
    backend = LocalBackend(trainbot_home, clock=SystemClock(), offline=True)
    spec = parse_command(f"distilbert-spot spot=no train_data={data}")
    backend.launch("poison-1", build_plan(spec, bucket="b", lineage_id="poison"))
    remote = wait_terminal(backend, "poison-1")
    assert remote.status is RemoteStatus.FAILED
    assert "file reviews.jsonl, record 3: label is text, not a whole number" in remote.failure_reason
    tail = backend.log_tail("poison-1", events.LOG_TAIL_LINES)
    posted = json.dumps(events.failed("poison", "poison-1", remote.failure_reason, tail))
    assert SECRET not in posted
    assert SECRET not in (trainbot_home / "local-jobs" / "poison-1" / "logs" / "train.log").read_text()

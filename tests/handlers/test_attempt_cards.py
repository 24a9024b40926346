"""What a relaunch changed, where people look: the card's attempt line and forecast, the /job attempt lines
and the report. Driven through the watcher on a real store and the scripted backend."""

from __future__ import annotations

import json
from pathlib import Path

from handlers.live import job_card
from jobs.lifecycle.watcher import Watcher
from jobs.records import RemoteStatus
from jobs.reporting.reports import build_report
from tests.handlers.fakes import ALICE, World, make_world, walk_limits


def relaunched_twice(tmp_path: Path) -> tuple[World, str]:
    """distilbert-spot on ml.p3.2xlarge (per-device batch 32), spot capacity lost under any-count: attempts on
    ml.g6e.xlarge, ml.g6.xlarge, ml.g5.xlarge and ml.g4dn.xlarge (1 GPU each), and then, capacity lost on every
    1-GPU type, ml.g6e.12xlarge (4 GPUs)."""
    world = make_world(tmp_path, trainbot_relaunch_backoff_seconds=0, trainbot_recovery_policy="any-count")
    watcher = Watcher(world.store, world.backend, world.clock, world.settings)
    lineage = world.jobs.launch("distilbert-spot", actor=ALICE)
    watcher.poll_once()
    for number in (1, 2, 3, 4, 5):  # p3.2xlarge, g6e, g6, g5 and g4dn .xlarge; then the 4-GPU types
        world.clock.advance(1)
        world.backend.set_remote(f"{lineage.id}-{number}", RemoteStatus.STOPPED, secondary_status="MaxWaitTimeExceeded",
                                 last_modified=world.clock.now(), billable_seconds=60, training_seconds=200)
        watcher.poll_once()
    return world, lineage.id


def test_the_card_says_what_the_relaunch_changed_and_forecasts_on_the_new_type(tmp_path: Path) -> None:
    world, lineage_id = relaunched_twice(tmp_path)
    lineage = world.jobs.get(lineage_id)
    assert [a.instance_type for a in lineage.attempts][-1] == "ml.g6e.12xlarge"
    _, blocks = job_card(world.services, lineage)
    walk_limits(blocks)
    flat = json.dumps(blocks, ensure_ascii=False)
    assert ("6 on ml.g6e.12xlarge (spot): 4 GPUs, per-device batch 8 instead of 32, global batch 32 as planned"
            in flat)
    assert "(on ml.g6e.12xlarge)" in flat  # the forecast of the rest is the new type's
    _, detail = job_card(world.services, lineage, detail=True)
    flat = json.dumps(detail, ensure_ascii=False)
    assert f"{lineage_id}-2: stopped (MaxWaitTimeExceeded) · on ml.g6e.xlarge (spot): 1 GPU as planned" in flat
    assert f"{lineage_id}-1: stopped (MaxWaitTimeExceeded) · on ml.p3.2xlarge (spot)" in flat


def test_the_report_lists_each_attempt_with_its_settings(tmp_path: Path) -> None:
    world, lineage_id = relaunched_twice(tmp_path)
    report = build_report(world.jobs.get(lineage_id), world.backend)
    lines = {a.number: a for a in report.attempts}
    assert (lines[1].settings, lines[1].per_device_train_batch_size) == ("", 32)
    assert lines[2].settings == "1 GPU as planned"
    assert (lines[6].per_device_train_batch_size, lines[6].gradient_accumulation_steps) == (8, 1)
    text = report.to_text()
    assert ("ml.g6e.12xlarge spot  running  (4 GPUs, per-device batch 8 instead of 32, global batch 32 as planned)"
            in text)

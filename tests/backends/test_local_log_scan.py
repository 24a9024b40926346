"""A local job's log is read once (jobs/backends/local/log_scan.py): each look reads only what the log grew by,
a line still being written waits for the next look, and once the job has exited its last line counts even
without a newline."""

from __future__ import annotations

import json
from pathlib import Path

from jobs.backends.local.log_scan import SCAN_FILE, scan
from jobs.backends.local.state import JobFolder


def _folder(tmp_path: Path) -> JobFolder:
    folder = JobFolder(tmp_path, "job-1")
    folder.log_path.parent.mkdir(parents=True)
    return folder


def test_each_look_reads_only_what_the_log_grew_by_and_waits_for_a_line_being_written(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    folder.log_path.write_text("[progress] step=1 max_steps=4\n[metric] loss=0.9 step=1\n[metric] loss=0.")
    first = scan(folder)
    assert first.last == {"loss": 0.9} and first.step == 1
    assert first.offset == len("[progress] step=1 max_steps=4\n[metric] loss=0.9 step=1\n")
    with folder.log_path.open("a") as log:
        log.write("5 step=2\n")
    second = scan(folder)
    assert second.last == {"loss": 0.5} and second.points["loss"] == {"1": 0.9, "2": 0.5}
    assert json.loads((folder.path / SCAN_FILE).read_text())["offset"] == folder.log_path.stat().st_size


def test_once_the_job_exited_its_last_line_counts_without_a_newline(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    folder.log_path.write_text("[progress] step=3 max_steps=3\neval_loss = 0.41")
    assert "eval_loss" not in scan(folder).last  # still running: the line may not be whole
    folder.exit_path.write_text(json.dumps({"exit_code": 0}))
    ended = scan(folder)
    assert ended.last["eval_loss"] == 0.41 and ended.points["eval_loss"] == {"3": 0.41}

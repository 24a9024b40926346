"""job_files: what a job leaves is read as a regular file, without following a link on the way, within a cap;
everything else is refused at once (a FIFO never blocks, a device is never opened)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobs.backends.local.job_files import (
    JobFileRefused,
    job_file_exists,
    list_job_folder,
    model_files,
    read_job_file,
    read_job_json,
    tail_job_file,
)


@pytest.fixture
def jobs_root(tmp_path: Path) -> Path:
    job = tmp_path / "local-jobs" / "j-1"
    (job / "output" / "data").mkdir(parents=True)
    (job / "output" / "data" / "metrics.json").write_text('{"accuracy": 0.5}')
    (tmp_path / "secret.json").write_text('{"accuracy": 0.99}')
    return tmp_path / "local-jobs"


def test_a_regular_file_is_read(jobs_root: Path) -> None:
    assert read_job_json(jobs_root, "j-1/output/data/metrics.json") == {"accuracy": 0.5}
    assert job_file_exists(jobs_root, "j-1/output/data/metrics.json")


@pytest.mark.parametrize("where", ["file", "folder"])
def test_a_link_anywhere_below_the_anchor_is_not_followed(jobs_root: Path, where: str) -> None:
    data = jobs_root / "j-1" / "output" / "data"
    if where == "file":
        (data / "metrics.json").unlink()
        (data / "metrics.json").symlink_to(jobs_root.parent / "secret.json")
    else:
        os.rename(data, data.with_name("moved"))
        data.symlink_to(jobs_root.parent)  # output/data -> a folder holding secret.json as metrics.json's name
        (jobs_root.parent / "metrics.json").write_text('{"accuracy": 0.99}')
    with pytest.raises(JobFileRefused):
        read_job_file(jobs_root, "j-1/output/data/metrics.json")
    assert read_job_json(jobs_root, "j-1/output/data/metrics.json") is None
    assert not job_file_exists(jobs_root, "j-1/output/data/metrics.json")


def test_a_fifo_is_refused_without_blocking(jobs_root: Path) -> None:
    metrics = jobs_root / "j-1" / "output" / "data" / "metrics.json"
    metrics.unlink()
    os.mkfifo(metrics)  # nobody ever writes it: an open for reading would wait for ever
    with pytest.raises(JobFileRefused, match="FIFO"):
        read_job_file(jobs_root, "j-1/output/data/metrics.json")
    assert tail_job_file(jobs_root, "j-1/output/data/metrics.json", 100) == b""


def test_a_device_is_refused(jobs_root: Path) -> None:
    with pytest.raises(JobFileRefused, match="device"):
        read_job_file(Path("/"), "dev/zero")


def test_a_file_past_the_cap_is_refused_and_a_tail_reads_only_its_end(jobs_root: Path) -> None:
    log = jobs_root / "j-1" / "train.log"
    log.write_bytes(b"x" * 5000 + b"\nlast line\n")
    with pytest.raises(JobFileRefused, match="more than 1000"):
        read_job_file(jobs_root, "j-1/train.log", max_bytes=1000)
    assert tail_job_file(jobs_root, "j-1/train.log", 10) == b"last line\n"


def test_paths_that_leave_the_anchor_are_refused(jobs_root: Path) -> None:
    for bad in ("../secret.json", "/etc/passwd", "j-1/../../secret.json", ""):
        with pytest.raises(JobFileRefused):
            read_job_file(jobs_root, bad)


def test_listing_a_linked_folder_gives_nothing(jobs_root: Path) -> None:
    (jobs_root / "j-1" / "model").symlink_to(jobs_root.parent)
    assert list_job_folder(jobs_root, "j-1/model") == {}
    assert set(list_job_folder(jobs_root, "j-1/output")) == {"data"}


def test_a_model_folder_is_listed_only_when_it_holds_folders_and_regular_files(jobs_root: Path) -> None:
    model = jobs_root / "j-1" / "model"
    (model / "sub").mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "sub" / "weights.bin").write_bytes(b"w" * 100)
    assert sorted(map(str, model_files(jobs_root, "j-1/model", max_bytes=1000))) == ["config.json", "sub/weights.bin"]
    with pytest.raises(JobFileRefused, match="more than 50"):
        model_files(jobs_root, "j-1/model", max_bytes=50)
    (model / "sub" / "tokenizer.json").symlink_to(jobs_root.parent / "secret.json")
    with pytest.raises(JobFileRefused, match="sub/tokenizer.json is a link"):
        model_files(jobs_root, "j-1/model", max_bytes=1000)

"""A local job's channel is copied into its folder (jobs/backends/local/container.copy_channel): a link in the
data folder is copied as a link, never followed, so a job cannot read through it what the read-only mount of
the data kept out; and a copy that would fill the disk is refused in one sentence, with nothing copied."""

from __future__ import annotations

import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from jobs.backends.local.container import copy_channel
from jobs.errors import BackendError


def _data_with_a_link_out(tmp_path: Path) -> Path:
    secret = tmp_path / "elsewhere" / "credentials"
    secret.parent.mkdir()
    secret.write_text("aws_secret_access_key = canary")
    data = tmp_path / "data" / "train"
    (data / "shard").mkdir(parents=True)
    (data / "shard" / "part-0.arrow").write_bytes(b"rows" * 100)
    (data / "peek").symlink_to(secret)
    (data / "peek-folder").symlink_to(secret.parent, target_is_directory=True)
    return data


def test_a_link_in_the_data_is_copied_as_a_link_never_followed(tmp_path: Path) -> None:
    data = _data_with_a_link_out(tmp_path)
    dest = tmp_path / "job" / "input" / "data" / "train"
    copy_channel(data, dest, keep_free_bytes=1 << 20)
    assert (dest / "shard" / "part-0.arrow").read_bytes() == b"rows" * 100
    assert (dest / "peek").is_symlink() and (dest / "peek-folder").is_symlink()
    copied = [p for p in dest.rglob("*") if p.is_file() and not p.is_symlink()]
    assert all("canary" not in p.read_text(errors="replace") for p in copied)


def test_a_copy_that_would_fill_the_disk_is_refused_with_nothing_copied(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    data = _data_with_a_link_out(tmp_path)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(2 << 30, 2 << 30, 1 << 30))
    dest = tmp_path / "job" / "input" / "data" / "train"
    with pytest.raises(BackendError, match=r"^The channel .* holds 0\.0 GB and the job's folder has 1\.1 GB free, of "
                                          r"which 1024 MB stay free \(TRAINBOT_LOCAL_DISK_FREE_MB\): "):
        copy_channel(data, dest, keep_free_bytes=1 << 30)
    assert not dest.exists()

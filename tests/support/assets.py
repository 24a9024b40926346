"""The tiny BERT, its WordPiece tokenizer and the generated channels, built once a test session and shared
by every test that trains locally: each test's TRAINBOT_HOME gets the set as the backend would have left it
(`home/assets/<version>`, READY), its files hard-linked (no copy, and a real folder a sandbox can bind)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from jobs.backends.local.offline_assets import ASSETS_VERSION, LocalAssets, ensure_local_assets


def build_shared_assets(root: Path) -> LocalAssets:
    return ensure_local_assets(root)


def seed_assets(home: Path, assets: LocalAssets) -> Path:
    """`home` with the session's assets in place, so `ensure_local_assets(home)` finds them and builds nothing."""
    target = home / "assets" / ASSETS_VERSION
    if not (target / "READY").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(assets.root, target, copy_function=_link, dirs_exist_ok=True)
    return home


def _link(source: str, destination: str) -> None:
    try:
        os.link(source, destination)
    except OSError:  # another file system: a copy
        shutil.copy2(source, destination)

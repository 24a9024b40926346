"""Which ``checkpoint-N`` folder a run resumes from: the newest complete one. Standard library only: it ships
beside a team's own script with the spot entry, and the bot's own scripts use it too.

The Trainer writes ``trainer_state.json`` after the weights, optimizer and scheduler, so a kill mid-save (a spot
reclaim) leaves a folder without it, or with a torn one. transformers' stock ``get_last_checkpoint`` still picks
that folder: the run then starts again from step 0 (on the torn folder's weights) or fails to load it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_complete(path: Path) -> bool:
    try:
        state = json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(state, dict) and "global_step" in state


def find_resume_checkpoint(checkpoint_dir: Path) -> tuple[Path | None, list[Path]]:
    """(newest complete checkpoint, incomplete checkpoint folders newer than it)."""
    if not checkpoint_dir.is_dir():
        return None, []
    found = []
    for child in checkpoint_dir.iterdir():
        match = _CHECKPOINT_RE.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    incomplete: list[Path] = []
    for _, path in sorted(found, reverse=True):
        if checkpoint_complete(path):
            return path, incomplete
        incomplete.append(path)
    return None, incomplete

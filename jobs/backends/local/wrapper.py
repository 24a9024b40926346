"""The tiny parent of every local training process: runs the command and records how it ended.

The bot starts this detached (its own session), so it may exit or restart while a job trains; nobody
is left to wait() for the training process. This wrapper waits instead and writes `exit.json`
({"exit_code", "wall_seconds"}) atomically, which is how any later bot process learns the outcome.

It is run by file path with the bot's Python and imports only the standard library.
Usage: python wrapper.py EXIT_FILE -- COMMAND [ARG ...]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType


def _ignore_but_outlive(signum: int, frame: FrameType | None) -> None:
    # SIGTERM/SIGINT reach the whole process group: the training process handles them (it saves a
    # checkpoint); the wrapper must outlive it to record the exit code. A Python-level handler (not
    # SIG_IGN) is reset to the default on exec, so the child still receives the signals normally.
    print(f"[trainbot] wrapper received signal {signum}; waiting for the training process", flush=True)


def _write_atomically(path: Path, payload: dict[str, float | int]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: wrapper.py EXIT_FILE -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    exit_file, command = Path(argv[0]), argv[2:]
    signal.signal(signal.SIGTERM, _ignore_but_outlive)
    signal.signal(signal.SIGINT, _ignore_but_outlive)
    started = time.monotonic()
    try:
        code = subprocess.call(command)
    except OSError as exc:
        print(f"[trainbot] could not start {command[0]}: {exc}", flush=True)
        code = 127
    if code < 0:  # killed by a signal: report it the way a shell (and SageMaker) does, 128 + N
        code = 128 - code
    print(f"[trainbot] training process exited with code {code}", flush=True)
    _write_atomically(exit_file, {"exit_code": code, "wall_seconds": round(time.monotonic() - started, 3)})
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

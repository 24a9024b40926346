"""Time from the README's run command (`.venv/bin/trainbot`, dependencies installed) to the first prompt,
and the wall time of `trainbot demo`, both as a new user would see them.

    .venv/bin/python bench/console_startup.py [--runs 5] [--no-demo]

The start-up is measured on a pseudo-terminal (so the console is interactive and draws `trainbot> `)
with a fresh TRAINBOT_HOME each run; the demo runs once in a fresh TRAINBOT_HOME, so it includes
building the offline tiny model and data. Targets: first prompt under 5 s, demo under 5 min.
"""

from __future__ import annotations

import argparse
import os
import pty
import select
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINBOT = ROOT / ".venv" / "bin" / "trainbot"
PROMPT = b"trainbot> "
STARTUP_TARGET_S = 5.0
DEMO_TARGET_S = 300.0


def environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "AWS_"))}
    env.update(TRAINBOT_HOME=str(home), HF_HUB_OFFLINE="1")
    return env


def time_to_prompt(home: Path, timeout: float = 60.0) -> float:
    """Seconds from spawning `trainbot` on a terminal to `trainbot> ` on its screen; then it is told to quit."""
    master, slave = pty.openpty()
    started = time.monotonic()
    process = subprocess.Popen([str(TRAINBOT)], stdin=slave, stdout=slave, stderr=slave, cwd=ROOT,
                               env=environment(home), close_fds=True)
    os.close(slave)
    seen = b""
    try:
        while PROMPT not in seen:
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"no prompt within {timeout:.0f} s; the screen shows: {seen[-300:]!r}")
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                seen += os.read(master, 4096)
        elapsed = time.monotonic() - started
        os.write(master, b"quit\n")
        process.wait(timeout=30)
        return elapsed
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)


def demo_wall_time(home: Path) -> tuple[float, int, list[str]]:
    started = time.monotonic()
    result = subprocess.run([str(TRAINBOT), "demo"], cwd=ROOT, env=environment(home), capture_output=True,
                            text=True, check=False)
    elapsed = time.monotonic() - started
    lines = result.stdout.rstrip().splitlines()
    table = lines[-7:] if len(lines) >= 7 else lines
    return elapsed, result.returncode, table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="start-up measurements (fresh home each)")
    parser.add_argument("--no-demo", action="store_true", help="only the start-up")
    args = parser.parse_args()
    if not TRAINBOT.is_file():
        raise SystemExit(f"{TRAINBOT} is missing: run the README's set-up command first")
    with tempfile.TemporaryDirectory() as scratch:
        times = [time_to_prompt(Path(scratch) / f"home-{n}") for n in range(args.runs)]
        print(f"time to first prompt ({args.runs} runs, cpus={os.cpu_count()}): median {statistics.median(times):.2f} s, "
              f"min {min(times):.2f} s, max {max(times):.2f} s (target < {STARTUP_TARGET_S:.0f} s)")
        if args.no_demo:
            return
        wall, code, table = demo_wall_time(Path(scratch) / "demo-home")
        print(f"trainbot demo: {wall:.0f} s wall, exit {code} (target < {DEMO_TARGET_S / 60:.0f} min)")
        print("\n".join(table))


if __name__ == "__main__":
    main()

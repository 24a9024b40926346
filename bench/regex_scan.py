"""Benchmark: what reading a job's log costs the bot, for hostile lines against ordinary ones (issue 22, item 4).

Run: .venv/bin/python bench/regex_scan.py. Every figure is a ratio against a baseline measured in this process:
- the default ``step`` pattern on a line of ``=`` signs, 4 KB and 16 KB: Python's old ``\\S+=\\S+`` pattern
  grows with the square of the line (x16 for x4 the length), RE2's with the line (about x4);
- a team's ``(?:[a-z_]+[ ]?)*Q([0-9])`` on ``ab ab ...``: Python's ``re`` doubles with every word (only 20 and
  24 words are tried: more would not finish), RE2 reads 20,000 words as fast as ordinary text of that size;
- a log read again after it grew: the incremental scan reads the new bytes only (target: the cost of a
  look at an unchanged 20 MB log is under 1% of the first read).
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.backends.local import log_scan  # noqa: E402
from jobs.backends.local.state import JobFolder  # noqa: E402
from jobs.planning.metrics import _STEP, MetricScanner  # noqa: E402

OLD_STEP = re.compile(r"\[metric\] \S+=\S+ step=([0-9]+)(?!\S)")  # the default before this issue
HOSTILE = r"(?:[a-z_]+[ ]?)*Q([0-9])"


def best_of(call: Callable[[], object], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return min(times)


def step_pattern() -> None:
    short, long = "[metric] " + "=" * 4_000, "[metric] " + "=" * 16_000
    old = best_of(lambda: OLD_STEP.search(long)) / best_of(lambda: OLD_STEP.search(short))
    new = best_of(lambda: _STEP.search(long), 50) / best_of(lambda: _STEP.search(short), 50)
    print(f"step pattern, 16 KB line / 4 KB line:  python re x{old:.1f} (quadratic: 16)   RE2 x{new:.1f} (at most linear: 4)")
    print(f"step pattern on the 16 KB line, python re / RE2: x{best_of(lambda: OLD_STEP.search(long)) / best_of(lambda: _STEP.search(long), 50):.0f}")


def team_pattern() -> None:
    python = re.compile(HOSTILE)
    twenty, twenty_four = "ab " * 20, "ab " * 24
    growth = best_of(lambda: python.search(twenty_four), 1) / best_of(lambda: python.search(twenty), 1)
    scanner = MetricScanner.of([{"Name": "x", "Regex": HOSTILE}])
    plain = MetricScanner.of([{"Name": "x", "Regex": r"loss=([0-9.]+)"}])
    hostile_line, ordinary_line = "ab " * 20_000, "the loss went down " * 3_158
    ratio = best_of(lambda: scanner.scan(hostile_line), 20) / best_of(lambda: plain.scan(ordinary_line), 20)
    print(f"team pattern, python re, 24 words / 20 words: x{growth:.0f} (exponential: 16)")
    print(f"team pattern, RE2, 20,000 hostile words / an ordinary 60 KB line with a plain pattern: x{ratio:.1f}")


def incremental() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = JobFolder(Path(tmp) / "local-jobs", "bench-1")
        folder.log_path.parent.mkdir(parents=True)
        line = "[metric] loss=0.5 step={} " + "x" * 80 + "\n"
        with folder.log_path.open("w") as fh:
            fh.writelines(line.format(n) for n in range(200_000))
        first = best_of(lambda: log_scan.scan(folder), 1)
        unchanged = best_of(lambda: log_scan.scan(folder), 5)
        with folder.log_path.open("a") as fh:
            fh.writelines(line.format(n) for n in range(200_000, 201_000))
        grown = best_of(lambda: log_scan.scan(folder), 1)
        size = folder.log_path.stat().st_size / 1e6
        print(f"incremental scan of a {size:.0f} MB log: a look at it unchanged costs {unchanged / first:.2%} of the "
              f"first read; after 1,000 more lines {grown / first:.2%}")


if __name__ == "__main__":
    step_pattern()
    team_pattern()
    incremental()

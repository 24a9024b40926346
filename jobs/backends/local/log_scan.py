"""What a local job's log says, read once: each look reads only the bytes the log grew by since the last one.

A job's metrics (the last value of each, and every point for the loss curve) and where it resumed from are
kept in ``metric-scan.json`` beside the log with the offset read so far, so a watcher cycle, a report, a
restarted bot or the CLI next to it each pay for the new lines alone, never for the whole log again. Lines
are read up to MAX_LINE_BYTES (the rest of a longer one is skipped) and every pattern is RE2, so what a job
prints costs the bot time linear in its size however it was written.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jobs.backends.local.code import metric_definitions
from jobs.backends.local.job_files import JobFile, open_job_file
from jobs.backends.local.state import JobFolder, parse_progress
from jobs.file_lock import exclusive_lock
from jobs.planning.metrics import MetricScanner
from jobs.planning.patterns import MAX_LINE_CHARS, PatternError, linear

log = logging.getLogger(__name__)

SCAN_FILE = "metric-scan.json"
FORMAT = 2  # bump when what is kept changes: a stored scan of another format is read again from the start
MAX_LINE_BYTES = MAX_LINE_CHARS * 4  # UTF-8: a line of MAX_LINE_CHARS characters fits
CHUNK_BYTES = 1 << 20
#: The points kept for each metric's curve; past it every other point is dropped (the curve keeps its shape).
MAX_POINTS = 5000
#: metric-scan.json: the bot's own, at most MAX_POINTS points a metric.
SCAN_FILE_BYTES = 64 << 20

#: What training/ prints when it picks a checkpoint up (the step is the checkpoint folder's number).
_RESUMED = linear(r"\[checkpoint\] resuming from .*checkpoint-([0-9]+)")
#: ... and how far the interrupted attempt had got past it (the steps trained again).
_REDONE = linear(r"\[checkpoint\] the interrupted run had reached step [0-9]+: ([0-9]+) steps? redone")
#: The Trainer's training bar (``| 30/60 [00:05<00:05,  5.1it/s]``); datasets' bars count examples or batches.
_TRAINING_BAR = linear(r"\|\s*([0-9]{1,9})/([0-9]{1,9})\s*\[[^\]]{0,80}(?:it/s|s/it)\]")


@dataclass
class LogScan:
    """What the log said up to ``offset`` (bytes): the last value of each metric, each metric's points by
    step, the resume lines' figures, and the training step the log has reached (``[progress] step=S`` lines
    where the job prints them, else the Trainer's progress bar with the most steps: evaluation bars count
    eval batches). A line without a step of its own is at that step; one before any step is known is left
    out of the curves, never placed at a made-up step."""

    definitions: str = ""  # a digest of the definitions it was read with
    offset: int = 0
    lines: int = 0
    skipping: bool = False  # inside a line longer than MAX_LINE_BYTES: the rest of it is not read
    last: dict[str, float] = field(default_factory=dict)
    points: dict[str, dict[str, float]] = field(default_factory=dict)
    resumed_from_step: int | None = None
    steps_redone: int | None = None
    step: int | None = None
    progress_lines: bool = False  # the job prints [progress] lines: the bars are not read for the step
    bar_total: int = 0
    format: int = FORMAT

    def read(self, text: str, scanner: MetricScanner) -> None:
        """One complete line of the log (it may hold ``\\r``-separated progress bar frames)."""
        for line in text.splitlines() or [""]:
            self._line(line, scanner)
            self.lines += 1

    def _line(self, line: str, scanner: MetricScanner) -> None:
        self._track_step(line)
        for name, value, step in scanner.scan(line):
            self.last[name] = value
            at = step if step is not None else self.step
            if at is None:
                continue
            # Several processes (or a re-logged step) may print one step twice: the last one counts.
            series = self.points.setdefault(name, {})
            series[str(at)] = value
            if len(series) > MAX_POINTS:
                self.points[name] = dict(list(sorted(series.items(), key=lambda kv: int(kv[0])))[::2])
        if "[checkpoint]" in line:
            if self.resumed_from_step is None and (found := _RESUMED.search(line)):
                self.resumed_from_step = int(found.group(1))
            if self.steps_redone is None and (found := _REDONE.search(line)):
                self.steps_redone = int(found.group(1))


    def _track_step(self, line: str) -> None:
        progress = parse_progress(line.strip())
        if progress is not None:
            self.progress_lines = True
            self.step = int(progress["step"])
            return
        if self.progress_lines:
            return
        bar = _TRAINING_BAR.search(line)
        if bar is not None and int(bar.group(2)) >= self.bar_total:
            self.bar_total = int(bar.group(2))
            self.step = int(bar.group(1))


def scan(folder: JobFolder) -> LogScan:
    """The job's log read up to its end now: the stored scan, plus whatever the log grew by since. One look
    at a time per job (a file lock: bot threads and other processes alike)."""
    definitions = metric_definitions(folder)
    try:
        scanner = MetricScanner.of(definitions)
    except (PatternError, KeyError, TypeError):  # saved by a bot that did not check patterns: the defaults
        log.warning("the metric definitions of %s cannot be run in linear time; reading the defaults", folder.name)
        definitions, scanner = None, MetricScanner.of()
    digest = hashlib.sha256(json.dumps(definitions, sort_keys=True).encode()).hexdigest()[:16]
    with exclusive_lock(folder.root / ".locks" / f"{folder.name}.scan.lock"):
        done = _load(folder, digest)
        before = done.offset
        try:
            # Once the job has exited its log is whole: a last line without a newline is read too.
            with open_job_file(folder.root, f"{folder.name}/logs/train.log") as job_log:
                _read_new(job_log, done, scanner, ended=folder.read_exit() is not None)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not read the log of %s: %s", folder.name, exc)
        if done.offset != before:
            _save(folder.path / SCAN_FILE, done)
        return done


def _read_new(log: JobFile, done: LogScan, scanner: MetricScanner, *, ended: bool) -> None:
    if log.size < done.offset:  # the log was replaced: read it again
        done.__dict__.update(asdict(LogScan(definitions=done.definitions)))
    for line, consumed in _complete_lines(log, done, ended=ended):
        if line is not None:
            done.read(line.decode("utf-8", errors="replace"), scanner)
        done.offset += consumed


def _complete_lines(log: JobFile, done: LogScan, *, ended: bool) -> Iterator[tuple[bytes | None, int]]:
    """(the line to read, or None for bytes skipped; bytes consumed) for every complete line from here. A line
    still being written stays for the next look, unless it is already too long to wait for or the job ended."""
    pending = b""
    at = done.offset
    while chunk := log.read(CHUNK_BYTES, offset=at):
        at += len(chunk)
        pending += chunk
        while (end := pending.find(b"\n")) >= 0:
            line, pending = pending[:end], pending[end + 1:]
            skipped, done.skipping = done.skipping, False
            yield (None if skipped else line[:MAX_LINE_BYTES]), end + 1
        if len(pending) > MAX_LINE_BYTES:  # no newline in sight: read its start once, skip the rest
            yield (None if done.skipping else pending[:MAX_LINE_BYTES]), len(pending)
            done.skipping, pending = True, b""
    if ended and pending:
        yield (None if done.skipping else pending[:MAX_LINE_BYTES]), len(pending)
        done.skipping = False


def _load(folder: JobFolder, digest: str) -> LogScan:
    raw = folder.read_json(SCAN_FILE, max_bytes=SCAN_FILE_BYTES)
    try:
        stored = LogScan(**raw) if isinstance(raw, dict) else LogScan(definitions=digest)
    except TypeError:
        return LogScan(definitions=digest)
    if stored.format != FORMAT or stored.definitions != digest:
        return LogScan(definitions=digest)
    return stored


def _save(path: Path, done: LogScan) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(asdict(done), separators=(",", ":")))
    os.replace(tmp, path)

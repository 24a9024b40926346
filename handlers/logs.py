"""/logs JOB [N] and the Logs button of a failed job's card: the last N lines of each host's log, labelled.

Checks are answered at once; the backend is read off the ack path. What fits in a message comes back to the
person who asked, one code block a host; anything longer goes up as a file snippet, into the job's thread
when it has one (where the rest of its story is), else into the channel where it was asked.

Who: a job's log and failure lines are for its launcher, an admin, and whoever asks from its own channel
(AccessPolicy.may_read_logs); anyone else gets one sentence, and `/job` shows them the card without its
failure lines (`readable`). How often: TRAINBOT_MAX_LOGS_PER_MINUTE a person (LOGS_BURST at once), counted in
the store so every replica shares it. At what cost to others: the reply and the upload go at LOGS_PRIORITY,
below a job's ending, so a flood of uploads into a thread never holds its final report back.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
from pathlib import Path

from handlers import blocks as bk
from handlers import texts
from handlers.chat import ChatUnavailable, Reply
from handlers.context import CommandContext, Services
from jobs.errors import LimitReached, TrainbotError
from jobs.lineage import Attempt, Lineage
from jobs.rate_limits import Budget, Priority, Rate, prioritised
from jobs.reporting.logs import (
    DEFAULT_LINES,
    JobLogs,
    attempt_for,
    check_lines,
    check_readable,
    read_job_logs,
)
from jobs.store.rate_ledger import StoreRateLedger

log = logging.getLogger(__name__)

#: Where snippets are written before they are uploaded (under TRAINBOT_HOME).
SNIPPETS_DIR = "log-snippets"
#: Requests a person may make at once after a quiet spell (then TRAINBOT_MAX_LOGS_PER_MINUTE).
LOGS_BURST = 2
#: The chat calls of a /logs answer: below endings, so its uploads take only the room they leave.
LOGS_PRIORITY = Priority.CHANGE
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def handle_logs(ctx: CommandContext, text: str) -> Reply:
    words = text.split()
    if not words or len(words) > 2:
        return Reply(text=texts.USAGE_LOGS)
    return _logs(ctx, words[0], check_lines(words[1] if len(words) == 2 else None))


def on_logs(ctx: CommandContext, value: str) -> Reply | None:
    """The card's Logs button: its value is the lineage id."""
    return _logs(ctx, value, DEFAULT_LINES)


def _logs(ctx: CommandContext, ref: str, lines: int) -> Reply:
    services = ctx.services
    services.jobs.policy.check_can_use(ctx.actor)
    if services.backend is None:
        return Reply(text=texts.NOT_AVAILABLE.format(feature="Reading logs"))
    lineage = services.jobs.get(ref)
    services.jobs.policy.check_can_read_logs(ctx.actor, lineage)
    attempt = attempt_for(lineage, ref)
    check_readable(lineage, attempt, services.backend)
    _take_turn(services, ctx.actor.user_id)
    services.run_later(lambda: show_logs(ctx, lineage, attempt, lines))
    return Reply(text=texts.LOGS_FETCHING.format(lines=lines, job=attempt.job_name))


def _take_turn(services: Services, user: str) -> None:
    """LimitReached when ``user`` asked for logs more often than TRAINBOT_MAX_LOGS_PER_MINUTE."""
    per_minute = services.settings.trainbot_max_logs_per_minute
    budget = Budget(f"logs:{user}", Rate(per_minute=per_minute, burst=LOGS_BURST))
    wait = StoreRateLedger(services.store.engine).take([budget], Priority.INTERACTIVE,
                                                       services.clock.now().timestamp())
    if wait > 0:
        raise LimitReached(texts.LOGS_TOO_OFTEN.format(per_minute=per_minute, seconds=math.ceil(wait)))


def readable(ctx: CommandContext, lineage: Lineage) -> tuple[Lineage, str | None]:
    """(``lineage`` as the asker may see it, the sentence saying what was left out): its attempts' failure
    lines are left out for someone who may not read its logs."""
    policy = ctx.services.jobs.policy
    if policy.may_read_logs(ctx.actor, lineage) or not any(a.failure_reason for a in lineage.attempts):
        return lineage, None
    attempts = tuple(dataclasses.replace(a, failure_reason="") for a in lineage.attempts)
    return dataclasses.replace(lineage, attempts=attempts), policy.logs_withheld(lineage)


def show_logs(ctx: CommandContext, lineage: Lineage, attempt: Attempt, lines: int) -> None:
    with prioritised(LOGS_PRIORITY):
        _show_logs(ctx, lineage, attempt, lines)


def _show_logs(ctx: CommandContext, lineage: Lineage, attempt: Attempt, lines: int) -> None:
    backend = ctx.services.backend
    assert backend is not None  # checked before this was queued
    try:
        logs = read_job_logs(lineage, attempt, backend, lines)
    except TrainbotError as exc:
        _tell(ctx, texts.LOGS_FAILED.format(job=attempt.job_name, reason=bk.escape(exc.user_message())))
        return
    except Exception:
        log.exception("reading the logs of %s failed", attempt.job_name)
        _tell(ctx, texts.LOGS_FAILED.format(job=attempt.job_name, reason=texts.UNEXPECTED_ERROR))
        return
    blocks = log_blocks(logs)
    if blocks is not None:
        _tell(ctx, texts.LOGS_TITLE.format(job=logs.job_name, lines=logs.lines, hosts=len(logs.hosts)), blocks)
        return
    _upload(ctx, lineage, logs)


def log_blocks(logs: JobLogs) -> list[bk.Block] | None:
    """One code block per host under a title; None when that does not fit in one message."""
    title = texts.LOGS_TITLE.format(job=logs.job_name, lines=logs.lines, hosts=len(logs.hosts))
    if not logs.line_count:
        return [bk.section(texts.LOGS_EMPTY.format(job=logs.job_name))]
    blocks = [bk.section(f"*{bk.escape(title)}*")]
    for host in logs.hosts:
        head = texts.LOGS_HOST.format(label=bk.escape(host.label), count=len(host.lines))
        body = "\n".join(bk.escape(line.replace("```", "'''")) for line in host.lines) or " "
        text = f"{head}\n```{body}```"
        if len(text) > bk.MAX_TEXT:
            return None
        blocks.append(bk.section(text))
    return blocks if len(blocks) <= bk.MAX_BLOCKS else None


def _upload(ctx: CommandContext, lineage: Lineage, logs: JobLogs) -> None:
    path = snippet_path(ctx.services.settings.trainbot_home, logs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(logs.to_text() + "\n", encoding="utf-8")
    in_thread = bool(lineage.channel and lineage.message_ts)
    channel = str(lineage.channel) if in_thread else ctx.channel_id
    title = texts.LOGS_FILE_TITLE.format(lines=logs.lines, job=logs.job_name, hosts=len(logs.hosts))
    try:
        ctx.chat.upload_file(channel, path, title=title, thread_ts=lineage.message_ts if in_thread else None)
    except ChatUnavailable as exc:
        _tell(ctx, texts.LOGS_FAILED.format(job=logs.job_name, reason=str(exc)))
        return
    where = texts.LOGS_FILE_THREAD if in_thread else texts.LOGS_FILE_HERE
    _tell(ctx, texts.LOGS_FILE.format(job=logs.job_name, count=logs.line_count, hosts=len(logs.hosts), where=where))


def snippet_path(home: Path, logs: JobLogs) -> Path:
    return home / SNIPPETS_DIR / f"{_UNSAFE.sub('_', logs.job_name)}-last{logs.lines}.log"


def _tell(ctx: CommandContext, text: str, blocks: list[bk.Block] | None = None) -> None:
    try:
        ctx.chat.post_ephemeral(ctx.channel_id, ctx.actor.user_id, bk.fallback(text), blocks=blocks)
    except ChatUnavailable:
        log.warning("could not tell %s: %s", ctx.actor.user_id, text)

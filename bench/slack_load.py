"""Slack at team scale: 1,000 live SageMaker jobs (moto, CloudWatch progress) delivered by the real bot to a
loopback Slack that enforces Slack's limits, on simulated time.

    PYTHONPATH=. .venv/bin/python bench/slack_load.py [--jobs 1000] [--minutes 10] [--baseline]

One moto server, one loopback Slack (tests/support/slack_api.py with SLACK_LIMITS: Tier 2/3/4 per method, about
one post a second a channel; a call past a limit is answered 429 with Retry-After), one SQLite store holding
1,000 RUNNING lineages whose cards sit in 25 channels. The bot's own pieces run on a FakeClock: the watcher
(the real SageMakerBackend, every TRAINBOT_POLL_SECONDS), live progress (GetMetricData, every
TRAINBOT_PROGRESS_SECONDS, over CloudWatch series published each minute) and the outbox loop (each second)
through SlackChat on the governed WebClient (the store's ledger). Within the window, 100 jobs end (70
complete, 30 fail) and 100 change state (spot interruptions, 20 of them at once in one channel), at seeded
random moments; at minute five Slack answers one chat.update 429 of its own (another app on the workspace).
Then it drains until every ending is reported.

Figures: calls per minute per method (most in any sliding minute, against the limit), 429s received, every
final report and failure posted once, the p99 delay from a job's ending (its LastModifiedTime) to its report
in the thread, the p99 age of the progress the cards show (sampled every 30 s), and how often a card's
progress comes round. About five minutes of real time. ``--baseline`` adds the same run with the governor's
pacing off (Retry-After still honoured), in the same process, for comparison (as long again). Nothing here
asserts on time.

The world (moto, the store, the bot's pieces, the happenings) is arranged by bench/slack_load_world.py.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopback_aws import quiet_libraries, start_moto  # bench/ is the script's sys.path[0]
from slack_load_world import (
    AS_OF,
    World,
    arrange,
    check_index_answers_as_moto,
    happen,
    index_cloudwatch_queries,
    post_cards,
    publish_progress,
    schedule,
)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SAMPLE_SECONDS = 30


# ---------------------------------------------------------------- the run


class CardAges:
    """What progress each card shows (its as-of, read from the chat.update calls Slack took), sampled."""

    def __init__(self, world: World, as_of: dict[str, float]) -> None:
        self._world = world
        self.as_of = dict(as_of)
        self._lineage_of = {}
        for lineage_id in world.channel_of:
            lineage = world.store.get_lineage(lineage_id)
            self._lineage_of[(lineage.channel, lineage.message_ts)] = lineage_id
        self._read = 0
        self.samples: list[float] = []

    def sample(self) -> None:
        calls = self._world.slack.calls
        new, self._read = calls[self._read:], len(calls)
        for call in new:
            if call.method == "chat.update" and call.status == 200:
                lineage_id = self._lineage_of.get((call.params.get("channel"), call.params.get("ts")))
                found = AS_OF.search(str(call.params.get("blocks")))
                if lineage_id and found:
                    self.as_of[lineage_id] = float(found.group(1))
        now = self._world.clock.now().timestamp()
        self.samples += [now - at for lid, at in self.as_of.items() if lid not in self._world.ended_at]


def endings_reported(world: World) -> dict[str, tuple[int, str]]:
    """lineage -> (outbox id, kind) of its ending's notification, for those delivered."""
    from sqlalchemy import select

    from jobs.store.schema import outbox, read_transaction

    query = select(outbox.c.id, outbox.c.lineage_id, outbox.c.kind).where(
        outbox.c.kind.in_(("completed", "failed")), outbox.c.delivered_at.is_not(None))
    with read_transaction(world.store.engine) as conn:
        return {lid: (oid, kind) for oid, lid, kind in conn.execute(query)}


def drive(world: World, events: list[tuple[float, str, str]], minutes: int, as_of: dict[str, float]) -> CardAges:
    from handlers.notify import deliver_due

    window, clock = minutes * 60, world.clock
    world.slack.clear()
    world.start = clock.now().timestamp()
    ages = CardAges(world, as_of)
    pending = list(events)
    next_watch = next_progress = next_sample = next_check = 0.0
    injected, drained = False, False
    while not drained:
        elapsed = clock.now().timestamp() - world.start
        while pending and pending[0][0] <= elapsed:
            _, job, what = pending.pop(0)
            happen(world, job, what)
        if not injected and elapsed >= 300:  # another app spent the workspace's chat.update budget
            world.slack.rate_limit("chat.update", times=1, retry_after=20)
            injected = True
        if elapsed >= next_watch:  # the bot's watch cycle: the watcher, then the steps after each ending
            world.watcher.poll_once()
            world.endings.process_due()
            next_watch += world.services.settings.trainbot_poll_seconds
        if elapsed >= next_progress:
            publish_progress(world, int(elapsed // 60))
            world.tracker.poll_once(force=True)
            next_progress += world.services.settings.trainbot_progress_seconds
        deliver_due(world.services, world.chat)
        if elapsed < window and elapsed >= next_sample:
            ages.sample()
            next_sample += SAMPLE_SECONDS
        if elapsed >= window and elapsed >= next_check:  # drain: until every ending is in its thread
            drained = set(endings_reported(world)) >= set(world.ended_at) or elapsed > window + 600
            next_check = elapsed + 10
        clock.advance(1.0)
    return ages


@dataclass
class Figures:
    most_a_minute: dict[str, int]
    mean_a_minute: dict[str, float]
    busiest_channel_10s: int
    busiest_channel_60s: int
    refused: list[tuple[str, float]]
    endings: int
    changes: int
    reported_once: int
    missing: int
    doubled: int
    delay_p50: float
    delay_p99: float
    age_p50: float
    age_p99: float
    updates: int
    live_cards: int
    minutes: int
    wall_s: float


def figures(world: World, ages: CardAges, minutes: int, changes: int, wall_s: float) -> Figures:
    slack, start = world.slack, world.start
    methods = sorted({c.method for c in slack.calls if c.method not in ("upload", "response")})
    window_end = start + minutes * 60
    in_window = [c for c in slack.calls if c.status == 200 and c.at < window_end]
    mean = {m: sum(c.method == m for c in in_window) / minutes for m in methods}
    channels = sorted(set(world.channel_of.values()))
    reported = endings_reported(world)
    posts: dict[int, list[float]] = defaultdict(list)
    for call in slack.calls_to("chat.postMessage"):
        payload = ((call.params.get("metadata") or {}).get("event_payload") or {})
        if call.status == 200 and payload.get("step") == "post":
            posts[int(payload["outbox_id"])].append(call.at)
    delays = sorted(posts[oid][0] - world.ended_at[lid] for lid, (oid, _) in reported.items() if posts[oid])
    updates = sum(c.method == "chat.update" for c in in_window)
    return Figures(
        most_a_minute={m: slack.most_in_window(m, 60) for m in methods}, mean_a_minute=mean,
        busiest_channel_10s=max(slack.most_in_window("chat.postMessage", 10, channel=ch) for ch in channels),
        busiest_channel_60s=max(slack.most_in_window("chat.postMessage", 60, channel=ch) for ch in channels),
        refused=[(c.method, c.at - start) for c in slack.rate_limited()],
        endings=len(world.ended_at), changes=changes, reported_once=sum(len(posts[oid]) == 1 for oid, _ in reported.values()),
        missing=len(set(world.ended_at) - set(reported)), doubled=sum(len(posts[oid]) > 1 for oid, _ in reported.values()),
        delay_p50=_pct(delays, 50), delay_p99=_pct(delays, 99), age_p50=_pct(sorted(ages.samples), 50),
        age_p99=_pct(sorted(ages.samples), 99), updates=updates,
        live_cards=len(world.channel_of) - len(world.ended_at), minutes=minutes, wall_s=wall_s)


def _pct(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(pct / 100 * (len(values) - 1))))]


def one_run(jobs: int, minutes: int, *, paced: bool) -> Figures:
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        world = arrange(jobs, Path(tmp), paced=paced)
        try:
            publish_progress(world, -1)
            check_index_answers_as_moto(world.names, world.clock.now())
            world.tracker.poll_once(force=True)
            world.watcher.poll_once()  # the first cycle ever describes every job once: before the window
            as_of = post_cards(world)
            world.slack.limits = _limits()
            arranged = time.perf_counter() - began
            print(f"{'paced' if paced else 'unpaced'}: arranged {jobs} jobs, their series and cards in {arranged:.0f} s")
            began = time.perf_counter()
            happenings = schedule(world, minutes, random.Random(26))
            ages = drive(world, happenings, minutes, as_of)
            changes = sum(what == "interrupted" for _, _, what in happenings)
            return figures(world, ages, minutes, changes, time.perf_counter() - began)
        finally:
            world.slack.stop()
            world.store.dispose()


def _limits() -> tuple[Any, ...]:
    from tests.support.slack_api import SLACK_LIMITS

    return SLACK_LIMITS


def tier_of(method: str) -> int | None:
    from tests.support.slack_api import SLACK_LIMITS

    limits = [lim.calls for lim in SLACK_LIMITS if lim.method == method and lim.window == 60 and not lim.per_channel]
    return limits[0] if limits else None


def report(paced: Figures, baseline: Figures | None) -> None:
    print(f"\n{paced.live_cards + paced.endings} live jobs, {paced.endings} ending and {paced.changes} changing state in "
          f"{paced.minutes} simulated minutes ({paced.wall_s:.0f} s of real time)")
    print(f"{'method':<30} {'most in a minute':>17} {'mean a minute':>14} {'limit':>6}"
          + ("   unpaced: most / mean" if baseline else ""))
    for method in sorted(paced.most_a_minute):
        limit = tier_of(method)
        line = (f"{method:<30} {paced.most_a_minute[method]:>17} {paced.mean_a_minute[method]:>14.1f} "
                f"{limit if limit else '-':>6}")
        if baseline:
            line += f"   {baseline.most_a_minute.get(method, 0):>7} / {baseline.mean_a_minute.get(method, 0):.1f}"
        print(line)
    print(f"{'chat.postMessage, one channel':<30} {paced.busiest_channel_60s:>17} {'':>14} {60:>6}   "
          f"(most in 10 s: {paced.busiest_channel_10s}, limit 10)")
    first = f", first at {paced.refused[0][1]:.0f} s ({paced.refused[0][0]})" if paced.refused else ""
    print(f"429s received: {len(paced.refused)}{first} (target: none after the first)")
    print(f"final reports and failures posted once: {paced.reported_once} of {paced.endings} "
          f"({paced.missing} missing, {paced.doubled} doubled; target: all, each once)")
    print(f"ending -> report in its thread: p50 {paced.delay_p50:.0f} s, p99 {paced.delay_p99:.0f} s "
          "(the watcher polls every 30 s)")
    every = paced.live_cards * paced.minutes / max(paced.updates, 1)
    print(f"age of the progress a card shows: p50 {paced.age_p50 / 60:.1f} min, p99 {paced.age_p99 / 60:.1f} min; "
          f"{paced.updates} card redraws in the window: each of {paced.live_cards} cards comes round about every "
          f"{every:.0f} min (Tier 3 shared by every card)")
    if baseline:
        print(f"\nbaseline, pacing off: {len(baseline.refused)} 429s received "
              f"({len(baseline.refused) / max(len(paced.refused), 1):.0f}x), reports p99 {baseline.delay_p99:.0f} s, "
              f"{baseline.missing} missing, {baseline.doubled} doubled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--baseline", action="store_true", help="also the same run with the governor's pacing off")
    args = parser.parse_args()
    quiet_libraries("bot", "handlers", "slack_sdk")
    server = start_moto()
    index_cloudwatch_queries()
    try:
        paced = one_run(args.jobs, args.minutes, paced=True)
        baseline = one_run(args.jobs, args.minutes, paced=False) if args.baseline else None
        report(paced, baseline)
    finally:
        server.stop()


if __name__ == "__main__":
    main()

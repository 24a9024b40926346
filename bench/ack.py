"""How fast the bot acknowledges Slack, while launches run on a slow backend, against a baseline in the same run.

200 signed `/train` requests, 50 at a time, against the HTTP server (uvicorn + bot.serve.SlackHttpApp, the
real Bolt app), then the same as Socket Mode envelopes on a local websocket, while Launch clicks keep the
background executor busy with launches on a backend that takes LAUNCH_SECONDS each (the scripted backend with
a delay: the SDK's upload and CreateTrainingJob) and a store that holds a team's history of completed runs.
Each burst is run in three variants, interleaved over ``--rounds`` rounds under the same launch load:

- ``no-op``: a Bolt listener that acks the same card, prebuilt: the baseline (HTTP, Bolt, the GIL, the load);
- ``ack path``: the real /train ack (parse, plan, price, forecast, card);
- ``store reads``: the same with the history and recipe memories off, so every ack reads the store as
  before issue 26 (two history queries a /train).

It prints ack p50/p99/max, errors and acks past 3 s for each, and p99 as a ratio to the no-op's.

    PYTHONPATH=. .venv/bin/python bench/ack.py [--requests 200] [--concurrency 50] [--launch-seconds 1.5] [--rounds 5]

The HTTP load comes from a separate process (Slack is another machine); the Socket Mode envelopes are sent
from a thread of the bot's own process (one GIL), so those figures are an upper bound. On a shared machine
the absolute figures move with the other load; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import multiprocessing
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from slack_bolt import Ack, App

from bot.serve import socket_mode_handler
from bot.slack_app import create_app
from bot.slack_chat import SlackChat
from handlers import cards
from handlers.blocks import buttons_in
from jobs.recipes import service as recipes
from jobs.store import runs
from jobs.store.runs import RunHistory
from tests.handlers.fakes import ALICE, World, make_world
from tests.support.slack_api import APP_TOKEN, BOT_TOKEN, SlackApiServer
from tests.support.slack_bot import (
    BackgroundWork,
    HttpBot,
    block_action,
    form_body,
    signed_headers,
    slash_command,
    unpaced_web_client,
)
from tests.support.slack_socket import SocketModeServer

SECRET = "bench-secret"
TEXTS = ("bert-squad spot=yes", "roberta-mnli instances=4", "distilbert-spot max_run=2h hp.learning_rate=3e-5")
HISTORY_RUNS = 600  # completed runs in the store: a team's few months
VARIANTS = ("no-op", "ack path", "store reads")


def p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(round(0.99 * len(ordered))) - 1)] if ordered else float("nan")


def report(name: str, rounds: list[list[float]], errors: int, baseline: float | None) -> float:
    """One variant's line: p50 of every ack, p99 as the median of its rounds' p99s (one round that met a
    burst of the machine's other load does not decide it), each round's p99; returns that p99."""
    pooled = sorted(value for acks in rounds for value in acks)
    if not pooled:
        print(f"  {name:12s} no successful acks, {errors} errors")
        return float("nan")
    per_round = [p99(acks) for acks in rounds if acks]
    middle = statistics.median(per_round)
    late = sum(1 for value in pooled if value > 3.0)
    ratio = f", x{middle / baseline:.2f} the no-op's" if baseline else ""
    shown = " / ".join(f"{value * 1000:.0f}" for value in per_round)
    print(f"  {name:12s} {len(pooled)} acks, p50 {statistics.median(pooled) * 1000:6.1f} ms, "
          f"p99 {middle * 1000:6.1f} ms{ratio} (rounds: {shown} ms), max {pooled[-1] * 1000:6.1f} ms, "
          f"errors {errors}, past 3 s {late}")
    return middle


# ---------------------------------------------------------------- the apps under test


def noop_app(card: dict[str, Any], world: World, *, http: bool) -> App:
    """Bolt with a /train listener that acks ``card`` as it is: what an ack costs before any of our work."""
    app = App(client=unpaced_web_client(world.settings), signing_secret=SECRET, request_verification_enabled=http,
              process_before_response=True)

    @app.command("/train")
    def listener(ack: Ack) -> None:
        ack(text=card["text"], blocks=card["blocks"], response_type="ephemeral")

    return app


def real_app(world: World, *, http: bool) -> App:
    client = unpaced_web_client(world.settings)
    return create_app(world.settings, world.services, client=client,
                      chat=SlackChat(client), http=http)


@contextlib.contextmanager
def memories(on: bool) -> Iterator[None]:
    """The history and recipe memories on (as shipped) or off (every ack reads the store, as before)."""
    saved = runs.HISTORY_MEMORY_SECONDS, recipes.LOOKUP_MEMORY_SECONDS
    if not on:
        runs.HISTORY_MEMORY_SECONDS = recipes.LOOKUP_MEMORY_SECONDS = 0.0
    try:
        yield
    finally:
        runs.HISTORY_MEMORY_SECONDS, recipes.LOOKUP_MEMORY_SECONDS = saved


def seed_history(world: World) -> None:
    """Completed runs of the presets' models on their types, so the forecasts' history queries find rows."""
    history = RunHistory(world.store, world.clock)
    for index in range(HISTORY_RUNS):
        lineage = world.jobs.launch(TEXTS[index % len(TEXTS)], actor=ALICE)
        history.record_completed(lineage.id, samples_per_second=40.0 + index % 7, startup_seconds=300.0,
                                 took_seconds=3600.0, took_usd=5.0)
        world.clock.advance(timedelta(minutes=5).total_seconds())


# ---------------------------------------------------------------- load


async def _post(port: int, body: str, headers: dict[str, str]) -> tuple[int, float]:
    started = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    data = body.encode()
    writer.write(f"POST /slack/events HTTP/1.1\r\nHost: bench\r\nContent-Length: {len(data)}\r\n"
                 f"Connection: close\r\n{head}\r\n".encode() + data)
    await writer.drain()
    raw = await reader.read()
    elapsed = time.perf_counter() - started
    writer.close()
    status = int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1") else 0
    return status, elapsed


async def _burst(port: int, bodies: list[str], concurrency: int) -> tuple[list[float], int]:
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    errors = 0

    async def one(body: str) -> None:
        nonlocal errors
        async with gate:
            try:
                status, elapsed = await _post(port, body, signed_headers(SECRET, body))
            except OSError:
                errors += 1
                return
        if status == 200:
            latencies.append(elapsed)
        else:
            errors += 1

    await asyncio.gather(*(one(body) for body in bodies))
    return latencies, errors


def _run_burst(port: int, bodies: list[str], concurrency: int) -> tuple[list[float], int]:
    return asyncio.run(_burst(port, bodies, concurrency))


def keep_launching(bot: HttpBot, slack: SlackApiServer, stop: threading.Event, launches: list[int]) -> None:
    """Plan-and-Launch clicks in a loop on the real app, so launches run on the slow backend during a burst."""
    while not stop.is_set():
        status, body = bot.post(slash_command("/train", "distilbert-spot"))
        value = next(b["value"] for b in buttons_in(json.loads(body)["blocks"])
                     if b["action_id"] == cards.ACTION_LAUNCH)
        bot.post(block_action(cards.ACTION_LAUNCH, value, response_url=slack.response_url()))
        launches[0] += 1
        stop.wait(0.2)


@contextlib.contextmanager
def launching(launcher: HttpBot, slack: SlackApiServer) -> Iterator[list[int]]:
    stop, launches = threading.Event(), [0]
    thread = threading.Thread(target=keep_launching, args=(launcher, slack, stop, launches), daemon=True)
    thread.start()
    time.sleep(0.5)
    try:
        yield launches
    finally:
        stop.set()
        thread.join()


def bodies(args: argparse.Namespace) -> list[dict[str, str]]:
    return [slash_command("/train", TEXTS[i % len(TEXTS)], user=f"U{i:04d}") for i in range(args.requests)]


def http_burst(app: App, pool: Any, args: argparse.Namespace) -> tuple[list[float], int]:
    bot = HttpBot(app, secret=SECRET).start()
    try:
        forms = [form_body(fields) for fields in bodies(args)]
        pool.apply(_run_burst, (bot.port, forms[:3], 1))  # warm: auth.test, the channel's reach
        return pool.apply(_run_burst, (bot.port, forms, args.concurrency))
    finally:
        bot.stop()


def _release_on_ack(socket: SocketModeServer, envelope: str, gate: threading.Semaphore) -> None:
    socket.wait_ack(envelope, timeout=60)
    gate.release()


def socket_burst(app: App, world: World, slack: SlackApiServer, args: argparse.Namespace) -> tuple[list[float], int]:
    socket = SocketModeServer().start()
    slack.socket_url = socket.url
    handler = socket_mode_handler(app, APP_TOKEN, unpaced_web_client(world.settings))
    handler.connect()
    socket.wait_connected()
    try:
        for fields in bodies(args)[:3]:
            socket.wait_ack(socket.send("slash_commands", fields))
        gate = threading.Semaphore(args.concurrency)
        ids: list[str] = []
        for fields in bodies(args):
            gate.acquire()
            envelope = socket.send("slash_commands", fields)
            ids.append(envelope)
            threading.Thread(target=_release_on_ack, args=(socket, envelope, gate), daemon=True).start()
        acks = [socket.wait_ack(envelope, timeout=60) for envelope in ids]
    finally:
        handler.client.auto_reconnect_enabled = False
        socket.stop()
        handler.close()
    latencies = [a.acked_at - a.sent_at for a in acks if a.payload and a.payload.get("blocks")]
    return latencies, len(ids) - len(latencies)


# ---------------------------------------------------------------- the run


def run_mode(mode: str, world: World, slack: SlackApiServer, launcher: HttpBot, pool: Any,
             args: argparse.Namespace) -> None:
    """Every variant ``args.rounds`` times, interleaved (the order turns each round, so a change in the
    machine's other load falls on all of them); each variant's acks pooled over its rounds."""
    card = json.loads(launcher.post(slash_command("/train", TEXTS[0]))[1])
    burst: Callable[[App], tuple[list[float], int]]
    if mode == "HTTP":
        burst = lambda app: http_burst(app, pool, args)  # noqa: E731
    else:
        burst = lambda app: socket_burst(app, world, slack, args)  # noqa: E731
    latencies: dict[str, list[list[float]]] = {variant: [] for variant in VARIANTS}
    errors = dict.fromkeys(VARIANTS, 0)
    walls = dict.fromkeys(VARIANTS, 0.0)
    for round_ in range(args.rounds):
        order = VARIANTS[round_ % len(VARIANTS):] + VARIANTS[:round_ % len(VARIANTS)]
        for variant in order:
            with memories(on=variant != "store reads"), launching(launcher, slack):
                app = noop_app(card, world, http=mode == "HTTP") if variant == "no-op" \
                    else real_app(world, http=mode == "HTTP")
                started = time.perf_counter()
                acked, failed = burst(app)
                walls[variant] += time.perf_counter() - started
            latencies[variant].append(acked)
            errors[variant] += failed
    total = args.requests * args.rounds
    print(f"{mode} /train acks ({args.rounds} rounds of {args.requests} requests, {args.concurrency} at a time, "
          f"launches in flight):")
    baseline: float | None = None
    for variant in VARIANTS:
        middle = report(variant, latencies[variant], errors[variant], baseline)
        baseline = baseline or middle
        print(f"  {'':12s} {total / walls[variant]:.0f} requests/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--launch-seconds", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=5, help="each variant this many times, interleaved")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory() as home, SlackApiServer() as slack, \
            multiprocessing.get_context("spawn").Pool(1) as pool:
        work = BackgroundWork(workers=4)
        world = make_world(Path(home), run_later=work, slack_bot_token=BOT_TOKEN, slack_signing_secret=SECRET,
                           slack_app_token=APP_TOKEN, slack_api_url=slack.base_url)
        seed_history(world)
        world.backend.on_launch = lambda name: time.sleep(args.launch_seconds)
        launcher = HttpBot(real_app(world, http=True), secret=SECRET).start()
        try:
            run_mode("HTTP", world, slack, launcher, pool, args)
            run_mode("Socket Mode", world, slack, launcher, pool, args)
        finally:
            launcher.stop()
            work.settle(timeout=300)
            work.shutdown()
        print(f"afterwards: {len(world.backend.created) - HISTORY_RUNS} launched during the bench, each once")


if __name__ == "__main__":
    main()

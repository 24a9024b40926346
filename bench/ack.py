"""How fast the bot acknowledges Slack, while launches run on a slow backend.

200 signed `/train` requests, 50 at a time, against the HTTP server (uvicorn + bot.serve.SlackHttpApp, the
real Bolt app) while Launch clicks keep the background executor busy with launches on a backend that takes
LAUNCH_SECONDS each (the scripted backend with a delay: the SDK's upload and CreateTrainingJob); then the same
through Socket Mode envelopes on a local websocket. Prints ack p50/p99/max, errors and acks past 3 s.

    PYTHONPATH=. .venv/bin/python bench/ack.py [--requests 200] [--concurrency 50] [--launch-seconds 1.5]

The HTTP load comes from a separate process (Slack is another machine); the Socket Mode envelopes are sent
from a thread of the bot's own process (one GIL), so those figures are an upper bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bot.serve import socket_mode_handler
from bot.slack_app import create_app
from bot.slack_chat import ChannelPacer, SlackChat, make_web_client
from handlers import cards
from handlers.blocks import buttons_in
from tests.handlers.fakes import make_world
from tests.support.slack_api import APP_TOKEN, BOT_TOKEN, SlackApiServer
from tests.support.slack_bot import (
    BackgroundWork,
    HttpBot,
    block_action,
    form_body,
    signed_headers,
    slash_command,
)
from tests.support.slack_socket import SocketModeServer

SECRET = "bench-secret"
TEXTS = ("bert-squad spot=yes", "roberta-mnli instances=4", "distilbert-spot max_run=2h hp.learning_rate=3e-5")


def report(name: str, latencies: list[float], errors: int, total: int) -> None:
    ordered = sorted(latencies)
    if not ordered:
        print(f"{name}: no successful acks, {errors} errors")
        return
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * len(ordered))) - 1)]
    late = sum(1 for value in ordered if value > 3.0)
    print(f"{name}: {total} requests, p50 {statistics.median(ordered) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
          f"max {ordered[-1] * 1000:.1f} ms, errors {errors}, acks past 3 s {late}")


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


def _client_process(port: int, bodies: list[str], concurrency: int) -> tuple[list[float], int]:
    """The load comes from another process, as Slack is another machine: the bot's GIL is its own."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        pool.apply(_run_burst, (port, bodies[:1], 1))  # warm the client process up
        return pool.apply(_run_burst, (port, bodies, concurrency))


def keep_launching(bot: HttpBot, slack: SlackApiServer, stop: threading.Event, launches: list[int]) -> None:
    """Plan-and-Launch clicks in a loop, so launches run on the slow backend during the burst."""
    while not stop.is_set():
        status, body = bot.post(slash_command("/train", "distilbert-spot"))
        value = next(b["value"] for b in buttons_in(json.loads(body)["blocks"])
                     if b["action_id"] == cards.ACTION_LAUNCH)
        bot.post(block_action(cards.ACTION_LAUNCH, value, response_url=slack.response_url()))
        launches[0] += 1
        stop.wait(0.2)


def bench_http(home: Path, slack: SlackApiServer, args: argparse.Namespace) -> None:
    work = BackgroundWork(workers=4)
    world = make_world(home / "http", run_later=work, slack_bot_token=BOT_TOKEN, slack_signing_secret=SECRET,
                       slack_api_url=slack.base_url)
    world.backend.on_launch = lambda name: time.sleep(args.launch_seconds)
    client = make_web_client(world.settings)
    app = create_app(world.settings, world.services, client=client,
                     chat=SlackChat(client, pacer=ChannelPacer(0.0)), http=True)
    bot = HttpBot(app, secret=SECRET).start()
    stop, launches = threading.Event(), [0]
    launcher = threading.Thread(target=keep_launching, args=(bot, slack, stop, launches), daemon=True)
    launcher.start()
    time.sleep(0.5)
    bodies = [form_body(slash_command("/train", TEXTS[i % len(TEXTS)], user=f"U{i:04d}"))
              for i in range(args.requests)]
    started = time.perf_counter()
    latencies, errors = _client_process(bot.port, bodies, args.concurrency)
    wall = time.perf_counter() - started
    stop.set()
    launcher.join()
    report("HTTP /train acks", latencies, errors, len(bodies))
    print(f"  {len(bodies) / wall:.0f} requests/s; {launches[0]} launches clicked during the burst, "
          f"{len(world.backend.created)} done by its end ({args.launch_seconds:g} s each)")
    bot.stop()
    work.settle(timeout=120)
    work.shutdown()
    print(f"  afterwards: {len(world.backend.created)} launched, each once")


def bench_socket_mode(home: Path, slack: SlackApiServer, args: argparse.Namespace) -> None:
    socket = SocketModeServer().start()
    slack.socket_url = socket.url
    work = BackgroundWork(workers=4)
    world = make_world(home / "socket", run_later=work, slack_bot_token=BOT_TOKEN, slack_app_token=APP_TOKEN,
                       slack_api_url=slack.base_url)
    world.backend.on_launch = lambda name: time.sleep(args.launch_seconds)
    client = make_web_client(world.settings)
    app = create_app(world.settings, world.services, client=client,
                     chat=SlackChat(client, pacer=ChannelPacer(0.0)), http=False)
    handler = socket_mode_handler(app, APP_TOKEN, client)
    handler.connect()
    socket.wait_connected()
    launches = _socket_launches(socket, slack, 20)
    gate = threading.Semaphore(args.concurrency)
    ids: list[str] = []
    done = threading.Event()

    def send_all() -> None:
        for i in range(args.requests):
            gate.acquire()
            ids.append(socket.send("slash_commands", slash_command("/train", TEXTS[i % len(TEXTS)],
                                                                   user=f"U{i:04d}")))
        done.set()

    def release_on_ack() -> None:
        seen: set[str] = set()
        while not (done.is_set() and len(seen) == len(ids)):
            for envelope in list(ids):
                if envelope not in seen and envelope in socket.acks:
                    seen.add(envelope)
                    gate.release()
            time.sleep(0.001)

    releaser = threading.Thread(target=release_on_ack, daemon=True)
    releaser.start()
    send_all()
    releaser.join(timeout=60)
    acks = [socket.acks.get(envelope) for envelope in ids]
    latencies = [a.acked_at - a.sent_at for a in acks if a is not None and a.payload and a.payload.get("blocks")]
    report("Socket Mode /train acks", latencies, len(ids) - len(latencies), len(ids))
    print(f"  {launches} launches clicked before the burst, {len(world.backend.created)} done by its end")
    handler.client.auto_reconnect_enabled = False
    socket.stop()
    handler.close()
    work.settle(timeout=120)
    work.shutdown()
    print(f"  afterwards: {len(world.backend.created)} launched, each once")


def _socket_launches(socket: SocketModeServer, slack: SlackApiServer, count: int) -> int:
    for _ in range(count):
        ack = socket.wait_ack(socket.send("slash_commands", slash_command("/train", "distilbert-spot")))
        payload: dict[str, Any] = ack.payload or {}
        value = next(b["value"] for b in buttons_in(payload["blocks"]) if b["action_id"] == cards.ACTION_LAUNCH)
        socket.send("interactive", block_action(cards.ACTION_LAUNCH, value, response_url=slack.response_url()))
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--launch-seconds", type=float, default=1.5)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory() as home:
        slack = SlackApiServer().start()
        try:
            bench_http(Path(home), slack, args)
            bench_socket_mode(Path(home), slack, args)
        finally:
            slack.stop()


if __name__ == "__main__":
    main()

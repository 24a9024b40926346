"""What a flood of half-sent requests costs the HTTP server, with the request guard's limits and without them.

The server is `bot.serve.http_server(SlackHttpApp(...))` in a process of its own (a Bolt app with one slash
command that acks at once). Each variant: /healthz and a signed command timed with no load (the baseline),
then ``--sockets`` connections each send headers that look signed, a declared 1 MB body and ``--sent`` KiB of
it, and stop; /healthz and the signed command are timed again while they hang, and the server's resident memory
is read before and during the flood.

- ``limits on``: the shipped bot/request_guard.py limits;
- ``limits off``: the same code with limits no attacker reaches (no deadlines, no slots, no connection cap):
  what the bot did before issue 34 item 5.

It prints, per variant: the server's memory grown by the flood (MiB, during it and ``--hold`` seconds later:
freed memory is not always given back to the system), the stalled connections it still held then, and /healthz and command p50 during the flood as a ratio to the baseline of the same run.

    PYTHONPATH=. .venv/bin/python bench/slow_requests.py [--sockets 600] [--sent 256] [--hold 8]

Measured on the 2-core shared machine (2026-12-04), 600 sockets with 950 KiB sent (the issue's attack): limits off
+590 MiB, 600/600 held after 8 s; limits on +40 MiB during the flood, 0/600 held; /healthz and the command's p50
within x0.8-x1.1 of their baselines in both.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import socket
import statistics
import time
from pathlib import Path
from urllib.parse import urlencode

from bot.request_guard import RequestLimits

SECRET = "bench-secret"
UNLIMITED = RequestLimits(body_seconds=1e9, header_seconds=1e9, max_reading=10**9, max_reading_bytes=10**15,
                          max_connections=10**9, concurrency_backstop=10**9)


def serve(port: int, limits: RequestLimits) -> None:
    from slack_bolt import App
    from slack_bolt.authorization import AuthorizeResult

    from bot.serve import SlackHttpApp, http_server

    # No Slack to ask who the bot is (auth.test): the answer, given.
    app = App(signing_secret=SECRET, authorize=lambda **_: AuthorizeResult(
        enterprise_id=None, team_id="T1", bot_token="xoxb-bench", bot_user_id="UBENCH", bot_id="BBENCH"))
    app.command("/noop")(lambda ack: ack("ok"))
    http_server(SlackHttpApp(app, signing_secret=SECRET, limits=limits), host="127.0.0.1", port=port).run()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def timed(port: int, *, signed: bool) -> float:
    from slack_sdk.signature import SignatureVerifier

    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    if signed:
        body = urlencode({"command": "/noop", "text": "", "user_id": "U1", "team_id": "T1", "channel_id": "C1",
                          "response_url": "http://127.0.0.1:9/r", "trigger_id": "t"})
        stamp = str(int(time.time()))
        headers = {"Content-Type": "application/x-www-form-urlencoded", "X-Slack-Request-Timestamp": stamp,
                   "X-Slack-Signature": SignatureVerifier(SECRET).generate_signature(timestamp=stamp, body=body)}
        connection.request("POST", "/slack/events", body=body, headers=headers)
    else:
        connection.request("GET", "/healthz")
    response = connection.getresponse()
    response.read()
    connection.close()
    assert response.status == 200, response.status
    return time.perf_counter() - started


def p50(port: int, *, signed: bool, count: int = 20) -> float:
    return statistics.median(timed(port, signed=signed) for _ in range(count))


def stalled(port: int, sent_kib: int) -> socket.socket:
    head = ("POST /slack/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            f"X-Slack-Request-Timestamp: {int(time.time())}\r\nX-Slack-Signature: v0={'0' * 64}\r\n"
            "Content-Length: 1000000\r\n\r\n").encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(head + b"x" * (sent_kib * 1024))
    return sock


def still_open(sockets: list[socket.socket]) -> int:
    """Connections the server neither answered nor closed: nothing to read on them yet."""
    held = 0
    for sock in sockets:
        sock.setblocking(False)
        try:
            sock.recv(1, socket.MSG_PEEK)  # an answer or the end: the server let it go
        except BlockingIOError:
            held += 1
        except OSError:
            pass  # reset: let go too
    return held


def variant(name: str, limits: RequestLimits, args: argparse.Namespace) -> None:
    port = free_port()
    process = multiprocessing.get_context("spawn").Process(target=serve, args=(port, limits), daemon=True)
    process.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                timed(port, signed=False)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        base_health, base_command = p50(port, signed=False), p50(port, signed=True)
        before = rss_mib(process.pid or 0)
        sockets = [stalled(port, args.sent) for _ in range(args.sockets)]
        time.sleep(1)  # the server has read what was sent
        grown = rss_mib(process.pid or 0) - before
        health, command = p50(port, signed=False), p50(port, signed=True)
        time.sleep(args.hold)
        held = still_open(sockets)
        after = rss_mib(process.pid or 0) - before
        for sock in sockets:
            sock.close()
        print(f"{name:10}  memory +{grown:6.1f} MiB (+{after:6.1f} after {args.hold:g} s)  "
              f"held after {args.hold:g} s: {held:4d}/{args.sockets}  "
              f"/healthz p50 x{health / base_health:5.2f}  command p50 x{command / base_command:5.2f}  "
              f"(baseline {base_health * 1000:.1f} / {base_command * 1000:.1f} ms)")
    finally:
        process.terminate()
        process.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, default=600)
    parser.add_argument("--sent", type=int, default=256, help="KiB of each 1 MB body sent before it stops")
    parser.add_argument("--hold", type=float, default=8.0, help="seconds after which held connections are counted")
    args = parser.parse_args()
    if args.sent * 1024 >= 1_000_000:
        parser.error("--sent must stay under the declared 1,000,000 bytes (at most 976 KiB)")
    variant("limits off", UNLIMITED, args)
    variant("limits on", RequestLimits(), args)


if __name__ == "__main__":
    main()

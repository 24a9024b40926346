"""A steady stream of `/invocations` (what `/predict` sends) against an endpoint's server on loopback: each
thread sends one request after another on a kept-alive connection until stopped, and every answer is kept
with its times and the config that gave it (X-Trainbot-Config). Used by the promotion tests and
bench/promote.py, which both watch what a swap does to requests in flight."""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

QUESTION: dict[str, Any] = {"inputs": {"question": "What is the city?", "context": "the city is kalo ."}}


@dataclass(frozen=True)
class Answer:
    started: float  # time.monotonic()
    ended: float
    status: int
    config: str

    @property
    def seconds(self) -> float:
        return self.ended - self.started

    @property
    def ok(self) -> bool:
        return self.status == 200


class InvocationStream:
    """``threads`` kept-alive clients; ``answers`` holds every HTTP answer, ``errors`` every failed connection."""

    def __init__(self, port: int, threads: int = 3, body: dict[str, Any] = QUESTION) -> None:
        self.port = port
        self.answers: list[Answer] = []
        self.errors: list[str] = []
        self._body = json.dumps(body).encode()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> InvocationStream:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def count(self) -> int:
        with self._lock:
            return len(self.answers)

    def failures(self) -> list[str]:
        """Failed connections and answers other than 200, in words."""
        with self._lock:
            return self.errors + [f"HTTP {a.status}" for a in self.answers if not a.ok]

    def _run(self) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                connection.request("POST", "/invocations", body=self._body,
                                   headers={"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                answer = Answer(started, time.monotonic(), response.status, response.getheader("X-Trainbot-Config", ""))
            except (OSError, http.client.HTTPException) as exc:
                with self._lock:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                continue
            with self._lock:
                self.answers.append(answer)

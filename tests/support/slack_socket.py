"""Slack's side of Socket Mode on loopback: a websocket server that says hello, delivers envelopes and
records the acks (with their timing). `SlackApiServer.socket_url` points apps.connections.open at it."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve

from tests.support.waiting import GENEROUS_SECONDS


@dataclass
class Ack:
    envelope_id: str
    payload: dict[str, Any] | None
    sent_at: float
    acked_at: float


class SocketModeServer:
    """A websocket server that plays Slack's Socket Mode side: hello, envelopes out, acks back."""

    def __init__(self) -> None:
        self.acks: dict[str, Ack] = {}
        self._sent: dict[str, float] = {}
        self._lock = threading.Condition()
        self._connection: ServerConnection | None = None
        self._server = serve(self._session, "127.0.0.1", 0)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-socket-mode", daemon=True
        )

    @property
    def url(self) -> str:
        port = self._server.socket.getsockname()[1]
        return f"ws://127.0.0.1:{port}/link"

    def start(self) -> SocketModeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()

    def wait_connected(self, timeout: float = GENEROUS_SECONDS) -> None:
        with self._lock:
            if not self._lock.wait_for(lambda: self._connection is not None, timeout):
                raise AssertionError("the Socket Mode client never connected")

    def _session(self, connection: ServerConnection) -> None:
        connection.send(
            json.dumps({"type": "hello", "num_connections": 1, "connection_info": {"app_id": "A0TEST"}})
        )
        with self._lock:
            self._connection = connection
            self._lock.notify_all()
        try:
            self._receive(connection)
        except ConnectionClosed:
            return

    def _receive(self, connection: ServerConnection) -> None:
        for raw in connection:
            now = time.monotonic()
            data = json.loads(raw)
            envelope_id = data.get("envelope_id")
            if not envelope_id:
                continue
            with self._lock:
                sent = self._sent.get(envelope_id, now)
                self.acks[envelope_id] = Ack(envelope_id, data.get("payload"), sent, now)
                self._lock.notify_all()

    def send(self, kind: str, payload: dict[str, Any], *, retry_attempt: int = 0,
             retry_reason: str = "timeout") -> str:
        """Deliver one envelope (`slash_commands`, `interactive`, `events_api`); returns its id."""
        envelope_id = uuid.uuid4().hex
        envelope = {
            "envelope_id": envelope_id,
            "type": kind,
            "payload": payload,
            "accepts_response_payload": kind != "events_api",
            "retry_attempt": retry_attempt,
            "retry_reason": retry_reason if retry_attempt else "",
        }
        with self._lock:
            connection = self._connection
            self._sent[envelope_id] = time.monotonic()
        assert connection is not None, "no Socket Mode client is connected"
        connection.send(json.dumps(envelope))
        return envelope_id

    def wait_ack(self, envelope_id: str, timeout: float = GENEROUS_SECONDS) -> Ack:
        with self._lock:
            if not self._lock.wait_for(lambda: envelope_id in self.acks, timeout):
                raise AssertionError(f"envelope {envelope_id} was never acknowledged")
            return self.acks[envelope_id]

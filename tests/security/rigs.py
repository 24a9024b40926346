"""What the security tests share: the bot as `trainbot serve --http` builds it (bot.wiring.build_runtime, then
bot.serve.build_slack) behind real HTTP, wired to the loopback Slack API; wheels and tarballs made by hand."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.serve import SlackParts, build_slack
from bot.slack_chat import SlackChat
from bot.wiring import Runtime
from handlers import cards
from handlers.blocks import buttons_in
from tests.support.slack_api import SlackApiServer
from tests.support.slack_bot import HttpBot, block_action, slash_command, unpaced_web_client


@dataclass
class ServedBot:
    """The Bolt app over signed HTTP on a runtime, and the Slack it talks to."""

    slack: SlackApiServer
    runtime: Runtime
    parts: SlackParts
    bot: HttpBot

    @classmethod
    def start(cls, runtime: Runtime, slack: SlackApiServer, *, secret: str) -> ServedBot:
        client = unpaced_web_client(runtime.settings)
        parts = build_slack(runtime, http=True, client=client, chat=SlackChat(client))
        return cls(slack, runtime, parts, HttpBot(parts.app, secret=secret).start())

    def stop(self) -> None:
        self.bot.stop()
        self.runtime.shutdown()

    def command(self, command: str, text: str, *, user: str = "U_ALICE", response: str = "r1") -> dict[str, Any]:
        status, body = self.bot.post(slash_command(command, text, user=user,
                                                   response_url=self.slack.response_url(response)))
        assert status == 200, body
        return json.loads(body) if body else {}

    def press(self, action_id: str, value: str, *, user: str = "U_ALICE") -> None:
        status, body = self.bot.post(block_action(action_id, value, user=user,
                                                  response_url=self.slack.response_url("press")))
        assert status == 200, body

    def launch_card(self, text: str, *, user: str = "U_ALICE") -> list[dict[str, Any]]:
        """/train ``text``'s plan card: its blocks, from the ack, or after it ("Reading ..." own code whose
        commit is not fetched yet) through the command's response_url."""
        answered = len(self.slack.calls_to("response"))
        ack = self.command("/train", text, user=user)
        if ack.get("blocks"):
            return list(ack["blocks"])
        assert ack.get("text", "").startswith(("Reading ", "Resolving ")), ack
        calls = self.slack.wait_calls("response", answered + 1, timeout=120)
        blocks = calls[answered].params.get("blocks")
        assert blocks, calls[answered].params
        return list(blocks)

    def calls_text(self) -> str:
        """Everything the bot sent Slack (uploaded files too), as one string."""
        return json.dumps([call.params for call in self.slack.calls], default=_text)

    def wait_posted(self, text: str, *, timeout: float = 30) -> str:
        """Everything sent to Slack once ``text`` is among it (a message, a response or an uploaded file)."""
        self.slack.wait_for(lambda calls: text in json.dumps([c.params for c in calls], default=_text),
                            timeout=timeout)
        return self.calls_text()


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def launch_value(blocks: list[dict[str, Any]]) -> str:
    return next(b["value"] for b in buttons_in(blocks) if b["action_id"] == cards.ACTION_LAUNCH)


def wait_until(check: Callable[[], object], *, timeout: float, every: float = 0.2, what: str = "it") -> Any:
    """``check()``'s first truthy answer; an AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(every)


def wheel(name: str, module_text: str, version: str = "1.0") -> tuple[str, bytes]:
    """A pure-Python wheel (file name, bytes) holding package ``name``: pip installs it with no index."""
    files = {
        f"{name}/__init__.py": module_text.encode(),
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                                            b"Tag: py3-none-any\n",
    }
    record = [f"{path},sha256={_digest(data)},{len(data)}" for path, data in files.items()]
    files[f"{name}-{version}.dist-info/RECORD"] = "\n".join([*record, f"{name}-{version}.dist-info/RECORD,,", ""]).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return f"{name}-{version}-py3-none-any.whl", buffer.getvalue()


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()

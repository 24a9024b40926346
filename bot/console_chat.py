"""The console's chat surface: the Chat port (handlers/chat.py) over a terminal.

Like Hubot's shell adapter it translates and decides nothing: posts become boxed cards or thread
replies indented under their card, an in-place update prints only the lines that changed, uploads are
copied under TRAINBOT_HOME with their path printed, and every message's buttons are remembered so the
person can press one by typing its label. Output from background threads (the outbox, launches) and
the prompt share one lock, so lines never interleave mid-line.
"""

from __future__ import annotations

import itertools
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from bot import console_render as render
from handlers import blocks as bk
from handlers.chat import Reply

PROMPT = "trainbot> "
#: An update that changes more than this share of a card's lines reprints the whole card.
REPRINT_SHARE = 0.5


class Screen:
    """Serialised output; in a terminal, background lines are written above the prompt, which is redrawn."""

    def __init__(self, out: TextIO, *, redraw_prompt: bool) -> None:
        self._out = out
        self._redraw = redraw_prompt
        self._lock = threading.RLock()
        self._prompt_shown = False

    def write(self, lines: list[str]) -> None:
        with self._lock:
            if self._prompt_shown and self._redraw:
                self._out.write("\r\033[K")  # clear the prompt line, print above it, redraw below
            self._out.write("".join(f"{line}\n" for line in lines))
            if self._prompt_shown and self._redraw:
                self._out.write(PROMPT + _typed_so_far())
            self._out.flush()

    def prompt(self, shown: bool) -> None:
        with self._lock:
            self._prompt_shown = shown

    @property
    def lock(self) -> threading.RLock:
        return self._lock


def _typed_so_far() -> str:
    try:
        import readline  # only where the terminal has it
    except ImportError:
        return ""
    return readline.get_line_buffer()


@dataclass(frozen=True)
class ConsoleButton:
    label: str
    action_id: str
    value: str
    confirm: str | None  # the question Slack would ask before pressing, if any


@dataclass
class Message:
    key: str  # the ts for posted messages, "e<N>" for ephemeral replies
    title: str
    lines: list[str]  # one field a line: what an update is compared with
    buttons: list[ConsoleButton] = field(default_factory=list)
    ephemeral: bool = False


class ConsoleChat:
    """The Chat port on a Screen. Messages and their buttons are kept for `press` by label."""

    def __init__(self, screen: Screen, uploads: Path, *, user: str) -> None:
        self.screen = screen
        self._uploads = uploads
        self._user = user
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._messages: dict[str, Message] = {}
        self._order: list[str] = []  # message keys, the most recently drawn last

    # -- the Chat port ---------------------------------------------------------------------------

    def post(self, channel: str, text: str, *, blocks: list[dict] | None = None,
             thread_ts: str | None = None) -> str:
        lines = render.message_lines(text, blocks)
        ts = f"{next(self._counter)}.000100"
        if thread_ts is not None:
            self.screen.write(render.thread_reply(self._title(thread_ts), lines))
        else:
            self._remember(Message(ts, render.title_of(lines, ts), _logical(text, blocks), _buttons(blocks)))
            self.screen.write(render.card(lines) if blocks else lines)
        return ts

    def update(self, channel: str, ts: str, text: str, *, blocks: list[dict] | None = None) -> None:
        logical = _logical(text, blocks)
        with self._lock:
            old = self._messages.get(ts)
        self._remember(Message(ts, render.title_of(logical, ts), logical, _buttons(blocks)))
        self.screen.write(_update_view(old, logical, render.message_lines(text, blocks)))

    def post_ephemeral(self, channel: str, user: str, text: str, *, blocks: list[dict] | None = None) -> None:
        self.show(Reply(text=text, blocks=list(blocks or [])))

    def dm(self, user: str, text: str, *, blocks: list[dict] | None = None) -> None:
        lines = render.message_lines(text, blocks)
        self.screen.write([f"✉ direct message to {user}: {lines[0]}", *(f"  {line}" for line in lines[1:])])

    def upload_file(self, channel: str, path: Path, *, title: str, thread_ts: str | None = None) -> None:
        saved = self._save_upload(path)
        line = [f"{title}: saved {saved}"]
        self.screen.write(render.thread_reply(self._title(thread_ts), line) if thread_ts else line)

    # -- for the console -------------------------------------------------------------------------

    def show(self, reply: Reply, *, replaces: str | None = None) -> None:
        """A handler's answer. It replaces the ephemeral card it came from, as Slack's respond() does."""
        if replaces is not None:
            self.retire(replaces)
        lines = render.message_lines(reply.text, reply.blocks)
        buttons = _buttons(reply.blocks)
        if buttons:
            key = f"e{next(self._counter)}"
            self._remember(Message(key, render.title_of(lines, key), _logical(reply.text, reply.blocks), buttons,
                                   ephemeral=True))
        boxed = reply.blocks and (buttons or reply.blocks[0].get("type") == "header")
        self.screen.write(render.card(lines) if boxed else lines)

    def say(self, *lines: str) -> None:
        self.screen.write(list(lines))

    def find(self, label: str, target: str = "") -> tuple[Message, ConsoleButton] | None:
        """The newest message with a button labelled ``label`` (and, if given, naming ``target``)."""
        wanted = label.strip().lower()
        with self._lock:
            candidates = [self._messages[key] for key in reversed(self._order)]
        for message in candidates:
            for button in message.buttons:
                if button.label.lower() != wanted:
                    continue
                if not target or target in message.title or target in button.value:
                    return message, button
        return None

    def labels(self) -> list[str]:
        """The labels that can be pressed now, newest card first, each once."""
        with self._lock:
            seen: dict[str, None] = {}
            for key in reversed(self._order):
                for button in self._messages[key].buttons:
                    seen.setdefault(button.label.lower(), None)
        return list(seen)

    def retire(self, key: str) -> None:
        """Its buttons can no longer be pressed (the card was answered or replaced)."""
        with self._lock:
            message = self._messages.get(key)
            if message is not None:
                message.buttons = []

    # -- internals -------------------------------------------------------------------------------

    def _remember(self, message: Message) -> None:
        with self._lock:
            self._messages[message.key] = message
            if message.key in self._order:
                self._order.remove(message.key)
            self._order.append(message.key)

    def _title(self, ts: str | None) -> str:
        with self._lock:
            message = self._messages.get(ts or "")
        return message.title if message else "thread"

    def _save_upload(self, path: Path) -> Path:
        # Where the file already lies under TRAINBOT_HOME it is printed as is; otherwise it is copied there.
        home = self._uploads.parent.resolve()
        source = path.resolve()
        if home in source.parents:
            return source
        self._uploads.mkdir(parents=True, exist_ok=True)
        target = self._uploads / path.name
        shutil.copyfile(source, target)
        return target


def _buttons(blocks: list[dict[str, Any]] | None) -> list[ConsoleButton]:
    return [
        ConsoleButton(
            label=str(element["text"]["text"]),
            action_id=str(element.get("action_id", "")),
            value=str(element.get("value", "")),
            confirm=_confirm_text(element.get("confirm")),
        )
        for element in bk.buttons_in(blocks or [])
        if not element.get("url")  # link buttons open a page; nothing to press here
    ]


def _confirm_text(confirm: Any) -> str | None:
    if not isinstance(confirm, dict):
        return None
    title = str((confirm.get("title") or {}).get("text", ""))
    text = str((confirm.get("text") or {}).get("text", ""))
    return " ".join(part for part in (title, text) if part) or None


def _logical(text: str, blocks: list[dict[str, Any]] | None) -> list[str]:
    return render.message_lines(text, blocks, columns=False)


def _update_view(old: Message | None, logical: list[str], lines: list[str]) -> list[str]:
    """What an in-place update prints: the whole card when it is new or mostly changed, else the changed lines."""
    if old is None:
        return render.card(lines)
    changed = render.changed_lines(old.lines, logical)
    if not changed:
        return []
    if len(changed) > REPRINT_SHARE * len(logical) or logical[0] != old.lines[0]:
        return render.card(lines)
    title = render.title_of(logical, old.key)
    return [f"↻ {title}: {changed[0]}", *(f"  {' ' * len(title)}  {line}" for line in changed[1:])]

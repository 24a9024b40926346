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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from bot import console_render as render
from bot.console_cards import CardDeck, ConsoleButton, NotPressed, Press
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
        self._prompt = PROMPT

    def write(self, lines: list[str]) -> None:
        with self._lock:
            if self._prompt_shown and self._redraw:
                self._out.write("\r\033[K")  # clear the prompt line, print above it, redraw below
            self._out.write("".join(f"{line}\n" for line in lines))
            if self._prompt_shown and self._redraw:
                self._out.write(self._prompt + _typed_so_far())
            self._out.flush()

    def prompt(self, shown: bool, text: str = PROMPT) -> None:
        with self._lock:
            self._prompt_shown = shown
            self._prompt = text

    @property
    def lock(self) -> threading.RLock:
        return self._lock


def _typed_so_far() -> str:
    try:
        import readline  # only where the terminal has it
    except ImportError:
        return ""
    return readline.get_line_buffer()


@dataclass
class Message:
    key: str  # the ts for posted messages, "e<N>" for ephemeral replies
    title: str
    lines: list[str]  # one field a line: what an update is compared with


class ConsoleChat:
    """The Chat port on a Screen. Messages are kept for their in-place updates, their buttons in a CardDeck
    for a press by label (bot/console_cards.py)."""

    def __init__(self, screen: Screen, uploads: Path, *, user: str) -> None:
        self.screen = screen
        self._uploads = uploads
        self._user = user
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._messages: dict[str, Message] = {}
        self.cards = CardDeck()

    # -- the Chat port ---------------------------------------------------------------------------

    def post(self, channel: str, text: str, *, blocks: list[dict] | None = None,
             thread_ts: str | None = None) -> str:
        ts = f"{next(self._counter)}.000100"
        handle = self._card(ts, text, blocks, ephemeral=False)
        lines = render.message_lines(text, blocks, handle=handle)
        if thread_ts is not None:
            self.screen.write(render.thread_reply(self._title(thread_ts), lines))
        else:
            self._remember(Message(ts, render.title_of(lines, ts), _logical(text, blocks, handle)))
            self.screen.write(render.card(lines) if blocks else lines)
        return ts

    def update(self, channel: str, ts: str, text: str, *, blocks: list[dict] | None = None) -> None:
        handle = self._card(ts, text, blocks, ephemeral=False)
        logical = _logical(text, blocks, handle)
        with self._lock:
            old = self._messages.get(ts)
        self._remember(Message(ts, render.title_of(logical, ts), logical))
        self.screen.write(_update_view(old, logical, render.message_lines(text, blocks, handle=handle)))

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

    def show(self, reply: Reply, *, replaces: str | None = None, answered_by: str | None = None) -> None:
        """A handler's answer. It replaces the ephemeral card it came from, as Slack's respond() does."""
        if replaces is not None:
            self.retire(replaces, answered_by=answered_by)
        key = f"e{next(self._counter)}"
        handle = self._card(key, reply.text, reply.blocks, ephemeral=True)
        lines = render.message_lines(reply.text, reply.blocks, handle=handle)
        boxed = reply.blocks and (handle or reply.blocks[0].get("type") == "header")
        self.screen.write(render.card(lines) if boxed else lines)

    def say(self, *lines: str) -> None:
        self.screen.write(list(lines))

    def find(self, label: str, target: str = "") -> Press | NotPressed | None:
        """What typing ``label`` (naming ``target``) presses: bot/console_cards.py."""
        return self.cards.find(label, target)

    def labels(self) -> list[str]:
        """The labels the newest card can be pressed by now."""
        return self.cards.labels()

    def retire(self, key: str, *, answered_by: str | None = None) -> None:
        """Its buttons can no longer be pressed (the card was answered or replaced)."""
        self.cards.retire(key, answered_by=answered_by)

    # -- internals -------------------------------------------------------------------------------

    def _card(self, key: str, text: str, blocks: list[dict[str, Any]] | None, *, ephemeral: bool) -> str | None:
        """Its buttons remembered for a press by label; its handle when it is a card."""
        buttons = _buttons(blocks)
        if not buttons and self.cards.handle_of(key) is None:
            return None
        title = render.title_of(render.message_lines(text, blocks, columns=False), key)
        return self.cards.remember(key, title, buttons, ephemeral=ephemeral)

    def _remember(self, message: Message) -> None:
        with self._lock:
            self._messages[message.key] = message

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


def _logical(text: str, blocks: list[dict[str, Any]] | None, handle: str | None = None) -> list[str]:
    return render.message_lines(text, blocks, columns=False, handle=handle)


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

"""Block Kit builders that respect Slack's limits by construction.

Every builder cuts its input to the limit it feeds, so no card can be refused for size however long a
job name, spec, reason or log is. Limits (Slack's reference): 50 blocks a message and 100 a modal or Home
view, 3,000 characters a section text, 10 fields a section (2,000 each), 75 characters a button's text
(2,000 its value), 150 a header, 10 elements a context, 25 elements an actions block, 24 a modal's title and
buttons, 3,000 a view's private_metadata.

Each surface has its builder that enforces its own block limit (``message`` for messages, ``modal_view`` and
``home_view`` for views); a builder that lists things takes the ``Surface`` it draws for and shows what fits,
then says how many more there are and where to see them (``more``), rather than letting the cut note fall.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

MAX_BLOCKS = 50
MAX_MODAL_BLOCKS = 100
MAX_TEXT = 3000
MAX_FIELDS = 10
MAX_FIELD_TEXT = 2000
MAX_BUTTON_TEXT = 75
MAX_BUTTON_VALUE = 2000
MAX_HEADER = 150
MAX_CONTEXT_ELEMENTS = 10
MAX_ACTIONS = 25
MAX_MODAL_TITLE = 24
MAX_ID = 255
MAX_FALLBACK_TEXT = 3000  # the top-level `text` (notifications); Slack truncates past 40,000
MAX_PRIVATE_METADATA = 3000
MAX_INPUT = 3000  # a plain_text_input's max_length and initial_value
MAX_CONFIRM_TITLE = 100
MAX_CONFIRM_TEXT = 300
MAX_CONFIRM_BUTTON = 30
ELLIPSIS = "…"

Block = dict[str, Any]


@dataclass(frozen=True)
class Surface:
    """Where blocks are drawn, and how many Slack takes there."""

    name: str
    max_blocks: int


MESSAGE = Surface("message", MAX_BLOCKS)  # chat.postMessage, chat.update, ephemerals, a command's answer
MODAL = Surface("modal", MAX_MODAL_BLOCKS)
HOME = Surface("home", MAX_MODAL_BLOCKS)  # the App Home tab (views.publish)


def truncate(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in an ellipsis when it was cut."""
    if len(text) <= limit:
        return text
    return text[: max(limit - 1, 0)] + ELLIPSIS


def escape(text: str) -> str:
    """Make user text safe inside mrkdwn (no accidental links, mentions or formatting)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plain(text: str, limit: int = MAX_TEXT) -> dict[str, Any]:
    return {"type": "plain_text", "text": truncate(text or " ", limit), "emoji": True}


def mrkdwn(text: str, limit: int = MAX_TEXT) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": truncate(text or " ", limit)}


def header(text: str) -> Block:
    return {"type": "header", "text": plain(text, MAX_HEADER)}


def section(text: str, *, block_id: str | None = None) -> Block:
    block: Block = {"type": "section", "text": mrkdwn(text)}
    if block_id:
        block["block_id"] = truncate(block_id, MAX_ID)
    return block


def fields(pairs: Iterable[tuple[str, str]]) -> list[Block]:
    """Label/value pairs as sections of at most 10 fields each."""
    items = [mrkdwn(f"*{label}*\n{value}", MAX_FIELD_TEXT) for label, value in pairs]
    return [
        {"type": "section", "fields": items[start : start + MAX_FIELDS]}
        for start in range(0, len(items), MAX_FIELDS)
    ]


def context(*texts: str) -> Block:
    elements = [mrkdwn(text) for text in texts if text][:MAX_CONTEXT_ELEMENTS]
    return {"type": "context", "elements": elements or [mrkdwn(" ")]}


def divider() -> Block:
    return {"type": "divider"}


def button(label: str, action_id: str, value: str = "", *, style: str | None = None,
           url: str | None = None) -> Block:
    element: Block = {
        "type": "button",
        "text": plain(label, MAX_BUTTON_TEXT),
        "action_id": truncate(action_id, MAX_ID),
    }
    if value:
        if len(value) > MAX_BUTTON_VALUE:
            raise ValueError("a button value over 2,000 characters cannot round-trip; store it instead")
        element["value"] = value
    if style in ("primary", "danger"):
        element["style"] = style
    if url:
        element["url"] = url
    return element


def confirm(title: str, text: str, *, yes: str, no: str, danger: bool = True) -> Block:
    """A button's confirmation dialog (Slack asks before the press is sent): a title of 100 characters, a text
    of 300, buttons of 30."""
    dialog: Block = {"title": plain(title, MAX_CONFIRM_TITLE), "text": plain(text, MAX_CONFIRM_TEXT),
                     "confirm": plain(yes, MAX_CONFIRM_BUTTON), "deny": plain(no, MAX_CONFIRM_BUTTON)}
    if danger:
        dialog["style"] = "danger"
    return dialog


def actions(buttons: Sequence[Block], *, block_id: str | None = None) -> Block:
    block: Block = {"type": "actions", "elements": list(buttons)[:MAX_ACTIONS]}
    if block_id:
        block["block_id"] = truncate(block_id, MAX_ID)
    return block


def image(url: str, alt: str) -> Block:
    return {"type": "image", "image_url": url, "alt_text": truncate(alt, 2000)}


def code(lines: Sequence[str], *, link: str | None = None, cut_note: str = "") -> Block:
    """A log tail as a code section: the newest lines kept (escaped: Slack reads mentions and links inside
    code blocks too), older ones cut with a link to the full log."""
    body_limit = MAX_TEXT - 8 - (len(cut_note) + len(link or "") + 8 if (cut_note or link) else 0)
    kept: list[str] = []
    used = 0
    for line in reversed(list(lines)):
        line = escape(truncate(line.replace("```", "'''"), 500))
        if used + len(line) + 1 > body_limit:
            break
        kept.append(line)
        used += len(line) + 1
    kept.reverse()
    cut = len(lines) - len(kept)
    text = "```" + ("\n".join(kept) or " ") + "```"
    if cut and (cut_note or link):
        note = cut_note.format(count=cut)
        text = f"{note} <{link}|full log>\n{text}" if link else f"{note}\n{text}"
    return section(text)


def message(blocks: Sequence[Block], *, limit: int = MAX_BLOCKS, cut_note: str = "") -> list[Block]:
    """The blocks of one message, at most ``limit``: when too many, the middle is cut with a note and
    the last actions block (the card's buttons) is kept."""
    blocks = list(blocks)
    if len(blocks) <= limit:
        return blocks
    tail = [blocks[-1]] if blocks[-1].get("type") == "actions" else []
    keep = limit - 1 - len(tail)
    note = context(cut_note.format(count=len(blocks) - keep - len(tail)) if cut_note else ELLIPSIS)
    return blocks[:keep] + [note] + tail


def modal_view(blocks: Sequence[Block], *, title: str, callback_id: str, submit: str | None = None,
               close: str | None = None, private_metadata: str = "", cut_note: str = "") -> dict[str, Any]:
    """A modal within its limits: 100 blocks, a title and buttons of 24 characters, metadata of 3,000."""
    if len(private_metadata) > MAX_PRIVATE_METADATA:
        raise ValueError("a modal's private_metadata over 3,000 characters cannot round-trip; store it instead")
    view: dict[str, Any] = {"type": "modal", "callback_id": truncate(callback_id, MAX_ID),
                            "title": plain(title, MAX_MODAL_TITLE),
                            "blocks": message(blocks, limit=MODAL.max_blocks, cut_note=cut_note)}
    if submit:
        view["submit"] = plain(submit, MAX_MODAL_TITLE)
    if close:
        view["close"] = plain(close, MAX_MODAL_TITLE)
    if private_metadata:
        view["private_metadata"] = private_metadata
    return view


def home_view(blocks: Sequence[Block], *, cut_note: str = "") -> dict[str, Any]:
    """The App Home tab's view: at most 100 blocks."""
    return {"type": "home", "blocks": message(blocks, limit=HOME.max_blocks, cut_note=cut_note)}


def more(count: int, note: str) -> Block | None:
    """The line under a list that shows only part of what it has: ``note`` says how many more and where they
    are (e.g. "… and 12 more: /jobs active lists them all."); None when nothing was left out."""
    return context(note.format(count=count)) if count > 0 else None


def fallback(text: str) -> str:
    """The plain `text` that goes with blocks (notifications, screen readers)."""
    return truncate(text, MAX_FALLBACK_TEXT)


def buttons_in(blocks: Iterable[Block]) -> list[Block]:
    """Every button element of ``blocks``, in order (the console presses them by label)."""
    return [
        element
        for block in blocks
        if block.get("type") == "actions"
        for element in block.get("elements", [])
        if element.get("type") == "button"
    ]

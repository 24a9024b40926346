"""Block Kit builders that respect Slack's limits by construction.

Every builder cuts its input to the limit it feeds, so no card can be refused for size however long a
job name, spec, reason or log is. Limits (Slack's reference): 50 blocks a message, 3,000 characters a
section text, 10 fields a section (2,000 each), 75 characters a button's text (2,000 its value), 150 a
header, 10 elements a context, 25 elements an actions block, 24 a modal's title and buttons.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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
ELLIPSIS = "…"

Block = dict[str, Any]


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


def actions(buttons: Sequence[Block], *, block_id: str | None = None) -> Block:
    block: Block = {"type": "actions", "elements": list(buttons)[:MAX_ACTIONS]}
    if block_id:
        block["block_id"] = truncate(block_id, MAX_ID)
    return block


def image(url: str, alt: str) -> Block:
    return {"type": "image", "image_url": url, "alt_text": truncate(alt, 2000)}


def code(lines: Sequence[str], *, link: str | None = None, cut_note: str = "") -> Block:
    """A log tail as a code section: the newest lines kept, older ones cut with a link to the full log."""
    body_limit = MAX_TEXT - 8 - (len(cut_note) + len(link or "") + 8 if (cut_note or link) else 0)
    kept: list[str] = []
    used = 0
    for line in reversed(list(lines)):
        line = truncate(line.replace("```", "'''"), 500)
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

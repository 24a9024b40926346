"""Block Kit as readable terminal text: the console's half of what Slack draws.

Pure functions, no I/O: a message (fallback text and blocks) becomes a list of lines. Cards are drawn
in a light box with their buttons listed by label on the last line (the console presses a button when
its label is typed); thread replies are indented under their card. Slack's mrkdwn is turned into plain
text: links show their target, mentions and channels keep their sigil, the emoji the handlers use become
one symbol each, `*bold*` and `_italic_` lose their markers, and fenced code keeps its lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from jobs.lifecycle.progress import progress_words

Block = dict[str, Any]

BOX_TOP = "┌ "
BOX_SIDE = "│ "
BOX_BOTTOM = "└ "
THREAD_FIRST = "    ↳ "
THREAD_MORE = "      "
FIELD_COLUMN = 38  # two fields share a line when both fit in this many characters
CODE_INDENT = "  "
#: After a card's buttons: its short name, which an older card is pressed by (`launch c2`).
HANDLE = "  · card {handle}"

#: The emoji the handlers put in texts, as one symbol a terminal shows (tests/bot/test_console_render.py finds
#: every one the texts write); any other shortcode is left as is.
EMOJI = {
    "white_check_mark": "✔",
    "heavy_check_mark": "✔",
    "x": "✖",
    "warning": "⚠",
    "recycle": "♻",
    "pause_button": "⏸",
    "octagonal_sign": "■",
    "hourglass_flowing_sand": "⌛",
    "arrows_counterclockwise": "↻",
    "small_blue_diamond": "•",
    "information_source": "ℹ",
    "no_entry": "⛔",
    "rocket": "🚀",
    "chart_with_upwards_trend": "📈",
    "calendar": "📅",
    "moneybag": "$",
    "money_with_wings": "$",
    "chart_with_downwards_trend": "📉",
    "rewind": "⏪",
    "new": "🆕",
    "heavy_minus_sign": "➖",
    "speech_balloon": "💬",
}

_LINK = re.compile(r"<([^<>|]+)(?:\|([^<>]*))?>")
_EMOJI = re.compile(r":([a-z][a-z0-9_+-]*):")
_BOLD = re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])")
_ITALIC = re.compile(r"(?<![\w_])_(?=\S)([^_\n]+?)(?<=\S)_(?![\w_])")
_STRIKE = re.compile(r"(?<![\w~])~(?=\S)([^~\n]+?)(?<=\S)~(?![\w~])")
_FENCE = "```"


# ---------------------------------------------------------------- mrkdwn


def mrkdwn(text: str) -> str:
    """Slack mrkdwn as plain text (formatting markers dropped, links and entities resolved)."""
    text = _LINK.sub(_link, text)
    text = _EMOJI.sub(lambda m: EMOJI.get(m.group(1), m.group(0)), text)
    for pattern in (_BOLD, _ITALIC, _STRIKE):
        text = pattern.sub(r"\1", text)
    return unescape(text)


def unescape(text: str) -> str:
    """Slack's three entities as the characters Slack shows for them (in code blocks too)."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def _link(match: re.Match[str]) -> str:
    target, label = match.group(1), match.group(2)
    if target.startswith("@"):  # <@U123> a user
        return f"@{label or target[1:]}"
    if target.startswith("#"):  # <#C123|general> a channel
        return f"#{label or target[1:]}"
    if target.startswith("!date^"):  # <!date^1700000000^{time}|14:04 UTC> a moment: its fallback
        return label or ""
    if target.startswith("!"):  # <!here>, <!subteam^S123|@team>
        return f"@{(label or target[1:]).lstrip('@')}"
    if label and label != target:
        return f"{label} ({target})"
    return target


def text_lines(text: str) -> list[str]:
    """mrkdwn that may hold ``` fences: code lines indented, the rest converted."""
    lines: list[str] = []
    for number, part in enumerate(text.split(_FENCE)):
        if number % 2:  # inside a fence: verbatim, but for the entities Slack shows as characters
            lines += [CODE_INDENT + unescape(line) for line in part.strip("\n").splitlines()]
        elif part.strip():
            lines += [line.rstrip() for line in mrkdwn(part.strip("\n")).splitlines()]
    return lines


# ---------------------------------------------------------------- blocks


def block_lines(block: Block, *, columns: bool = True) -> list[str]:
    """One block as lines (an unknown block type becomes its text, if it has any)."""
    kind = block.get("type")
    if kind == "header":
        return [_text_of(block.get("text"))]
    if kind == "section":
        return _section(block, columns=columns)
    if kind == "context":
        parts = [_text_of(element) for element in block.get("elements", []) if element.get("type") != "image"]
        return [" · ".join(part for part in parts if part.strip())]
    if kind == "divider":
        return ["─" * 20]
    if kind == "actions":
        return [buttons_line(block.get("elements", []))]
    if kind == "image":
        return [f"[image: {block.get('alt_text', '')}] {block.get('image_url', '')}".rstrip()]
    if kind == "input":
        return [f"{_text_of(block.get('label'))}: ____"]
    return text_lines(_text_of(block.get("text"))) if block.get("text") else []


def _section(block: Block, *, columns: bool) -> list[str]:
    lines = text_lines(_raw(block.get("text"))) if block.get("text") else []
    lines += field_lines([_raw(field) for field in block.get("fields", [])], columns=columns)
    accessory = block.get("accessory")
    if accessory and accessory.get("type") == "button":
        lines.append(buttons_line([accessory]))
    return lines


def field_lines(fields: Sequence[str], *, columns: bool = True) -> list[str]:
    """Fields (`*Label*\\nvalue`) as `Label: value`, two to a line when both are short (and ``columns``)."""
    items = [_field(raw) for raw in fields]
    if not columns:
        return [line for item in items for line in item.splitlines()]
    lines: list[str] = []
    index = 0
    while index < len(items):
        first = items[index]
        second = items[index + 1] if index + 1 < len(items) else None
        if second is not None and len(first) < FIELD_COLUMN and len(second) <= FIELD_COLUMN and "\n" not in first + second:
            lines.append(f"{first:<{FIELD_COLUMN}}{second}".rstrip())
            index += 2
        else:
            lines += first.splitlines()
            index += 1
    return lines


def _field(raw: str) -> str:
    label, sep, value = raw.partition("\n")
    label = mrkdwn(label).strip()
    if not sep:
        return label
    value_text = "\n".join(text_lines(value)).strip()
    return f"{label}: {value_text}"


def buttons_line(elements: Iterable[Block]) -> str:
    """`[Launch] [Edit] [Cancel]`; a link button shows where it goes."""
    labels = []
    for element in elements:
        if element.get("type") != "button":
            continue
        label = _text_of(element.get("text"))
        labels.append(f"[{label} → {element['url']}]" if element.get("url") else f"[{label}]")
    return " ".join(labels)


def _raw(obj: Any) -> str:
    if isinstance(obj, dict):
        return str(obj.get("text", ""))
    return str(obj or "")


def _text_of(obj: Any) -> str:
    """A text object as one plain string (plain_text as is, mrkdwn converted)."""
    if isinstance(obj, dict) and obj.get("type") == "plain_text":
        return _EMOJI.sub(lambda m: EMOJI.get(m.group(1), m.group(0)), str(obj.get("text", "")))
    return " ".join(text_lines(_raw(obj)))


# ---------------------------------------------------------------- messages


def message_lines(text: str, blocks: Sequence[Block] | None, *, columns: bool = True,
                  handle: str | None = None) -> list[str]:
    """A message's body: its blocks, or its fallback text when it has none. Without ``columns`` every
    field has a line of its own (what an update is compared on: a longer value never moves another).
    ``handle``: the card's short name, shown after its last buttons (what names it: `launch c2`)."""
    if not blocks:
        return text_lines(text) or [""]
    lines: list[str] = []
    last_buttons = -1
    for block in blocks:
        drawn = block_lines(block, columns=columns)
        if block.get("type") == "actions" and drawn and drawn[-1]:
            last_buttons = len(lines) + len(drawn) - 1
        lines += drawn
    if handle and last_buttons >= 0:
        lines[last_buttons] += HANDLE.format(handle=handle)
    return [line for line in lines if line.strip()] or text_lines(text) or [""]


def card(lines: Sequence[str]) -> list[str]:
    """A card's lines in a box: the first line on the top edge, the last on the bottom edge."""
    if not lines:
        return []
    if len(lines) == 1:
        return [f"{BOX_TOP}{lines[0]}"]
    middle = [f"{BOX_SIDE}{line}" for line in lines[1:-1]]
    return [f"{BOX_TOP}{lines[0]}", *middle, f"{BOX_BOTTOM}{lines[-1]}"]


def thread_reply(parent: str, lines: Sequence[str]) -> list[str]:
    """A reply in a card's thread, indented under it and naming it (other output may come between)."""
    if not lines:
        return []
    first, *rest = lines
    return [f"{THREAD_FIRST}{parent} › {first}", *(f"{THREAD_MORE}{line}" for line in rest)]


def changed_lines(before: Sequence[str], after: Sequence[str]) -> list[str]:
    """The lines of ``after`` that ``before`` did not have, in order (what an in-place update changed)."""
    seen = set(before)
    return [line for line in after if line not in seen]


def title_of(lines: Sequence[str], fallback: str) -> str:
    return lines[0].strip() if lines and lines[0].strip() else fallback


def progress_line(progress: dict[str, float | int]) -> str:
    """`step 20/60 · loss 0.7081 · ETA 13 s` from a local job's progress dict (the cards' own words)."""
    eta = progress.get("eta_s")
    return progress_words(progress.get("step"), progress.get("max_steps"), progress.get("loss"),
                          float(eta) if eta is not None else None)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A plain aligned table (the demo's summary)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    def line(cells: Sequence[str]) -> str:
        return "  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths, strict=False)).rstrip()
    return [line(headers), line(["-" * width for width in widths]), *(line(row) for row in rows)]

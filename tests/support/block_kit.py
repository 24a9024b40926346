"""Slack's Block Kit limits, checked the way Slack checks them: slack_sdk's own models validate what they
know (section text 3,000, 10 fields, header 150, 25 actions, 10 context elements, button text 75 and
value 2,000, block_id and action_id 255, a view's 100 blocks, title 24, private_metadata 3,000), and the
rest is checked here from Slack's reference: 50 blocks a message, 2,000 characters a field, no empty text,
3,000 a text object anywhere, unique block_ids in a message or view, unique action_ids in a block, URLs of
3,000, a plain_text_input's max_length and initial_value within 3,000, the top-level text within 40,000.

`problems(...)` returns what Slack would refuse (an empty list when it would take it); the loopback Slack
answers `invalid_blocks` with them, and tests assert on them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block
from slack_sdk.models.views import View

MESSAGE_BLOCKS = 50
VIEW_BLOCKS = 100
FIELD_TEXT = 2000
TEXT_OBJECT = 3000
URL = 3000
INPUT = 3000
MESSAGE_TEXT = 40_000
KNOWN_BLOCKS = frozenset({"section", "header", "context", "actions", "divider", "image", "input", "rich_text",
                          "markdown", "file", "video"})


def message_problems(blocks: list[dict[str, Any]] | None, text: str | None = None) -> list[str]:
    """What Slack would refuse in a message (chat.postMessage, chat.update, an ephemeral, a command's answer,
    a response_url post)."""
    found: list[str] = []
    if text is not None and len(text) > MESSAGE_TEXT:
        found.append(f"text of {len(text)} characters (over {MESSAGE_TEXT})")
    if blocks:
        if len(blocks) > MESSAGE_BLOCKS:
            found.append(f"{len(blocks)} blocks (a message takes {MESSAGE_BLOCKS})")
        found += blocks_problems(blocks)
    return found


def view_problems(view: dict[str, Any]) -> list[str]:
    """What Slack would refuse in a modal or Home tab view (views.open, views.update, views.publish)."""
    found: list[str] = []
    blocks = view.get("blocks") or []
    try:
        View(**view).to_dict()
    except (SlackObjectFormationError, TypeError, ValueError) as exc:
        found.append(f"view: {exc}")
    if len(blocks) > VIEW_BLOCKS:  # View says so too; said once more in words tests read
        found.append(f"{len(blocks)} blocks (a view takes {VIEW_BLOCKS})")
    return found + blocks_problems(blocks)


def blocks_problems(blocks: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []
    block_ids: set[str] = set()
    for index, block in enumerate(blocks):
        where = f"block {index} ({block.get('type')})"
        if block.get("type") not in KNOWN_BLOCKS:
            found.append(f"{where}: not a block type")
            continue
        try:
            parsed = Block.parse(block)
            if parsed is None:
                raise SlackObjectFormationError("does not parse")
            parsed.to_dict()  # validates the block and every object in it
        except (SlackObjectFormationError, TypeError, ValueError, KeyError) as exc:
            found.append(f"{where}: {exc}")
        block_id = block.get("block_id")
        if block_id is not None:
            if block_id in block_ids:
                found.append(f"{where}: block_id {block_id!r} used twice")
            block_ids.add(block_id)
        found += [f"{where}: {problem}" for problem in _own_checks(block)]
    return found


def _own_checks(block: dict[str, Any]) -> Iterator[str]:
    """The limits slack_sdk's models do not check."""
    for field in block.get("fields") or []:
        if len(field.get("text", "")) > FIELD_TEXT:
            yield f"a field of {len(field['text'])} characters (over {FIELD_TEXT})"
    for text in _text_objects(block):
        if not text.get("text"):
            yield "an empty text"
        elif len(text["text"]) > TEXT_OBJECT:
            yield f"a text of {len(text['text'])} characters (over {TEXT_OBJECT})"
    action_ids: set[str] = set()
    for element in _elements(block):
        action_id = element.get("action_id")
        if action_id is not None:
            if action_id in action_ids:
                yield f"action_id {action_id!r} used twice in one block"
            action_ids.add(action_id)
        for name in ("url", "image_url"):
            if len(str(element.get(name) or "")) > URL:
                yield f"a {name} over {URL} characters"
        if element.get("type") == "plain_text_input":
            limit = int(element.get("max_length") or INPUT)
            if limit > INPUT or len(element.get("initial_value") or "") > limit:
                yield f"a plain_text_input over {INPUT} characters (max_length {limit})"
    if len(str(block.get("image_url") or "")) > URL:
        yield f"an image_url over {URL} characters"


def _elements(block: dict[str, Any]) -> list[dict[str, Any]]:
    elements = [e for e in block.get("elements") or [] if isinstance(e, dict)]
    for name in ("accessory", "element"):
        if isinstance(block.get(name), dict):
            elements.append(block[name])
    return elements


def _text_objects(block: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for name in ("text", "label", "hint"):
        if isinstance(block.get(name), dict):
            yield block[name]
    yield from block.get("fields") or []
    for element in _elements(block):
        if element.get("type") in ("mrkdwn", "plain_text"):
            yield element
        elif isinstance(element.get("text"), dict):
            yield element["text"]


def assert_message_fits(blocks: list[dict[str, Any]] | None, text: str | None = None) -> None:
    problems = message_problems(blocks, text)
    assert not problems, problems


def assert_view_fits(view: dict[str, Any]) -> None:
    problems = view_problems(view)
    assert not problems, problems

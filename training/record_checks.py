"""What each script needs of a record, checked before training: the first record it cannot use raises
`BadRecord` saying what is wrong in words that quote none of the record's content (a secret in a data
file must never reach the job's failure reason or its log)."""

from __future__ import annotations

import re
from typing import Any

from data_channels import BadRecord

_INT = re.compile(r"\s*[-+]?[0-9]{1,18}\s*")
#: Text columns of classification data: pairs first, then single texts (the first that the record has).
PAIR_COLUMNS = (("premise", "hypothesis"), ("sentence1", "sentence2"), ("question", "sentence"))
SINGLE_COLUMNS = ("text", "sentence", "review", "content")


def kind(value: Any) -> str:
    """What a value is, never what it holds."""
    if value is None:
        return "missing"
    if isinstance(value, bool):
        return "yes/no"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def whole_number(value: Any) -> int | None:
    """An int, a float without a fraction, or the text of an int; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INT.fullmatch(value):
        return int(value)
    return None


def text_columns(record: dict) -> tuple[str, str | None] | None:
    for first, second in PAIR_COLUMNS:
        if first in record and second in record:
            return first, second
    for name in SINGLE_COLUMNS:
        if name in record:
            return name, None
    return None


def classification_records(records: list[dict]) -> None:
    """Every record has the first record's text columns, as text, and a label that is a whole number or a
    class name (or none)."""
    columns = text_columns(records[0])
    # Labels are all class numbers or all class names, as the first labelled record has them.
    first = next((r["label"] for r in records if "label" in r), None)
    named = _is_name(first)
    if columns is None:
        layouts = ", ".join("/".join(pair) for pair in PAIR_COLUMNS) + ", or one of " + ", ".join(SINGLE_COLUMNS)
        raise BadRecord(0, f"has none of the text columns ({layouts})")
    for index, record in enumerate(records):
        for column in filter(None, columns):
            if not isinstance(record.get(column), str):
                raise BadRecord(index, f"{column} is {kind(record.get(column))}, not text")
        if "label" in record:
            _check_label(index, record["label"], named)


def _is_name(label: Any) -> bool:
    return isinstance(label, str) and bool(label.strip()) and whole_number(label) is None


def _check_label(index: int, label: Any, named: bool) -> None:
    if named and not _is_name(label):
        raise BadRecord(index, f"label is {kind(label)}, not a class name like the first record's")
    if not named and whole_number(label) is None:
        raise BadRecord(index, f"label is {kind(label)}, not a whole number")


def qa_records(records: list[dict]) -> None:
    """Every record has an id, a question and a context as text, and SQuAD answers that fit its context."""
    for index, record in enumerate(records):
        if not isinstance(record.get("id"), (str, int)) or isinstance(record.get("id"), bool):
            raise BadRecord(index, f"id is {kind(record.get('id'))}, not text or a number")
        for column in ("question", "context"):
            if not isinstance(record.get(column), str):
                raise BadRecord(index, f"{column} is {kind(record.get(column))}, not text")
        problem = _answers_problem(record.get("answers"), len(record["context"]))
        if problem is not None:
            raise BadRecord(index, problem)


def _answers_problem(answers: Any, context_length: int) -> str | None:
    if answers is None:
        return None  # unanswerable (SQuAD v2 style)
    if not isinstance(answers, dict):
        return f"answers is {kind(answers)}, not an object with text and answer_start lists"
    texts, starts = answers.get("text", []), answers.get("answer_start", [])
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        return "answers.text is not a list of texts"
    if not isinstance(starts, list) or not all(whole_number(s) is not None and not isinstance(s, str) for s in starts):
        return "answers.answer_start is not a list of whole numbers"
    if len(texts) != len(starts):
        return f"answers has {len(texts)} texts but {len(starts)} answer_start positions"
    if any(not 0 <= s <= context_length for s in starts):
        return "an answer_start lies outside the context"
    return None


#: The roles a chat turn may have (the chat templates' own).
CHAT_ROLES = ("system", "user", "assistant", "tool")


def chat_records(records: list[dict]) -> None:
    """Every record has ``messages``: a list of turns, each a ``role`` of CHAT_ROLES and ``content`` text, with at
    least one assistant turn to learn from."""
    for index, record in enumerate(records):
        turns = record.get("messages")
        if not isinstance(turns, list) or not turns:
            raise BadRecord(index, f"messages is {kind(turns)}, not a list of chat turns")
        for number, turn in enumerate(turns, 1):
            if not isinstance(turn, dict):
                raise BadRecord(index, f"turn {number} of messages is {kind(turn)}, not an object")
            if turn.get("role") not in CHAT_ROLES:
                raise BadRecord(index, f"turn {number} has no role among {', '.join(CHAT_ROLES)}")
            if not isinstance(turn.get("content"), str):
                raise BadRecord(index, f"turn {number}'s content is {kind(turn.get('content'))}, not text")
        if not any(turn.get("role") == "assistant" for turn in turns):
            raise BadRecord(index, "has no assistant turn to learn from")

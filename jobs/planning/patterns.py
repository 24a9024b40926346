"""Regular expressions over outside text (log lines, a team's metric patterns), compiled with RE2.

Python's ``re`` backtracks: ``(a+)+$`` or ``(?:[a-z_]+[ ]?)*Q([0-9])`` against one long log line runs for
minutes while holding the GIL, which freezes every thread of the bot (health checks and Slack requests
included). RE2 matches in time linear in the text whatever the pattern, and refuses what it cannot do that
way (backreferences, lookarounds). Every pattern the bot runs over a job's output is compiled here.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

import re2  # google-re2

#: A log line longer than this is read only this far: a pattern needs no more, and a script that prints a
#: megabyte without a newline costs the bot no more than a long line.
MAX_LINE_CHARS = 16_384


class LinearMatch(Protocol):
    def group(self, index: int = 0) -> Any: ...


class LinearPattern(Protocol):
    groups: int

    def search(self, text: str) -> LinearMatch | None: ...


class PatternError(ValueError):
    """A pattern RE2 cannot take; ``reason`` is one clause a person can act on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    return options


_OPTIONS = _options()


def linear(pattern: str) -> LinearPattern:
    """``pattern`` compiled with RE2 (linear time); PatternError when it is not valid or needs backtracking."""
    try:
        return re2.compile(pattern, _OPTIONS)  # type: ignore[no-any-return]
    except re2.error:
        pass
    try:
        re.compile(pattern)
    except re.error as exc:
        raise PatternError(f"it is not a valid regex ({exc.msg})") from None
    raise PatternError(
        "it needs backtracking, which linear-time matching (RE2) cannot do: write it without backreferences "
        r"(\1, (?P=name)), lookarounds ((?=...), (?!...), (?<=...), (?<!...)) and possessive or atomic groups"
    )


def capped(line: str) -> str:
    """The part of ``line`` a pattern is run over (MAX_LINE_CHARS)."""
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS]

"""Counts said as a person says them: "1 host", "2 hosts", never "1 host(s)" or "1 attempts" (issue 35.11).

`Counted` is a text template like any other (a `str`, formatted with `.format(...)`), whose fields may name
the noun their number counts: ``{hosts:host}`` gives ``1 host`` / ``3 hosts``, ``{n:child|children}`` an
irregular plural, and ``{n:=stays|stay}`` only the word that agrees with the number (a verb). The texts
modules keep their sentences; only the templates that count say so.
"""

from __future__ import annotations

import string
from typing import Any


def counted(number: int, noun: str) -> str:
    """``counted(1, "host")`` -> ``1 host``; ``counted(2, "host")`` -> ``2 hosts``; ``"=stays|stay"``: the word alone."""
    bare = noun.startswith("=")
    singular, _, plural = noun.lstrip("=").partition("|")
    word = singular if number == 1 else (plural or _plural(singular))
    return word if bare else f"{number} {word}"


def _plural(noun: str) -> str:
    if noun.endswith(("s", "x", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


class _CountingFormatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> Any:
        names_a_noun = format_spec[:1].isalpha() or format_spec.startswith("=")
        if names_a_noun and isinstance(value, int) and not isinstance(value, bool):
            return counted(value, format_spec)
        return super().format_field(value, format_spec)


_FORMATTER = _CountingFormatter()


class Counted(str):
    """A template whose ``{n:noun}`` fields say the number with its noun in agreement."""

    __slots__ = ()

    def format(self, *args: Any, **kwargs: Any) -> str:
        return _FORMATTER.vformat(str(self), args, kwargs)

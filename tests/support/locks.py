"""The committed locks (locks/*.txt, written by tools/lock.sh): what each install set pins."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ROOT / "locks"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)==([^\s;\\]+)", re.MULTILINE)


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@cache
def pins(lock: str = "test") -> dict[str, str]:
    """{normalized name: version} of ``locks/<lock>.txt``."""
    text = (LOCKS / f"{lock}.txt").read_text(encoding="utf-8")
    return {normalized(name): version for name, version in _PIN.findall(text)}


def locked_version(package: str, lock: str = "test") -> str:
    found = pins(lock).get(normalized(package))
    assert found, f"locks/{lock}.txt pins no {package}: run tools/lock.sh"
    return found

"""What a process read lately, kept for a few seconds: the Slack ack path asks for the same spec, recipe and
run history more than once within a request, and another replica's change may show a little late.

At most ``kept`` keys are kept (the least recently read forgotten first), so keys typed by anyone (a recipe
name, a model) cannot grow a process's memory. What ``read`` raises is not kept.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RecentReads(Generic[K, V]):
    def __init__(self, seconds: float, *, kept: int = 256,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.seconds = seconds
        self._kept = kept
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._values: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K, read: Callable[[], V]) -> V:
        """``key``'s value as read within ``seconds``, else ``read()`` now (outside the lock) and kept."""
        with self._lock:
            found = self._values.get(key)
            if found is not None and self._monotonic() - found[0] < self.seconds:
                self._values.move_to_end(key)
                return found[1]
        value = read()
        with self._lock:
            self._values[key] = (self._monotonic(), value)
            self._values.move_to_end(key)
            while len(self._values) > self._kept:
                self._values.popitem(last=False)
        return value

    def forget(self, key: K | None = None) -> None:
        """Forget ``key`` (everything when None): it changed here."""
        with self._lock:
            if key is None:
                self._values.clear()
            else:
                self._values.pop(key, None)

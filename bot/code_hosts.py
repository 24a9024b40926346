"""Work that waits on a code host (git ls-remote and fetches, S3 tarballs of own code) runs on its own pool.

A git host that never answers holds whoever waits on it until git's low-speed limit or the checkout's
deadline gives up (jobs.backends.code_sources). On the shared background executor four such launches held
every worker, and another person's plain /train card or Launch waited behind them. Here such work holds only
this pool's workers: each person may have at most ``per_user`` pieces waiting or running, the pool at most
``queued`` in all, and past either a request is refused at once with one sentence. Cards, buttons, /logs
and the home tab stay on the background executor, which nothing here can fill.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from handlers import texts
from jobs.errors import BadInput

log = logging.getLogger(__name__)

CODE_HOST_WORKERS = 4
CODE_HOST_TASKS_PER_USER = 2
CODE_HOST_QUEUED = 16


class CodeHostPool:
    """A bounded pool with a per-person cap; ``submit(user, work)`` is ``Services.run_on_code_host``."""

    def __init__(
        self,
        workers: int = CODE_HOST_WORKERS,
        *,
        per_user: int = CODE_HOST_TASKS_PER_USER,
        queued: int = CODE_HOST_QUEUED,
    ) -> None:
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="trainbot-code-host")
        self._per_user = per_user
        self._queued = queued
        self._lock = threading.Lock()
        self._waiting: Counter[str] = Counter()

    def submit(self, user: str, work: Callable[[], None]) -> None:
        """Queue ``work`` for ``user``; raises BadInput (one sentence) when they, or everyone, have too much
        waiting. Nothing is queued then."""
        with self._lock:
            if self._waiting[user] >= self._per_user:
                raise BadInput(texts.CODE_HOST_BUSY_USER.format(count=self._per_user))
            if sum(self._waiting.values()) >= self._queued:
                raise BadInput(texts.CODE_HOST_BUSY.format(count=self._queued))
            self._waiting[user] += 1
        try:
            self._executor.submit(self._run, user, work)
        except RuntimeError:  # shut down
            self._done(user)
            raise

    def waiting(self, user: str) -> int:
        with self._lock:
            return self._waiting[user]

    def shutdown(self) -> None:
        """Stop taking work; what is queued is dropped, what runs ends at git's own deadline."""
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _run(self, user: str, work: Callable[[], None]) -> None:
        try:
            work()
        except Exception:  # a background failure is logged; the handler already replied
            log.exception("work waiting on a code host failed")
        finally:
            self._done(user)

    def _done(self, user: str) -> None:
        with self._lock:
            self._waiting[user] -= 1
            if self._waiting[user] <= 0:
                del self._waiting[user]

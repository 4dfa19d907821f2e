"""Work started a few at a time, the next as one ends: binds, events.

Their calls are started and not waited for (:meth:`KubeClient.request_async`), so no pool of
threads bounds how many run at once; this does. ``start(item)`` begins one (it must not
block), and whoever finishes it calls :meth:`InFlight.finished`, from any thread; the next
queued item starts there. An item that finishes at once, inside ``start``, hands the next
one back to the loop already starting items on that thread, rather than starting it one
call deeper (a long run of refusals would otherwise recurse as deep as the queue is long).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


class InFlight(Generic[T]):
    """Thread-safe. ``paused`` until :meth:`resume`: items queue and none starts."""

    def __init__(
        self,
        limit: int,
        start: Callable[[T], None],
        *,
        capacity: int | None = None,
        paused: bool = False,
    ) -> None:
        self.limit = limit
        self._start = start
        self._capacity = capacity
        self._paused = paused
        self._queue: deque[T] = deque()
        self._running = 0
        self._cond = threading.Condition(threading.Lock())
        self._starting = threading.local()

    @property
    def queued(self) -> int:
        return len(self._queue)

    def add(self, item: T) -> bool:
        """Queue ``item`` (and start it if there is room); False, and not queued, when
        ``capacity`` items already wait."""
        with self._cond:
            if self._capacity is not None and len(self._queue) >= self._capacity:
                return False
            self._queue.append(item)
        self._start_next()
        return True

    def finished(self) -> None:
        """One started item is done: start the next."""
        with self._cond:
            self._running -= 1
            self._cond.notify_all()
        self._start_next()

    def resume(self) -> None:
        with self._cond:
            self._paused = False
        self._start_next()

    def pause(self, *, drop: bool = False) -> None:
        """Start no more (``drop``: and forget those queued)."""
        with self._cond:
            self._paused = True
            if drop:
                self._queue.clear()

    def wait(self, timeout: float, *, queued: bool = True) -> bool:
        """Wait up to ``timeout`` seconds until none runs (and, with ``queued``, none
        waits to start, paused ones aside); whether that came."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._running or (queued and self._queue and not self._paused):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _start_next(self) -> None:
        if getattr(self._starting, "active", False):
            return  # the loop below, further up this thread's stack, goes on
        self._starting.active = True
        try:
            while True:
                with self._cond:
                    if self._paused or not self._queue or self._running >= self.limit:
                        return
                    item = self._queue.popleft()
                    self._running += 1
                try:
                    self._start(item)
                except Exception:  # a bug in one item must not hold its place for good
                    log.exception("starting %r failed", item)
                    with self._cond:
                        self._running -= 1
                        self._cond.notify_all()
        finally:
            self._starting.active = False

"""Whether the scheduling loop is alive: what ``/healthz`` answers for ``kgpu run``.

A loop that turns but whose every session fails (an object that breaks the snapshot, a bug)
schedules nothing, as surely as a stopped one; a probe that restarts the process gives it
a fresh start and makes the failure visible (restarts counted, the last log kept). So the
loop is not live when:

- sessions have failed, one after another, for ``failure_limit_s`` seconds (``kgpu run
  --liveness-failure-seconds``); one success clears it;
- the loop has not come round for ``failure_limit_s`` seconds (a session stuck, or the
  loop's thread gone).

A replica that is not the leader, or whose caches are still listing, runs no session and
is live as long as its loop turns. ``failure_limit_s`` 0 turns both checks off.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kgpu.model.limits import clip


class Liveness:
    def __init__(self, failure_limit_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.failure_limit_s = failure_limit_s
        self._clock = clock
        self._lock = threading.Lock()
        self._beat = clock()
        self._failing_since: float | None = None
        self._failures = 0
        self._last_error = ""

    def beat(self) -> None:
        """The loop came round."""
        with self._lock:
            self._beat = self._clock()

    def succeeded(self) -> None:
        with self._lock:
            self._failing_since = None
            self._failures = 0

    def failed(self, error: BaseException) -> None:
        with self._lock:
            if self._failing_since is None:
                self._failing_since = self._clock()
            self._failures += 1
            self._last_error = clip(f"{type(error).__name__}: {error}")

    def problems(self) -> list[str]:
        """Why the loop is not live; empty when it is."""
        if not self.failure_limit_s:
            return []
        with self._lock:
            now = self._clock()
            out = []
            if (
                self._failing_since is not None
                and now - self._failing_since >= self.failure_limit_s
            ):
                out.append(
                    f"{self._failures} scheduling sessions in a row failed over "
                    f"{now - self._failing_since:.0f}s (the last: {self._last_error})"
                )
            if now - self._beat >= self.failure_limit_s:
                out.append(f"the scheduling loop has not come round for {now - self._beat:.0f}s")
            return out

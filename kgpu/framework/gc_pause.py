"""Python's cycle collector paused while a session opens and runs."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a session runs, and back as it was after.

    A session makes tens of thousands of objects that live as long as it does (jobs and
    their lists, victim units, statements), and every few hundred of them set off a
    collection whose older generations walk the whole snapshot: 40% of a session's time
    at 70,000 pods. Nothing is lost: what the session leaves in cycles (it and its
    plugins' callbacks) is collected once the collector is back.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

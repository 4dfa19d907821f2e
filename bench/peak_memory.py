"""The process's peak resident memory over one stretch of a bench, read from Linux.

``reset()`` sets the kernel's high-water mark (``VmHWM``) back to the memory in use now
(writing 5 to ``/proc/self/clear_refs``, Linux 4.0 and later); ``peak_mib()`` reads it.
So each measured stretch (one replay, one session) gets its own peak, which includes what
the process held before it: the interpreter, numpy, the inputs already read. Elsewhere
both say so and measure nothing.
"""

from __future__ import annotations

from pathlib import Path

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


def reset() -> bool:
    """Whether the high-water mark could be reset (Linux only)."""
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def peak_mib() -> float | None:
    """Peak resident memory since the last reset, in MiB; None where it cannot be read."""
    try:
        text = STATUS.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024  # the kernel writes kB
    return None


def shown(peak: float | None) -> str:
    return "n/a" if peak is None else f"{peak:.0f}"

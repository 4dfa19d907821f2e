"""Text from Kubernetes objects, made safe to print.

Names, labels, annotations and messages come from whoever wrote the object; printed raw, a
control character rewrites a terminal (``ESC [2J`` clears it, ``ESC ]8`` plants a link), a
newline forges a log line, and a right-to-left override makes ``gpu-0`` read as something
else. Every place where object text reaches a person goes through :func:`printable`: log
lines (:class:`EscapingFormatter`, installed by each command), Events
(:mod:`kgpu.kube.api.event_recorder`), ``kgpu explain`` and the simulator's explanations,
and the webhook's denials of Devices.
"""

from __future__ import annotations

import logging
import unicodedata
from typing import Final

# Control characters (C0, DEL, C1), format characters (bidirectional overrides, zero-width
# characters) and the line and paragraph separators.
_ESCAPED: Final = frozenset({"Cc", "Cf", "Zl", "Zp"})


def _escape(char: str) -> str:
    code = ord(char)
    if char == "\n":
        return "\\n"
    if char == "\t":
        return "\\t"
    if char == "\r":
        return "\\r"
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )


def printable(text: str) -> str:
    """``text`` with every control, format and separator character written as its escape
    (``\\x1b``, ``\\n``, ``\\u202e``); other text, non-ASCII letters included, unchanged."""
    if text.isprintable():  # the common case, in C: nothing to escape
        return text
    return "".join(_escape(c) if unicodedata.category(c) in _ESCAPED else c for c in text)


class EscapingFormatter(logging.Formatter):
    """A log line's message through :func:`printable`; the traceback, kgpu's own, is not."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)


def escape_logs() -> None:
    """Give every handler of the root logger (what ``logging.basicConfig`` made) an
    :class:`EscapingFormatter` with its format."""
    for handler in logging.getLogger().handlers:
        current = handler.formatter
        fmt = current._fmt if current is not None else None
        datefmt = current.datefmt if current is not None else None
        handler.setFormatter(EscapingFormatter(fmt, datefmt))

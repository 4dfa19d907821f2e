"""JSON text from objects, read within bounds: every ``json.loads`` of object text goes here.

Python's JSON decoder recurses once per nesting level, so ``[[[[…]]]]`` 50,000 deep ends
the reading thread with RecursionError (a session, the webhook's request) instead of a
refusal. :func:`read_json` measures the depth first, without recursion (a scan of the
brackets outside strings), and refuses text that is too long or too deep with
:class:`JsonTextError`, which says which bound it passed ("nested 50000 deep, at most 32");
the caller names the object, the field and what it expected, as for any malformed value:

    Pod ml/p: annotation kgpu.io/device-allocation is "[[[[…", expected JSON such as {…}
    (nested 50000 deep, at most 32)
"""

from __future__ import annotations

import json
import re
import sys
from itertools import accumulate
from typing import Final

from kgpu.model.limits import MAX_ANNOTATION_CHARS, MAX_ANNOTATION_DEPTH

# A JSON string, escapes included (the unrolled form: no backtracking on long strings).
_STRING: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET: Final = re.compile(r"[\[\]{}]")
_STEP: Final = {"[": 1, "{": 1, "]": -1, "}": -1}


class JsonTextError(ValueError):
    """Text that is not JSON within the bounds; the message says what is wrong with it."""


class OutOfBounds(JsonTextError):
    """JSON text too long or nested too deep to be read."""


def json_depth(text: str) -> int:
    """How deep the arrays and objects of ``text`` nest (0: a scalar), counted without
    recursion. Brackets inside strings do not count; in text that is not JSON the count
    is a bound the decoder then refuses anyway."""
    bare = _STRING.sub("", text)
    return max(accumulate(_STEP[b] for b in _BRACKET.findall(bare)), default=0)


def check_bounds(
    text: str,
    *,
    max_chars: int = MAX_ANNOTATION_CHARS,
    max_depth: int = MAX_ANNOTATION_DEPTH,
) -> None:
    """Refuse ``text`` with :class:`OutOfBounds` when longer than ``max_chars`` or nested
    deeper than ``max_depth`` (for a reader other than :func:`read_json` to go on with)."""
    if len(text) > max_chars:
        raise OutOfBounds(f"{len(text)} characters long, at most {max_chars}")
    depth = json_depth(text)
    if depth > max_depth:
        raise OutOfBounds(f"nested {depth} deep, at most {max_depth}")


def read_json(
    text: str | bytes,
    *,
    max_chars: int = MAX_ANNOTATION_CHARS,
    max_depth: int = MAX_ANNOTATION_DEPTH,
) -> object:
    """The value of ``text``, refused with :class:`JsonTextError` when longer than
    ``max_chars``, nested deeper than ``max_depth`` or not JSON."""
    if isinstance(text, bytes):
        if len(text) > max_chars:
            raise OutOfBounds(f"{len(text)} characters long, at most {max_chars}")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonTextError(f"not UTF-8 at byte {exc.start}") from None
    check_bounds(text, max_chars=max_chars, max_depth=max_depth)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonTextError(f"invalid JSON at character {exc.pos}: {exc.msg}") from None
    except ValueError:
        # Python refuses to read an integer of more than sys.get_int_max_str_digits() digits
        # (4300 by default) with a plain ValueError, past the bounds above.
        raise JsonTextError(
            f"a number of more than {sys.get_int_max_str_digits()} digits"
        ) from None

"""JSON of API calls and watch events: ``orjson`` (C) where it can, the standard library's
``json`` for what orjson refuses and ``json`` takes, so what is read and written stays
exactly what it was with ``json`` alone.

orjson reads a watch event or a Binding's answer in about a third of json's time. It is
stricter: it refuses a lone surrogate (``"\\ud800"``, which an object's text may hold: see
tests/hostile_objects.py) and ``NaN``, which json reads; it reads an integer beyond 64 bits
as a float, where json keeps the integer; and it will not write a lone surrogate, which json
writes escaped. Those rare documents go through json: the ones orjson refuses, and any with
a run of 19 digits or more (in a string too: reading those with json costs only time).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

_LONG_NUMBER = re.compile(r"[0-9]{19}")
_LONG_NUMBER_BYTES = re.compile(rb"[0-9]{19}")


def loads(raw: bytes | str) -> Any:
    if isinstance(raw, bytes):
        long = _LONG_NUMBER_BYTES.search(raw) is not None
    else:
        long = _LONG_NUMBER.search(raw) is not None
    if long:
        return json.loads(raw)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)  # json's ValueError, if json refuses it too


def dumps(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return json.dumps(obj).encode()

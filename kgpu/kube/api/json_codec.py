"""JSON of API calls and watch events: ``orjson`` (C) where it can, the standard library's
``json`` for what orjson refuses and ``json`` takes, so what is read and written stays
exactly what it was with ``json`` alone.

orjson reads a watch event or a Binding's answer in about a third of json's time. It is
stricter: it refuses a lone surrogate (``"\\ud800"``, which an object's text may hold: see
tests/hostile_objects.py), ``NaN`` and integers beyond 64 bits, which json reads; and it
will not write a lone surrogate, which json writes escaped. Those rare documents go through
json.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(raw: bytes | str) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)  # json's ValueError, if json refuses it too


def dumps(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj)
    except orjson.JSONEncodeError:
        return json.dumps(obj).encode()

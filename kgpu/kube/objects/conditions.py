"""``metav1.Condition`` lists in the status of kgpu's objects (Workspace, Device)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]


def condition(kind: str, ok: bool, reason: str, message: str, generation: int, now: str) -> Obj:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": now,
    }


def merge_conditions(old: Sequence[Mapping[str, Any]], new: Sequence[Obj]) -> list[Obj]:
    """``new`` over ``old`` by type; a condition whose status did not change keeps the
    time of its last transition, as ``meta.SetStatusCondition`` does."""
    before = {c.get("type"): c for c in old}
    merged = {t: dict(c) for t, c in before.items() if isinstance(t, str)}
    for c in new:
        previous = before.get(c["type"])
        if previous is not None and previous.get("status") == c["status"]:
            c = {
                **c,
                "lastTransitionTime": previous.get("lastTransitionTime", c["lastTransitionTime"]),
            }
        merged[c["type"]] = c
    return [merged[t] for t in sorted(merged)]

"""When each pod of an openb pod list came and went, for a replay with departures.

``read_pods`` reads what a pod asks for; this adds the columns the arrival-only replay
leaves out: ``creation_time`` and ``deletion_time`` (seconds on the trace's own clock) and
``pod_phase``. Every row is checked alone and refused with a message naming the file, row,
column, value and what was expected: a time that is not whole seconds, is negative or past
``MAX_TIME``, a deletion before its creation, a phase Kubernetes does not have, a name
given twice. An empty ``deletion_time`` means the pod was never deleted.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kgpu.sim.openb import TraceError, TracePod, read_pods

# Kubernetes' pod phases; "" where the trace has no pod_phase column or leaves it empty.
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# About 35,000 years: far past any trace, and small enough that sums of times stay exact
# in float64 and int64.
MAX_TIME = 2**40


@dataclass(frozen=True, slots=True)
class TimedPod:
    """A pod row with its times: it asks for ``pod`` from ``created`` until ``deleted``
    (None: never deleted). ``row`` is its line in the file, for messages; ``qos`` its
    column of that name ("" where absent), which says whether it may be preempted."""

    pod: TracePod
    row: int
    created: int
    deleted: int | None
    phase: str
    qos: str = ""


def _time(path: Path, row: int, column: str, value: str | None) -> int | None:
    """Whole seconds in 0..MAX_TIME, or None for an empty cell."""
    text = (value or "").strip()
    if not text:
        return None
    try:
        seconds = int(text)
    except ValueError:
        seconds = -1
    if not 0 <= seconds <= MAX_TIME:
        raise TraceError(
            f"{path.name} row {row}: column {column!r} is {value!r}, expected whole seconds "
            f"from 0 to {MAX_TIME}"
        )
    return seconds


def read_timed_pods(path: Path) -> list[TimedPod]:
    """The pod list with each row's times and phase, in file order."""
    pods = read_pods(path)
    timed = []
    seen: dict[str, int] = {}
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        if "creation_time" not in columns:
            raise TraceError(
                f"{path.name}: no 'creation_time' column (columns: {', '.join(columns)}), "
                "expected creation_time and deletion_time to replay arrivals and departures"
            )
        for (row_no, row), pod in zip(enumerate(reader, start=2), pods, strict=True):
            if pod.name in seen:
                raise TraceError(
                    f"{path.name} row {row_no}: column 'name' is {pod.name!r}, expected a "
                    f"name of its own (row {seen[pod.name]} has it)"
                )
            seen[pod.name] = row_no
            created = _time(path, row_no, "creation_time", row.get("creation_time"))
            if created is None:
                raise TraceError(
                    f"{path.name} row {row_no}: column 'creation_time' is empty, expected "
                    "whole seconds"
                )
            deleted = _time(path, row_no, "deletion_time", row.get("deletion_time"))
            if deleted is not None and deleted < created:
                raise TraceError(
                    f"{path.name} row {row_no}: column 'deletion_time' is {deleted}, expected "
                    f"a time at or after the row's creation_time ({created})"
                )
            phase = (row.get("pod_phase") or "").strip()
            if phase and phase not in PHASES:
                raise TraceError(
                    f"{path.name} row {row_no}: column 'pod_phase' is {phase!r}, expected one "
                    f"of {', '.join(PHASES)} or empty"
                )
            qos = (row.get("qos") or "").strip()
            timed.append(TimedPod(pod, row_no, created, deleted, phase, qos))
    return timed


def parse_phases(value: str) -> frozenset[str]:
    """The phases named in a comma-separated list; ``ValueError`` names one that is not."""
    names = {v.strip() for v in value.split(",") if v.strip()}
    unknown = sorted(names - set(PHASES))
    if unknown or not names:
        raise ValueError(f"is {value!r}, expected a comma-separated list of {', '.join(PHASES)}")
    return frozenset(names)


def select_phases(pods: Sequence[TimedPod], phases: frozenset[str]) -> list[TimedPod]:
    """The pods whose phase is in ``phases``; a pod without a phase is always kept."""
    return [p for p in pods if not p.phase or p.phase in phases]

"""Per-cycle data shared between a plugin's extension points.

A plugin writes what it computed once for a pod (in PreFilter or PreScore) under its own
name and reads it back in Filter and Score. ``clone`` copies the mapping so that a what-if
(preemption) can change it without touching the real cycle.
"""

from __future__ import annotations

from typing import Any

from kgpu.model.pod import PodSpec
from kgpu.state.cluster import ClusterState


class CycleState:
    __slots__ = ("_data", "pod", "state")

    def __init__(self, state: ClusterState, pod: PodSpec) -> None:
        self.state = state
        self.pod = pod
        self._data: dict[str, Any] = {}

    def write(self, plugin: str, value: Any) -> None:
        self._data[plugin] = value

    def read(self, plugin: str) -> Any:
        return self._data[plugin]

    def get(self, plugin: str, default: Any = None) -> Any:
        return self._data.get(plugin, default)

    def clone(self) -> CycleState:
        copy = CycleState(self.state, self.pod)
        copy._data = dict(self._data)
        return copy

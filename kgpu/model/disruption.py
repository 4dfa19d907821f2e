"""PodDisruptionBudgets, as the Eviction API applies them.

A budget selects pods of its namespace by labels and keeps a number of them healthy:
``minAvailable`` (pods that must stay) or ``maxUnavailable`` (pods that may be away), each
a count or a percentage. The disruption controller turns it into ``disruptionsAllowed``:
``currentHealthy - desiredHealthy``, never below 0, where ``desiredHealthy`` is
``minAvailable`` (a percentage of the expected pods, rounded up) or ``expected -
maxUnavailable`` (a percentage rounded up). An eviction of a pod the budget selects is
refused (429 Too Many Requests) while that is 0, and takes one from it when granted. A
pod selected by more than one budget cannot be evicted at all (the API answers 500).

kgpu reads ``status.disruptionsAllowed`` where the controller wrote it; ``allowed`` works
it out from the spec where there is no controller (the simulator, tests).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from kgpu.model.workspace import LabelSelector


@dataclass(frozen=True, slots=True)
class Amount:
    """A count, or a percentage of the expected pods (``percent`` true)."""

    value: int
    percent: bool = False

    def __post_init__(self) -> None:
        if self.value < 0 or (self.percent and self.value > 100):
            raise ValueError(f"invalid budget amount {self.value}{'%' if self.percent else ''}")

    def of(self, expected: int) -> int:
        """The count it stands for; percentages round up, as the controller rounds them."""
        return math.ceil(self.value * expected / 100) if self.percent else self.value

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """One PodDisruptionBudget: ``key`` is "namespace/name"; exactly one of
    ``min_available`` and ``max_unavailable`` is set."""

    key: str
    selector: LabelSelector
    min_available: Amount | None = None
    max_unavailable: Amount | None = None

    def __post_init__(self) -> None:
        if (self.min_available is None) == (self.max_unavailable is None):
            raise ValueError(
                f"PodDisruptionBudget {self.key}: expected exactly one of minAvailable and "
                "maxUnavailable"
            )

    @property
    def namespace(self) -> str:
        return self.key.split("/", 1)[0]

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether the budget covers a pod; an empty selector covers every pod of the
        namespace (policy/v1's meaning)."""
        return namespace == self.namespace and self.selector.matches(labels)

    def allowed(self, healthy: int, expected: int) -> int:
        """Disruptions allowed with ``healthy`` pods up out of ``expected``."""
        if self.min_available is not None:
            desired = self.min_available.of(expected)
        else:
            assert self.max_unavailable is not None  # __post_init__: one of the two
            desired = expected - self.max_unavailable.of(expected)
        return max(0, healthy - desired)

    def describe(self) -> str:
        if self.min_available is not None:
            return f"minAvailable {self.min_available}"
        return f"maxUnavailable {self.max_unavailable}"

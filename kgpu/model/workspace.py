"""Inference workspaces as the node-group scheduler sees them: what to run, how many
replicas, how much GPU memory each needs, and which nodes it may use.

A workspace is KAITO's shape (``resource`` and ``inference`` at the top level of the custom
resource); the edge (:mod:`kgpu.kube.workspaces.placement_check`) parses the object once into a
:class:`WorkspaceSpec`, resolving a preset name into its per-replica GPU memory, so that the
core never looks a preset up again and a workspace that asks for memory directly is the
same thing to every filter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, NewType

WorkspaceKey = NewType("WorkspaceKey", str)  # "namespace/name"

INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"


class Operator(StrEnum):
    """The operators of a ``metav1.LabelSelectorRequirement``."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` entry: ``key`` ``operator`` ``values``."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # The API server's own rule: In/NotIn need values, Exists/DoesNotExist take none.
        takes_values = self.operator in (Operator.IN, Operator.NOT_IN)
        if takes_values != bool(self.values):
            raise ValueError(f"requirement {self.key} {self.operator} has values {self.values}")

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator is Operator.EXISTS:
            return self.key in labels
        if self.operator is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        if self.operator is Operator.IN:
            return labels.get(self.key) in self.values
        # NotIn matches a node without the label, as Kubernetes' selectors do.
        return self.key not in labels or labels[self.key] not in self.values

    def __str__(self) -> str:
        if self.values:
            return f"{self.key} {self.operator.value.lower()} ({','.join(self.values)})"
        return self.key if self.operator is Operator.EXISTS else f"!{self.key}"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """``matchLabels`` and ``matchExpressions``, ANDed; an empty selector matches every node."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )

    def with_label(self, key: str, value: str) -> LabelSelector:
        """The selector narrowed by one more required label (the NAP instance type)."""
        return LabelSelector((*self.match_labels, (key, value)), self.match_expressions)

    def __str__(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels]
        parts.extend(str(r) for r in self.match_expressions)
        return ",".join(parts) if parts else "(every node)"


@dataclass(frozen=True, slots=True)
class WorkspaceSpec:
    """An inference workspace, parsed and with its GPU memory requirement resolved.

    ``gpu_memory_mib`` is what one replica needs in all (KAITO's
    ``TotalGPUMemoryRequirement``), whether it came from ``preset`` or was given directly.
    ``instance_type`` set means node auto-provisioning (NAP): capacity comes from the SKU
    table instead of the nodes' labels. ``model_id`` is what the inference server loads.
    """

    key: WorkspaceKey
    selector: LabelSelector
    replicas: int
    gpu_memory_mib: int
    preset: str = ""
    model_id: str = ""
    instance_type: str = ""

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"workspace {self.key}: replicas {self.replicas} < 1")
        if self.gpu_memory_mib < 1:
            raise ValueError(f"workspace {self.key}: GPU memory {self.gpu_memory_mib} MiB < 1")

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def namespace(self) -> str:
        return self.key.rsplit("/", 1)[0] if "/" in self.key else "default"

    @property
    def total_gpu_memory_mib(self) -> int:
        """What all replicas need together: the CapacityFilter's bar."""
        return self.gpu_memory_mib * self.replicas

    @property
    def node_selector(self) -> LabelSelector:
        """The nodes the workspace may use: its selector, plus the instance type under NAP."""
        if self.instance_type:
            return self.selector.with_label(INSTANCE_TYPE_LABEL, self.instance_type)
        return self.selector


def nodes_per_replica(gpu_memory_mib: int, node_gpu_memory_mib: int) -> int:
    """Nodes one replica spans: ceil(requirement / one node's GPU memory).

    One replica per node when a node holds it; otherwise the replica spans as many whole
    nodes of the group as its memory needs (distributed inference). A node without GPU
    memory can hold no part of a replica, which the callers check before dividing.
    """
    if node_gpu_memory_mib <= 0:
        raise ValueError(f"node GPU memory {node_gpu_memory_mib} MiB cannot hold a replica")
    return -(-gpu_memory_mib // node_gpu_memory_mib)

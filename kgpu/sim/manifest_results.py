"""What ``kgpu simulate manifests`` tells of each pod, and of the cluster it leaves."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kgpu.dra.inventory import DraInventory
from kgpu.state.cluster import ClusterState


class PodStatus(StrEnum):
    RUNNING = "Running"  # bound in the manifests, accounted where it is
    SCHEDULED = "Scheduled"  # placed by this simulation
    NOMINATED = "Nominated"  # runs on its node once the pods evicted for its job are gone
    EVICTED = "Evicted"  # was running; preempted or reclaimed by this simulation
    PENDING = "Pending"


@dataclass(frozen=True, slots=True)
class PodResult:
    pod: str  # namespace/name
    source: str
    status: PodStatus
    node: str = ""
    gpus: tuple[int, ...] = ()  # GPU minors
    gpu_milli: int = 0  # per GPU; 1000 for whole GPUs
    message: str = ""
    # scheduling.koordinator.sh/device-allocated, for a pod that asked in Koordinator's names
    device_allocated: str = ""
    # DRA: each claim's allocation, "ns/claim: request=driver/pool/device (node n)"
    resource_claims: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "pod": self.pod,
            "source": self.source,
            "status": str(self.status),
            "node": self.node or None,
            "gpus": list(self.gpus),
            "gpu_milli": self.gpu_milli,
            "message": self.message,
        }
        if self.device_allocated:  # only then: the other pods' output stays as it was
            out["device_allocated"] = self.device_allocated
        if self.resource_claims:  # likewise
            out["resource_claims"] = list(self.resource_claims)
        return out


@dataclass(slots=True)
class ManifestRun:
    policy: str
    state: ClusterState
    results: list[PodResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    session: bool = False  # placed by a session (Queues or PodGroups in the manifests)
    dra: DraInventory | None = None  # the DRA objects, their claims as the run left them

    def to_json(self) -> dict[str, Any]:
        state = self.state
        return {
            "policy": self.policy,
            "pods": [r.to_json() for r in self.results],
            "nodes": [
                {
                    "name": node.name,
                    "gpu_model": node.gpu_model,
                    "gpu_free_milli": state.node_gpus_free(i),
                    "cpu_free_milli": int(state.cpu_free[i]),
                    "memory_free_mib": int(state.mem_free[i]),
                    "pods": int(state.pods[i]),
                }
                for i, node in enumerate(state.nodes)
            ],
            "notes": self.notes,
        }

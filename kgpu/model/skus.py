"""Cloud GPU instance types for the node-auto-provisioning (NAP) path.

With ``resource.instanceType`` set, the nodes do not exist yet, so their GPU count and
memory cannot come from GPU Feature Discovery labels: they come from this table. The
figures are KAITO's SKU maps (github.com/kaito-project/kaito ``pkg/sku/azure_sku_handler.go``
and ``pkg/sku/aws_sku_handler.go``, which give GPU count and total GPU memory per
instance), split here into memory per GPU in MiB, the unit GFD's ``nvidia.com/gpu.memory``
label uses. They are nominal sizes (an "80 GB" GPU is 81920 MiB here; the driver reports a
little less), which is what the SKU maps compare against too.

``gpu_product`` is the product name GFD writes for that GPU, for reports; NAP placement
selects nodes by instance type, never by this name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from kgpu.model.workspace import nodes_per_replica


@dataclass(frozen=True, slots=True)
class Sku:
    name: str
    cloud: str
    gpu_count: int
    gpu_memory_mib: int  # per GPU
    gpu_product: str

    @property
    def node_gpu_memory_mib(self) -> int:
        return self.gpu_count * self.gpu_memory_mib


_AZURE: Final = "azure"
_AWS: Final = "aws"

SKUS: Final[dict[str, Sku]] = {
    s.name: s
    for s in (
        # Azure: NC A100 v4 is A100 80GB PCIe; ND A100 v4 is A100 40GB SXM4 (ND96asr) or
        # 80GB SXM4 (ND96amsr); NV A10 v5 is a whole A10 24GB at the 36-vCPU size.
        Sku("Standard_NC24ads_A100_v4", _AZURE, 1, 81920, "NVIDIA-A100-80GB-PCIe"),
        Sku("Standard_NC48ads_A100_v4", _AZURE, 2, 81920, "NVIDIA-A100-80GB-PCIe"),
        Sku("Standard_NC96ads_A100_v4", _AZURE, 4, 81920, "NVIDIA-A100-80GB-PCIe"),
        Sku("Standard_ND96asr_A100_v4", _AZURE, 8, 40960, "NVIDIA-A100-SXM4-40GB"),
        Sku("Standard_ND96amsr_A100_v4", _AZURE, 8, 81920, "NVIDIA-A100-SXM4-80GB"),
        Sku("Standard_NV36ads_A10_v5", _AZURE, 1, 24576, "NVIDIA-A10"),
        Sku("Standard_NV72ads_A10_v5", _AZURE, 2, 24576, "NVIDIA-A10"),
        Sku("Standard_NC4as_T4_v3", _AZURE, 1, 16384, "Tesla-T4"),
        Sku("Standard_NC64as_T4_v3", _AZURE, 4, 16384, "Tesla-T4"),
        Sku("Standard_NC40ads_H100_v5", _AZURE, 1, 96256, "NVIDIA-H100-NVL"),
        Sku("Standard_ND96isr_H100_v5", _AZURE, 8, 81920, "NVIDIA-H100-80GB-HBM3"),
        # AWS: p4d is A100 40GB, p4de A100 80GB, p5 H100 80GB, g5 A10G 24GB, g6 L4 24GB.
        Sku("p4d.24xlarge", _AWS, 8, 40960, "NVIDIA-A100-SXM4-40GB"),
        Sku("p4de.24xlarge", _AWS, 8, 81920, "NVIDIA-A100-SXM4-80GB"),
        Sku("p5.48xlarge", _AWS, 8, 81920, "NVIDIA-H100-80GB-HBM3"),
        Sku("g5.xlarge", _AWS, 1, 24576, "NVIDIA-A10G"),
        Sku("g5.12xlarge", _AWS, 4, 24576, "NVIDIA-A10G"),
        Sku("g5.48xlarge", _AWS, 8, 24576, "NVIDIA-A10G"),
        Sku("g6.xlarge", _AWS, 1, 24576, "NVIDIA-L4"),
        Sku("g6.12xlarge", _AWS, 4, 24576, "NVIDIA-L4"),
    )
}


@dataclass(frozen=True, slots=True)
class NodePlan:
    """How many nodes of one instance type a workspace needs (no bin packing of replicas)."""

    sku: Sku
    replicas: int
    nodes_per_replica: int

    @property
    def nodes(self) -> int:
        return self.replicas * self.nodes_per_replica


def plan_nodes(sku: Sku, replicas: int, gpu_memory_mib: int) -> NodePlan:
    """KAITO's NAP rule: one replica per node, spanning nodes when one is too small.

    An instance with 80 GB for a replica of 8 GB still takes a node per replica (two
    replicas, two nodes), as the KAITO design states.
    """
    return NodePlan(sku, replicas, nodes_per_replica(gpu_memory_mib, sku.node_gpu_memory_mib))

"""Every plugin name, in one place: profiles, reports and the registry use these."""

from typing import Final

NODE_UNSCHEDULABLE: Final = "NodeUnschedulable"
NODE_SELECTOR: Final = "NodeSelector"
TAINT_TOLERATION: Final = "TaintToleration"
NODE_RESOURCES_FIT: Final = "NodeResourcesFit"
GPU_FIT: Final = "GpuFit"
GPU_TIGHTEST: Final = "GpuTightest"
GPU_RANDOM: Final = "GpuRandom"

RANDOM: Final = "RandomScore"
DOT_PRODUCT: Final = "DotProduct"
GPU_CLUSTERING: Final = "GpuClustering"
GPU_PACKING: Final = "GpuPacking"
BEST_FIT: Final = "BestFit"
FGD: Final = "FGD"
STRAND_AWARE_FGD: Final = "StrandAwareFGD"

# Node-group plugins: they filter and score groups of identical GPU nodes for a workspace.
LABEL_FILTER: Final = "LabelFilter"
NODE_RESOURCE_FILTER: Final = "NodeResourceFilter"
NODE_GROUP_SIZE_FILTER: Final = "NodeGroupSizeFilter"
CAPACITY_FILTER: Final = "CapacityFilter"
RESOURCE_UTILIZATION_SCORER: Final = "ResourceUtilizationScorer"
NODE_PLACEMENT: Final = "NodePlacement"

# Session plugins: callbacks into a scheduling session (queues, jobs, victims).
PRIORITY: Final = "priority"
GANG: Final = "gang"
PROPORTION: Final = "proportion"
CAPACITY_CARD: Final = "capacity-card"

# Devices: what no GPU of the cluster can hold (PreFilter), NVLink islands (score).
GPU_REQUEST_CHECK: Final = "GpuRequestCheck"
GPU_TOPOLOGY: Final = "GpuTopology"

# Topology-aware placement of gangs: added to a session when the profile declares levels.
TOPOLOGY: Final = "topology"

# Dynamic Resource Allocation: nodes where the pod's ResourceClaims can be allocated.
DRA_CLAIMS: Final = "DraClaims"

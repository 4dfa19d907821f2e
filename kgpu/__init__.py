"""kgpu: a GPU-aware batch scheduler for Kubernetes, with a trace-driven simulator.

The public surface is small on purpose; everything else is importable but private to the
project and may change between releases.
"""

from kgpu.framework.status import Code, Status
from kgpu.model.gpu import GpuRequest
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodSpec
from kgpu.state.cluster import ClusterState

__all__ = ["ClusterState", "Code", "GpuRequest", "NodeInfo", "PodSpec", "Status"]
__version__ = "0.1.0"

"""kgpu: a GPU-aware batch scheduler for Kubernetes, with a trace-driven simulator.

The public surface is small on purpose; everything else is importable but private to the
project and may change between releases.
"""

from kgpu.framework.status import Code, Status
from kgpu.model.gpu import GpuRequest
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodSpec
from kgpu.state.cluster import ClusterState

__all__ = [
    "ClusterState",
    "Code",
    "GpuRequest",
    "NodeInfo",
    "PodSpec",
    "Status",
    "core_build",
    "core_compiled",
]
__version__ = "0.1.0"


def core_compiled() -> bool:
    """Whether the scheduling core runs compiled (mypyc, see setup.py) or as plain Python:
    the same decisions either way, in about two thirds of the time compiled."""
    from importlib.machinery import EXTENSION_SUFFIXES

    import kgpu.framework.session as probe  # one of the modules setup.py compiles

    return (probe.__file__ or "").endswith(tuple(EXTENSION_SUFFIXES))


def core_build() -> str:
    """``core_compiled`` in words, as ``kgpu --version`` and the benchmarks print it."""
    return "compiled (mypyc)" if core_compiled() else "plain Python"

"""What the agent asks of a GPU library, as one small Protocol, and the facts it gets back.

:class:`~kgpu.agent.nvml.NvmlProbe` answers from NVML on a real node; the tests answer from
a table. Everything the agent concludes (link kinds, health, the Device resource) is worked
out from these answers in plain code, so it is tested without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

# NVML's topology levels between two GPUs (nvmlGpuTopologyLevel_t), as ``nvidia-smi topo -m``
# names them. INTERNAL (two GPUs on one board) is printed as PIX, one switch apart.
ANCESTOR_KINDS: Final = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


class ProbeError(Exception):
    """The GPU library cannot be used at all (no driver, no library): nothing to report."""


class GpuUnreadable(Exception):
    """One GPU did not answer (fallen off the bus, lost, in reset): the reason says how."""


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """One GPU as the library reports it. ``problem`` is why it must not be used, or ""."""

    index: int  # the library's enumeration order, which need not be the minor's
    minor: int  # /dev/nvidia<minor>: what the kubelet and kgpu's allocations name
    uuid: str
    product: str
    memory_mib: int
    bus_id: str  # "0000:3b:00.0", as sysfs names the PCI device
    numa: int = -1  # -1 when the platform does not say
    pcie_switch: str = ""  # the upstream port of the PCIe switch above it (kgpu.agent.sysfs)
    mig: bool = False  # MIG mode on: the GPU is offered as slices, not whole
    problem: str = ""


@dataclass(frozen=True, slots=True)
class NvLink:
    """One active NVLink of a GPU: what is at its other end."""

    remote_bus_id: str
    remote_is_switch: bool


@dataclass(frozen=True, slots=True)
class Xid:
    """A critical XID event: the driver's report of an error on GPU ``index``."""

    index: int
    code: int


class GpuProbe(Protocol):
    """A GPU library, opened. Indexes run over ``range(count())``."""

    def driver_version(self) -> str: ...

    def count(self) -> int: ...

    def gpu(self, index: int) -> GpuFacts:
        """Raises GpuUnreadable when the GPU cannot be read at all."""
        ...

    def nvlinks(self, index: int) -> list[NvLink]:
        """The GPU's active NVLinks; empty where it has none."""
        ...

    def nvlink_p2p(self, a: int, b: int) -> bool:
        """Whether the two GPUs reach each other over NVLink (directly or by switch)."""
        ...

    def ancestor(self, a: int, b: int) -> int:
        """The topology level of the closest common ancestor (a key of ANCESTOR_KINDS)."""
        ...

    def xids(self, timeout: float) -> list[Xid] | None:
        """Critical XID events, waiting up to ``timeout`` seconds for the first; None where
        the library cannot report them (then it does not wait)."""
        ...

    def close(self) -> None: ...

"""The GPU probe over NVML (``nvidia-ml-py``, NVIDIA's own binding of libnvidia-ml).

Only reads: the agent never changes a GPU's settings. A query a GPU does not support (no
NVLink on a PCIe card, no row remapping before Ampere, no NUMA id on an older driver) is
an answer ("none"), not an error; a GPU that stops answering is reported unhealthy by
the inventory, with NVML's words for why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml

from kgpu.agent.probe import GpuFacts, GpuUnreadable, NvLink, ProbeError, Xid
from kgpu.agent.sysfs import numa_node, pcie_switch

_MIB = 1 << 20
_NO_DRIVER = (
    "NVML cannot be used ({why}): run the agent on a node with the NVIDIA driver, in a "
    "container to which the NVIDIA runtime gives the driver's libraries "
    "(NVIDIA_DRIVER_CAPABILITIES=utility)"
)


def sysfs_bus_id(nvml_bus_id: str | bytes) -> str:
    """NVML's "00000000:3B:00.0" as sysfs and the kubelet write it: "0000:3b:00.0"."""
    parts = _text(nvml_bus_id).strip().lower().split(":")
    domain = parts[0] if len(parts) == 3 else "0"
    return f"{int(domain, 16):04x}:{':'.join(parts[-2:])}"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class NvmlProbe:
    """NVML, initialised on construction; ``close`` shuts it down."""

    def __init__(self, sysfs: Path = Path("/sys")) -> None:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise ProbeError(_NO_DRIVER.format(why=exc)) from exc
        self._sysfs = sysfs
        self._handles: dict[int, Any] = {}
        self._events: Any = None
        self._watching: bool | None = None  # None: not tried yet

    def close(self) -> None:
        if self._events is not None:
            pynvml.nvmlEventSetFree(self._events)
            self._events = None
        pynvml.nvmlShutdown()

    def __enter__(self) -> NvmlProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def driver_version(self) -> str:
        try:
            return _text(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError as exc:
            raise ProbeError(f"NVML cannot tell the driver's version: {exc}") from exc

    def count(self) -> int:
        try:
            return int(pynvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            raise ProbeError(f"NVML cannot count the GPUs: {exc}") from exc

    def _handle(self, index: int) -> Any:
        handle = self._handles.get(index)
        if handle is None:
            try:
                handle = self._handles[index] = pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError as exc:
                raise GpuUnreadable(f"NVML cannot open GPU {index}: {exc}") from exc
        return handle

    def gpu(self, index: int) -> GpuFacts:
        handle = self._handle(index)
        try:
            bus_id = sysfs_bus_id(pynvml.nvmlDeviceGetPciInfo(handle).busId)
            facts = GpuFacts(
                index=index,
                minor=int(pynvml.nvmlDeviceGetMinorNumber(handle)),
                uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                product=_text(pynvml.nvmlDeviceGetName(handle)),
                memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // _MIB,
                bus_id=bus_id,
                numa=self._numa(handle, bus_id),
                pcie_switch=pcie_switch(self._sysfs, bus_id),
                mig=self._mig(handle),
                problem=self._problem(handle),
            )
        except pynvml.NVMLError as exc:
            # A handle that stops answering is dropped, so a GPU back from a reset is
            # opened afresh next round.
            self._handles.pop(index, None)
            raise GpuUnreadable(f"NVML cannot read GPU {index}: {exc}") from exc
        return facts

    def _numa(self, handle: Any, bus_id: str) -> int:
        # The NUMA node the GPU hangs off, as the kernel and nvidia-smi's "NUMA Affinity"
        # say. (nvmlDeviceGetNumaNodeId is another thing: the node of the GPU's own memory
        # on coherent CPU-GPU machines, N/A elsewhere.)
        node = numa_node(self._sysfs, bus_id)
        if node >= 0:
            return node
        # Where the kernel does not say (virtual machines), the driver's affinity may.
        try:
            words = pynvml.nvmlDeviceGetMemoryAffinity(handle, 4, pynvml.NVML_AFFINITY_SCOPE_NODE)
        except pynvml.NVMLError:
            return -1
        nodes = [64 * w + b for w, word in enumerate(words) for b in range(64) if word >> b & 1]
        return nodes[0] if len(nodes) == 1 else -1

    @staticmethod
    def _mig(handle: Any) -> bool:
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        except pynvml.NVMLError:
            return False  # a GPU without MIG
        return bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)

    @staticmethod
    def _problem(handle: Any) -> str:
        # A failed row remapping means memory the GPU could not repair: the driver's own
        # guidance is to stop using the GPU until it is reset or replaced. A pending one
        # still runs correctly (the bad rows are contained) and is left to the operator.
        try:
            _corr, _unc, _pending, failed = pynvml.nvmlDeviceGetRemappedRows(handle)
        except pynvml.NVMLError:
            return ""
        return "row remapping failed: GPU memory has uncorrectable errors" if failed else ""

    def nvlinks(self, index: int) -> list[NvLink]:
        handle = self._handle(index)
        out = []
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            try:
                if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                    continue
                remote = sysfs_bus_id(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)
            except pynvml.NVMLError:
                continue  # no such link, or none on this GPU
            try:
                kind = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
            except pynvml.NVMLError:
                kind = pynvml.NVML_NVLINK_DEVICE_TYPE_UNKNOWN
            out.append(NvLink(remote, kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH))
        return out

    def nvlink_p2p(self, a: int, b: int) -> bool:
        try:
            status = pynvml.nvmlDeviceGetP2PStatus(
                self._handle(a), self._handle(b), pynvml.NVML_P2P_CAPS_INDEX_NVLINK
            )
        except pynvml.NVMLError:
            return False
        return bool(status == pynvml.NVML_P2P_STATUS_OK)

    def ancestor(self, a: int, b: int) -> int:
        try:
            level = pynvml.nvmlDeviceGetTopologyCommonAncestor(self._handle(a), self._handle(b))
        except pynvml.NVMLError:
            return int(pynvml.NVML_TOPOLOGY_SYSTEM)
        return int(level)

    def _event_set(self) -> Any:
        """NVML's event set with every GPU that can report critical XIDs registered; None
        where none can (virtual GPUs, some drivers)."""
        if self._watching is None:
            try:
                count = self.count()
            except ProbeError:
                return None  # NVML is not answering now: try again at the next pause
            self._watching = False
            try:
                events = pynvml.nvmlEventSetCreate()
            except pynvml.NVMLError:
                return None
            registered = 0
            for index in range(count):
                try:
                    pynvml.nvmlDeviceRegisterEvents(
                        self._handle(index), pynvml.nvmlEventTypeXidCriticalError, events
                    )
                    registered += 1
                except (pynvml.NVMLError, GpuUnreadable):
                    pass  # this GPU cannot report them; its health is still read each round
            if registered:
                self._events, self._watching = events, True
            else:
                pynvml.nvmlEventSetFree(events)
        return self._events

    def xids(self, timeout: float) -> list[Xid] | None:
        events = self._event_set()
        if events is None:
            return None
        found: list[Xid] = []
        wait_ms = max(0, int(timeout * 1000))
        while True:
            try:
                data = pynvml.nvmlEventSetWait_v2(events, wait_ms)
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_TIMEOUT:
                    return found  # nothing (more) happened
                # The event set itself failed: stop watching rather than fail again at once,
                # round after round; each round still reads every GPU's health.
                pynvml.nvmlEventSetFree(events)
                self._events = None
                return found or None
            if data.eventType == pynvml.nvmlEventTypeXidCriticalError:
                try:
                    index = int(pynvml.nvmlDeviceGetIndex(data.device))
                except pynvml.NVMLError:
                    continue
                found.append(Xid(index, int(data.eventData)))
            wait_ms = 0  # take what else is queued, without waiting again

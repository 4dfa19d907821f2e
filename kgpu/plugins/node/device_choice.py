"""What every policy's choice of GPUs is checked against: the node's devices.

:class:`DeviceChoice` wraps whichever choice a profile names (the registry does this for
every scheduler), because a policy knows compute shares and nothing else:

- whole GPUs on a node whose GPU links are known go to the best-connected idle set
  (``kgpu.model.topology``): a 4-GPU pod inside one NVLink island, a 2-GPU pod on an
  NVLink pair rather than on two unconnected GPUs;
- a request the policy cannot judge alone (a share on a node where memory may run out
  first, a memory-sized or MPS request, whole GPUs of a minimum memory) keeps the policy's
  pick if that GPU can take it, else gets the tightest GPU that can;
- MIG instances are not GPU slots: none are chosen.

Plain requests on nodes without topology go straight to the policy, so a trace replays
exactly as before. A node's row holds a handful of GPU slots, so the choice runs in plain
Python over the row as a list: numpy's overhead per call would cost more than the work.
"""

from __future__ import annotations

from kgpu.framework.interfaces import GpuChoicePlugin
from kgpu.model.gpu import GpuKind
from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.plugins.node.gpu_fit import row_fits
from kgpu.plugins.node.gpu_slots import linked_gpus
from kgpu.state.cluster import ClusterState


class DeviceChoice:
    """A policy's GPU choice, held to what the node's devices allow (see the module)."""

    def __init__(self, inner: GpuChoicePlugin) -> None:
        self.inner = inner
        self.name = inner.name

    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        req = pod.gpu
        if req.proportional:
            # Plain requests: the policy alone (as a trace replays), but for NVLink sets of
            # whole GPUs, and for shares where memory might run out before compute.
            if req.milli == MILLI_PER_GPU:
                if state.links[node] is not None:
                    linked = linked_gpus(state, node, req.count)
                    if linked is not None:
                        return linked[0]
                return self.inner.choose_gpus(state, pod, node)
            if not state.odd_total or not state.gpu_odd[node]:
                return self.inner.choose_gpus(state, pod, node)
        if req.kind is GpuKind.MIG:
            return ()
        whole = req.kind is GpuKind.GPU and req.milli == MILLI_PER_GPU
        row, _, needs = row_fits(state, req, node)
        if whole:
            allowed = sum(1 << g for g, ok in enumerate(row) if ok)
            linked = linked_gpus(state, node, req.count, allowed)
            if linked is not None:
                return linked[0]
            return tuple([g for g, ok in enumerate(row) if ok][: req.count])
        if req.milli:
            picked = self.inner.choose_gpus(state, pod, node)
            if len(picked) == 1 and 0 <= picked[0] < len(row) and row[picked[0]]:
                return picked
        # The tightest GPU that can take it: least compute, then least memory left after.
        free = state.gpu_free[node].tolist()
        mem_free = state.gpu_mem_free[node].tolist()
        left = [
            (free[g] - need[0], mem_free[g] - need[1], g)
            for g, (ok, need) in enumerate(zip(row, needs, strict=True))
            if ok and need is not None
        ]
        return (min(left)[2],) if left else ()


_: type[GpuChoicePlugin] = DeviceChoice

"""Which GPUs of the chosen node a pod gets (for policies that do not choose themselves),
and what every policy's choice is checked against: the node's devices.

Whole-GPU requests take the lowest-index fully idle GPUs. A share of one GPU goes to the
tightest GPU that fits (lowest index among equals) with ``GpuTightest``, or to a GPU drawn
uniformly among those that fit with ``GpuRandom``.

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
exactly as before. A node's row holds a handful of GPU slots, so the choices run in plain
Python over the row as a list: numpy's overhead per call would cost more than the work.
"""

from __future__ import annotations

import numpy as np

from kgpu.framework.interfaces import GpuChoicePlugin
from kgpu.model.gpu import GpuKind
from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.plugins import names
from kgpu.plugins.gpu_fit import row_fits
from kgpu.state.cluster import ClusterState


def lowest_idle_gpus(state: ClusterState, node: int, count: int) -> tuple[int, ...]:
    free = state.gpu_free[node].tolist()
    return tuple([g for g, milli in enumerate(free) if milli == MILLI_PER_GPU][:count])


def tightest_gpu(state: ClusterState, node: int, milli: int) -> int:
    """The GPU with the least free milli that still covers ``milli``, lowest index first."""
    free = state.gpu_free[node].tolist()
    return min(((f, g) for g, f in enumerate(free) if f >= milli), default=(0, 0))[1]


def linked_gpus(
    state: ClusterState, node: int, count: int, allowed: int = -1
) -> tuple[tuple[int, ...], int] | None:
    """The best-connected ``count`` idle GPUs of a node with known links (limited to the
    ``allowed`` bit mask), and their slowest link; None if fewer are idle."""
    links = state.links[node]
    if links is None:
        return None
    free = state.gpu_free[node].tolist()
    idle = sum(1 << g for g in range(links.size) if free[g] == MILLI_PER_GPU) & allowed
    return links.plan().choose(idle, count)


class GpuTightest:
    name = names.GPU_TIGHTEST

    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        if pod.gpu.is_shared:
            return (tightest_gpu(state, node, pod.gpu.milli),)
        return lowest_idle_gpus(state, node, pod.gpu.count)


class GpuRandom:
    name = names.GPU_RANDOM

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        if pod.gpu.is_shared:
            fits = np.flatnonzero(state.gpu_free[node] >= pod.gpu.milli)
            return (int(fits[self.rng.integers(len(fits))]),)
        return lowest_idle_gpus(state, node, pod.gpu.count)


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


_: type[GpuChoicePlugin]
_ = GpuTightest
_ = GpuRandom
_ = DeviceChoice

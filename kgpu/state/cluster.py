"""The cluster as arrays over nodes and GPUs, with exact allocate and release.

Everything that filters and scores read for all nodes at once lives in numpy arrays indexed
by node (and by GPU slot for per-GPU figures), so a scheduling cycle is a few vector
operations instead of a Python loop over thousands of nodes. Nodes have at most
``max_gpus`` GPU slots; slots past a node's GPU count hold 0 free milli and never match a
GPU request.

Invariants, checked on every change (a violation is a bug and raises
:class:`AllocationError`):

- 0 <= free <= capacity for CPU, memory, pod count and every GPU's milli;
- a pod is allocated at most once, and release gives back exactly what allocate took;
- ``gpu_free_total`` is the row sum of ``gpu_free``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kgpu.model.node import NodeInfo, NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.units import MILLI_PER_GPU

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class AllocationError(RuntimeError):
    """An allocate or release that would break the state's invariants (a bug, not bad input)."""


# Serial numbers tell states apart where id() could be reused by a later object.
_serials = itertools.count(1)


@dataclass(frozen=True, slots=True)
class Allocation:
    """What one pod holds: its node, its GPUs and the milli it takes on each."""

    pod: PodKey
    node: int
    gpus: tuple[int, ...]
    gpu_milli: int
    cpu_milli: int
    memory_mib: int


class ClusterState:
    """Nodes, their free resources and the pods placed on them."""

    def __init__(self, nodes: Sequence[NodeInfo], max_gpus: int | None = None) -> None:
        self.nodes: list[NodeInfo] = list(nodes)
        self.index: dict[NodeName, int] = {}
        for i, node in enumerate(self.nodes):
            if node.name in self.index:
                raise ValueError(f"node {node.name!r} is listed twice")
            self.index[node.name] = i
        n = len(self.nodes)
        widest = max((node.gpu_count for node in self.nodes), default=0)
        self.max_gpus = max(1, widest if max_gpus is None else max(max_gpus, widest))
        self.models: list[str] = sorted({node.gpu_model for node in self.nodes if node.gpu_model})
        self.model_ids: dict[str, int] = {m: i for i, m in enumerate(self.models)}

        self.cpu_cap = np.array([nd.cpu_milli for nd in self.nodes], dtype=np.int64)
        self.mem_cap = np.array([nd.memory_mib for nd in self.nodes], dtype=np.int64)
        self.max_pods = np.array([nd.max_pods for nd in self.nodes], dtype=np.int64)
        self.gpu_count = np.array([nd.gpu_count for nd in self.nodes], dtype=np.int64)
        self.gpu_mem_mib = np.array([nd.gpu_memory_mib for nd in self.nodes], dtype=np.int64)
        self.model_id = np.array(
            [self.model_ids.get(nd.gpu_model, -1) for nd in self.nodes], dtype=np.int64
        )
        self.schedulable = np.array([not nd.unschedulable for nd in self.nodes], dtype=np.bool_)
        self.tainted = np.array([bool(nd.taints) for nd in self.nodes], dtype=np.bool_)
        # Most clusters cordon and taint nothing; filters then skip their per-node work.
        self.any_cordoned = not bool(self.schedulable.all())
        self.any_tainted = bool(self.tainted.any())
        slots = np.arange(self.max_gpus)
        self.gpu_exists: BoolArray = slots[None, :] < self.gpu_count[:, None]
        self.gpu_cap: IntArray = np.where(self.gpu_exists, MILLI_PER_GPU, 0).astype(np.int64)

        self.cpu_free = self.cpu_cap.copy()
        self.mem_free = self.mem_cap.copy()
        self.pods = np.zeros(n, dtype=np.int64)
        self.gpu_free = self.gpu_cap.copy()
        self.gpu_free_total = self.gpu_free.sum(axis=1)
        # Row summaries that GPU filters read for every node; kept in step by _apply.
        self.gpu_idle_count = (self.gpu_free == MILLI_PER_GPU).sum(axis=1)
        self.gpu_max_free = self.gpu_free.max(axis=1)

        # How many GPU pods of each kind a node holds: column 0 counts pods sharing a GPU,
        # column k pods holding k whole GPUs. Packing policies read it.
        self.gpu_pod_kinds = np.zeros((n, self.max_gpus + 1), dtype=np.int64)

        self.allocations: dict[PodKey, Allocation] = {}
        # Every allocate and release ticks ``clock`` and stamps the node's ``node_clock``, so
        # a per-shape cache that last looked at clock t recomputes just the nodes stamped
        # after t (see framework.shape_cache). Nodes and their fixed facts never change.
        self.serial = next(_serials)
        self.clock = 0
        self.node_clock = np.zeros(n, dtype=np.int64)
        self._label_masks: dict[tuple[str, str], BoolArray] = {}

    # ----------------------------------------------------------------- reading

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def total_gpu_milli(self) -> int:
        return int(self.gpu_cap.sum())

    @property
    def used_gpu_milli(self) -> int:
        return self.total_gpu_milli - int(self.gpu_free_total.sum())

    def label_mask(self, key: str, value: str) -> BoolArray:
        """Nodes whose label ``key`` equals ``value``; labels are fixed per node, so cached."""
        mask = self._label_masks.get((key, value))
        if mask is None:
            mask = np.array([nd.labels.get(key) == value for nd in self.nodes], dtype=np.bool_)
            self._label_masks[(key, value)] = mask
        return mask

    def node_gpus_free(self, node: int) -> list[int]:
        return [int(v) for v in self.gpu_free[node, : self.gpu_count[node]]]

    def allocation(self, pod: PodKey) -> Allocation | None:
        return self.allocations.get(pod)

    # ----------------------------------------------------------------- changing

    def allocate(self, pod: PodSpec, node: int, gpus: Iterable[int] = ()) -> Allocation:
        """Give ``pod`` its resources on ``node`` and on the GPU slots ``gpus``."""
        if pod.key in self.allocations:
            raise AllocationError(f"pod {pod.key} is already allocated")
        gpu_ids = tuple(sorted(map(int, gpus)))
        want = pod.gpu.count
        if len(gpu_ids) != want or len(set(gpu_ids)) != want:
            raise AllocationError(f"pod {pod.key} needs {want} distinct GPUs, got {gpu_ids}")
        if self.cpu_free[node] < pod.cpu_milli or self.mem_free[node] < pod.memory_mib:
            raise AllocationError(f"pod {pod.key} does not fit node {self.nodes[node].name}")
        if self.pods[node] >= self.max_pods[node]:
            raise AllocationError(f"node {self.nodes[node].name} is at its pod limit")
        milli = pod.gpu.milli
        if gpu_ids:
            count = int(self.gpu_count[node])
            free = self.gpu_free[node].tolist()
            for g in gpu_ids:
                if not 0 <= g < count or free[g] < milli:
                    raise AllocationError(
                        f"pod {pod.key} needs {milli} milli on GPU {g} of {self.nodes[node].name}"
                    )
        alloc = Allocation(pod.key, node, gpu_ids, milli, pod.cpu_milli, pod.memory_mib)
        self._apply(alloc, -1)
        self.allocations[pod.key] = alloc
        return alloc

    def release(self, pod: PodKey) -> Allocation:
        """Give back everything ``pod`` holds."""
        alloc = self.allocations.pop(pod, None)
        if alloc is None:
            raise AllocationError(f"pod {pod} holds nothing to release")
        self._apply(alloc, +1)
        return alloc

    def _apply(self, alloc: Allocation, sign: int) -> None:
        n = alloc.node
        self.cpu_free[n] += sign * alloc.cpu_milli
        self.mem_free[n] += sign * alloc.memory_mib
        self.pods[n] -= sign
        if alloc.gpus:
            # One row of at most a few dozen slots: Python over its list beats numpy here.
            milli = sign * alloc.gpu_milli
            row = self.gpu_free[n]
            free = row.tolist()
            for g in alloc.gpus:
                free[g] += milli
            row[:] = free
            self.gpu_free_total[n] += milli * len(alloc.gpus)
            self.gpu_idle_count[n] = free.count(MILLI_PER_GPU)
            self.gpu_max_free[n] = max(free)
            kind = 0 if alloc.gpu_milli < MILLI_PER_GPU else len(alloc.gpus)
            self.gpu_pod_kinds[n, kind] -= sign
        self.clock += 1
        self.node_clock[n] = self.clock

    def check_invariants(self) -> None:
        """Raise :class:`AllocationError` if any free figure left its bounds."""
        problems = []
        if (self.cpu_free < 0).any() or (self.cpu_free > self.cpu_cap).any():
            problems.append("CPU")
        if (self.mem_free < 0).any() or (self.mem_free > self.mem_cap).any():
            problems.append("memory")
        if (self.gpu_free < 0).any() or (self.gpu_free > self.gpu_cap).any():
            problems.append("GPU milli")
        if (self.gpu_free_total != self.gpu_free.sum(axis=1)).any():
            problems.append("GPU totals")
        if (self.gpu_idle_count != (self.gpu_free == MILLI_PER_GPU).sum(axis=1)).any():
            problems.append("idle GPU counts")
        if (self.gpu_max_free != self.gpu_free.max(axis=1)).any():
            problems.append("largest free GPU share")
        if (self.gpu_pod_kinds < 0).any() or (self.pods < 0).any():
            problems.append("pod counts")
        if problems:
            raise AllocationError("state out of bounds: " + ", ".join(problems))

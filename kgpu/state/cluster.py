"""The cluster as arrays over nodes and GPUs, with exact allocate and release.

Everything that filters and scores read for all nodes at once lives in numpy arrays indexed
by node (and by GPU slot for per-GPU figures), so a scheduling cycle is a few vector
operations instead of a Python loop over thousands of nodes. Nodes have at most
``max_gpus`` GPU slots; slots past a node's GPU count hold 0 free milli and never match a
GPU request.

Each GPU is accounted by compute (``gpu_free``, milli) and memory (``gpu_mem_free``, MiB),
an unhealthy one has neither; MIG instances, RDMA and FPGA devices per node (:mod:`.devices`).

Invariants, checked on every change (a violation is a bug and raises
:class:`AllocationError`):

- 0 <= free <= capacity for CPU, memory, pod count, every GPU's milli and MiB, MIG, RDMA
  and FPGA devices;
- a pod is allocated at most once, and release gives back exactly what allocate took;
- ``gpu_free_total`` is the row sum of ``gpu_free``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from kgpu.model.card import node_cards
from kgpu.model.devices import NodeDevices
from kgpu.model.gpu import GpuKind
from kgpu.model.node import NodeInfo, NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.resources import MILLI
from kgpu.model.topology import GpuLinks, nearest
from kgpu.model.units import MILLI_PER_GPU
from kgpu.state.allocation_error import AllocationError
from kgpu.state.device_tables import DeviceTables, free_devices, gpu_need
from kgpu.state.records import Allocation

__all__ = ["Allocation", "AllocationError", "ClusterState"]

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


# Serial numbers tell states apart where id() could be reused by a later object.
_serials = itertools.count(1)


def _flat(array: IntArray) -> memoryview:
    """A flat view of ``array``'s own memory (row after row), whose items are Python ints."""
    if array.dtype != np.int64 or not array.flags.c_contiguous:
        raise TypeError(f"a flat view needs a C-contiguous int64 array, not {array.dtype}")
    return array.reshape(-1).data  # a C-contiguous array's reshape is a view of it


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
        tables = DeviceTables(self.nodes, self.max_gpus)
        self.gpu_exists: BoolArray = (slots[None, :] < self.gpu_count[:, None]) & tables.exists
        self.gpu_cap: IntArray = np.where(self.gpu_exists, MILLI_PER_GPU, 0).astype(np.int64)
        self.devices: list[NodeDevices] = tables.devices
        self.gpu_mem_cap: IntArray = np.where(self.gpu_exists, tables.memory_cap, 0)
        self.gpu_mem_free = self.gpu_mem_cap.copy()
        self.gpu_odd = np.zeros(n, dtype=np.int64)  # allocations whose memory is not proportional
        self.odd_total = 0  # their sum: 0 lets filters skip memory altogether
        self.gpu_replicas: IntArray = tables.replicas
        self.mig_profiles, self.mig_ids = tables.mig_profiles, tables.mig_ids
        self.mig_cap: IntArray = tables.mig_cap
        self.mig_free = self.mig_cap.copy()
        self.gpu_unhealthy: IntArray = tables.unhealthy
        self.gpu_unhealthy_total = int(self.gpu_unhealthy.sum())
        self.rdma_cap, self.fpga_cap = tables.rdma_cap, tables.fpga_cap
        self.rdma_free, self.fpga_free = self.rdma_cap.copy(), self.fpga_cap.copy()
        self._busy: dict[tuple[str, int], set[int]] = {}  # (kind, node) -> device slots held
        self.links: list[GpuLinks | None] = tables.links
        self.has_links: BoolArray = tables.has_links

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
        # The node of each of the latest ticks (``changed_since``): a cache that looked at
        # clock t a few ticks ago finds what changed since without comparing every stamp.
        self._ticks: list[int] = []
        self._ticks_from = 0  # the clock before the first of ``_ticks``
        self._label_masks: dict[tuple[str, str], BoolArray] = {}
        self._offered_cards: dict[str, int] | None = None  # made when first asked

        # The figures every change writes, seen again flat through memoryviews of the same
        # memory: one node's figures read and written as Python ints, where indexing the
        # arrays makes a numpy scalar of each (most of a change's cost). The arrays are
        # never rebound, only written in place, so the views stay theirs.
        # An int, not the shape's item (typed as anything): every index into the (node,
        # slot) views is worked out from it, natively only if it is an int.
        self._width: int = int(self.gpu_free.shape[1])
        if self.gpu_mem_free.shape != self.gpu_free.shape:
            raise ValueError(
                f"GPU memory by slot {self.gpu_mem_free.shape}, milli {self.gpu_free.shape}"
            )
        self._cpu_v = _flat(self.cpu_free)
        self._mem_v = _flat(self.mem_free)
        self._pods_v = _flat(self.pods)
        self._max_pods_v = _flat(self.max_pods)
        self._gpu_v = _flat(self.gpu_free)
        self._gpu_mem_v = _flat(self.gpu_mem_free)
        self._gpu_total_v = _flat(self.gpu_free_total)
        self._idle_v = _flat(self.gpu_idle_count)
        self._max_free_v = _flat(self.gpu_max_free)
        self._kinds_v = _flat(self.gpu_pod_kinds)
        self._odd_v = _flat(self.gpu_odd)
        self._clock_v = _flat(self.node_clock)
        self._count_v = _flat(self.gpu_count)
        self._mem_cap_v = _flat(self.gpu_mem_cap)

    # ----------------------------------------------------------------- reading

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def total_gpu_milli(self) -> int:
        return int(self.gpu_cap.sum())

    @property
    def used_gpu_milli(self) -> int:
        return self.total_gpu_milli - int(self.gpu_free_total.sum())

    def offered_cards(self) -> Mapping[str, int]:
        """The milli-cards the schedulable nodes offer, by card name (``node_cards``, in the
        order the nodes first offer them): fixed facts, so worked out once. Every session
        asks as it opens (fair shares) and as it closes (queue figures), and it is a walk
        of every node's labels."""
        if self._offered_cards is None:
            offered: dict[str, int] = {}
            for n in self.schedulable.nonzero()[0].tolist():
                info = self.nodes[n]
                for card in node_cards(info.labels, info.gpu_count):
                    offered[card.name] = offered.get(card.name, 0) + card.count * MILLI
            self._offered_cards = offered
        return self._offered_cards

    def label_mask(self, key: str, value: str) -> BoolArray:
        """Nodes whose label ``key`` equals ``value``; labels are fixed per node, so cached."""
        mask = self._label_masks.get((key, value))
        if mask is None:
            mask = np.array([nd.labels.get(key) == value for nd in self.nodes], dtype=np.bool_)
            self._label_masks[(key, value)] = mask
        return mask

    # One node's figures as Python ints, read through the flat views (see __init__): the
    # victim search and the placer ask them of one node at a time, thousands of times a
    # session, where indexing the arrays makes a numpy scalar of each.

    def room(self, node: int) -> tuple[int, int, int]:
        """``node``'s free milli-CPU, free MiB and free pod slots."""
        return self._cpu_v[node], self._mem_v[node], self._max_pods_v[node] - self._pods_v[node]

    def gpu_row(self, node: int) -> list[int]:
        """The free milli of each GPU slot of ``node`` (slots past its GPUs hold 0)."""
        return self._row(self._gpu_v, node)

    def gpu_summary(self, node: int) -> tuple[int, int]:
        """How many of ``node``'s GPUs are wholly free, and the most free milli of one."""
        return self._idle_v[node], self._max_free_v[node]

    def idle_room(self, node: int) -> tuple[int, int, int]:
        """``node``'s free milli-GPU over all its GPUs, free milli-CPU and free MiB."""
        return self._gpu_total_v[node], self._cpu_v[node], self._mem_v[node]

    def gpu_free_at(self, node: int, slot: int) -> int:
        """The free milli of GPU ``slot`` of ``node``."""
        free: int = self._gpu_v[node * self._width + slot]
        return free

    def stamp(self, node: int) -> int:
        """``node``'s ``node_clock``: the ``clock`` of its last change."""
        return self._clock_v[node]

    def changed_since(self, clock: int, most: int) -> list[int] | None:
        """The nodes whose ``node_clock`` is later than ``clock`` (ascending), found from
        the latest ticks if there are at most ``most`` of them since, else None: then
        ``node_clock > clock`` over every node costs less. (A trial's nodes whose stamps
        ``restamp`` put back are ticks that show no change.)"""
        if self.clock - clock > most or clock < self._ticks_from:
            return None
        stamps = self._clock_v
        start = clock - self._ticks_from
        return sorted({n for n in self._ticks[start:] if stamps[n] > clock})

    def moved(self, seen: IntArray, nodes: IntArray) -> tuple[IntArray, IntArray]:
        """For a model that keeps per-node figures with ``seen`` (each node's
        ``node_clock`` when they were worked out): the nodes to work out again for
        ``nodes``, and their clocks now. Those of ``nodes`` whose clock moved; where
        ``nodes`` are most of the cluster, every node whose clock moved, found in one pass
        over the clocks (gathering both clocks of each node asked costs more, and a node's
        figures are its own: one outside ``nodes`` is only worked out sooner)."""
        clock = self.node_clock
        if 4 * len(nodes) >= len(clock):
            changed = (seen != clock).nonzero()[0]
            return changed, clock.take(changed)
        clocks = clock[nodes]
        stale = seen[nodes] != clocks
        if not np.count_nonzero(stale):  # cheaper than .any(), a Python-level wrapper
            return nodes[:0], clocks[:0]
        return nodes[stale], clocks[stale]

    def node_gpus_free(self, node: int) -> list[int]:
        return [int(v) for v in self.gpu_free[node, : self.gpu_count[node]]]

    def allocation(self, pod: PodKey) -> Allocation | None:
        return self.allocations.get(pod)

    def node_gpus_memory_free(self, node: int) -> list[int]:
        return [int(v) for v in self.gpu_mem_free[node, : self.gpu_count[node]]]

    def gpu_need(self, pod: PodSpec, node: int, gpu: int) -> tuple[int, int] | None:
        """(milli, MiB) the pod takes of GPU slot ``gpu`` of ``node``; None if it cannot."""
        cap = int(self.gpu_mem_cap[node, gpu])
        return gpu_need(pod.gpu, cap, int(self.gpu_replicas[node]))

    def busy(self, kind: str, node: int) -> set[int]:
        """The RDMA ("rdma") or FPGA ("fpga") device slots of ``node`` that pods hold."""
        return self._busy.get((kind, node), set())

    # ----------------------------------------------------------------- changing

    def allocate(
        self,
        pod: PodSpec,
        node: int,
        gpus: Iterable[int] = (),
        *,
        need: tuple[int, int] | None = None,
        rdma: Sequence[int] | None = None,
        fpga: Sequence[int] | None = None,
    ) -> Allocation:
        """Give ``pod`` its resources on ``node`` and on the GPU slots ``gpus``.

        ``need`` (milli, MiB per GPU) overrides what the request takes of each GPU: a record
        read back says exactly what was held. RDMA and FPGA devices not named are chosen
        next to the pod's GPUs (``topology.nearest``).
        """
        alloc = self._plan(pod, node, tuple(sorted(map(int, gpus))), need, rdma, fpga)
        self._apply(alloc, -1)
        self.allocations[pod.key] = alloc
        return alloc

    def fits(
        self,
        pod: PodSpec,
        node: int,
        gpus: Iterable[int] = (),
        need: tuple[int, int] | None = None,
    ) -> str:
        """Why ``allocate`` would refuse this, or "" if it would not (nothing changes)."""
        try:
            self._plan(pod, node, tuple(sorted(map(int, gpus))), need, None, None)
        except AllocationError as exc:
            return str(exc)
        return ""

    def _plan(
        self,
        pod: PodSpec,
        node: int,
        gpu_ids: tuple[int, ...],
        need: tuple[int, int] | None,
        rdma: Sequence[int] | None,
        fpga: Sequence[int] | None,
    ) -> Allocation:
        if pod.key in self.allocations:
            raise AllocationError(f"pod {pod.key} is already allocated")
        req = pod.gpu
        want = req.gpu_slots
        if len(gpu_ids) != want or (want > 1 and len(set(gpu_ids)) != want):
            raise AllocationError(f"pod {pod.key} needs {want} distinct GPUs, got {gpu_ids}")
        # Named ints (see _apply): compared natively, not as objects.
        free_cpu: int = self._cpu_v[node]
        free_mem: int = self._mem_v[node]
        if free_cpu < pod.cpu_milli or free_mem < pod.memory_mib:
            raise AllocationError(f"pod {pod.key} does not fit node {self.nodes[node].name}")
        pods: int = self._pods_v[node]
        max_pods: int = self._max_pods_v[node]
        if pods >= max_pods:
            raise AllocationError(f"node {self.nodes[node].name} is at its pod limit")
        if req.plain and need is None and rdma is None and fpga is None:
            return self._plan_plain(pod, node, gpu_ids)
        milli, odd = 0, False
        memory: tuple[int, ...] = ()
        if gpu_ids:
            needs = self._gpu_needs(pod, node, gpu_ids, need)
            milli = needs[0][0]
            memory = tuple([m for _, m in needs])
            odd = need is not None or not req.proportional
        mig, mig_count = -1, 0
        if req.kind is GpuKind.MIG:
            mig, mig_count = self.mig_ids.get(req.mig_profile, -1), req.count
            if mig < 0 or self.mig_free[node, mig] < mig_count:
                raise AllocationError(
                    f"pod {pod.key} needs {mig_count} MIG {req.mig_profile} on {self.nodes[node].name}"
                )
        return Allocation(
            pod.key, node, gpu_ids, milli, pod.cpu_milli, pod.memory_mib, memory, odd, mig,
            mig_count,
            self._devices("rdma", pod, node, gpu_ids, req.rdma, rdma) if req.rdma or rdma else (),
            self._devices("fpga", pod, node, gpu_ids, req.fpga, fpga) if req.fpga or fpga else (),
        )  # fmt: skip

    def _plan_plain(self, pod: PodSpec, node: int, gpu_ids: tuple[int, ...]) -> Allocation:
        """The hot path (every trace pod): whole GPUs or a share whose memory follows."""
        if not gpu_ids:
            return Allocation(pod.key, node, gpu_ids, 0, pod.cpu_milli, pod.memory_mib)
        milli = pod.gpu.milli
        count: int = self._count_v[node]
        # Each GPU's figures read alone (most pods take one): the whole row is a slice
        # and a list of every slot.
        free_v, caps, start = self._gpu_v, self._mem_cap_v, node * self._width
        mibs: list[int] = []
        for g in gpu_ids:
            free: int = free_v[start + g] if 0 <= g < count else -1
            if free < milli:
                raise AllocationError(
                    f"pod {pod.key} needs {milli} milli on GPU {g} of {self.nodes[node].name}"
                )
            cap: int = caps[start + g]
            mibs.append(cap * milli // MILLI_PER_GPU)
        memory = tuple(mibs)
        if self.odd_total:  # elsewhere compute implies memory
            odd: int = self._odd_v[node]
            if odd:
                self._gpu_needs(pod, node, gpu_ids, None)
        return Allocation(pod.key, node, gpu_ids, milli, pod.cpu_milli, pod.memory_mib, memory)

    def _gpu_needs(
        self, pod: PodSpec, node: int, gpu_ids: tuple[int, ...], need: tuple[int, int] | None
    ) -> list[tuple[int, int]]:
        """What the pod takes of each of ``gpu_ids`` (sorted), checked against what is free."""
        req = pod.gpu
        count = int(self.gpu_count[node])
        caps = self.gpu_mem_cap[node].tolist()
        needs: list[tuple[int, int] | None]
        if gpu_ids[0] < 0 or gpu_ids[-1] >= count:
            g = gpu_ids[0] if gpu_ids[0] < 0 else gpu_ids[-1]
            raise AllocationError(
                f"pod {pod.key} needs {req.milli} milli on GPU {g} of {self.nodes[node].name}"
            )
        if need is not None:
            needs = [need] * len(gpu_ids)
        elif req.proportional:  # the hot path: memory is the compute share, rounded down
            share = req.milli
            needs = [(share, caps[g] * share // MILLI_PER_GPU) for g in gpu_ids]
        else:
            replicas = int(self.gpu_replicas[node])
            needs = [gpu_need(req, caps[g], replicas) for g in gpu_ids]
        free = self.gpu_free[node].tolist()
        mem_free = self.gpu_mem_free[node].tolist()
        out = []
        for g, got in zip(gpu_ids, needs, strict=True):
            if got is None or free[g] < got[0] or mem_free[g] < got[1]:
                what = "a GPU it can use" if got is None else f"{got[0]} milli"
                what += f" and {got[1]} MiB" if got and got[1] else ""
                raise AllocationError(
                    f"pod {pod.key} needs {what} on GPU {g} of {self.nodes[node].name}"
                )
            out.append(got)
        return out

    def _devices(
        self,
        kind: str,
        pod: PodSpec,
        node: int,
        gpus: tuple[int, ...],
        count: int,
        named: Sequence[int] | None,
    ) -> tuple[int, ...]:
        """The RDMA or FPGA slots the pod gets: ``named``, or the free ones nearest its GPUs."""
        if not count and not named:
            return ()
        devs = self.devices[node]
        pool = devs.rdma if kind == "rdma" else devs.fpga
        free = free_devices(pool, self.busy(kind, node))
        if named is None:
            gpu_devs = [devs.gpus[g] for g in gpus if g < len(devs.gpus)]
            chosen = nearest([(d.numa, d.pcie) for d in gpu_devs], free, count)
        else:
            chosen = tuple(sorted(set(map(int, named))))
        if len(chosen) != count or not set(chosen) <= {slot for slot, _, _ in free}:
            raise AllocationError(
                f"pod {pod.key} needs {count} free {kind} devices on {self.nodes[node].name}, "
                f"got {list(chosen)}"
            )
        return chosen

    def release(self, pod: PodKey) -> Allocation:
        """Give back everything ``pod`` holds."""
        alloc = self.allocations.pop(pod, None)
        if alloc is None:
            raise AllocationError(f"pod {pod} holds nothing to release")
        self._apply(alloc, +1)
        return alloc

    def restore(self, alloc: Allocation) -> None:
        """Put back exactly ``alloc``, as ``release`` returned it: the same GPUs, GPU memory
        and devices. Undoing a tentative eviction must not plan the pod afresh, which would
        give a pod read back with its own recorded GPU memory the request's default instead.
        Refused, changing nothing, if the pod holds something or the room is gone."""
        n = alloc.node
        if alloc.pod in self.allocations:
            raise AllocationError(f"pod {alloc.pod} is already allocated")
        # Every trial of victims puts its pods back: read through the views (see __init__),
        # each figure named an int (see _apply).
        cpu: int = self._cpu_v[n]
        memory: int = self._mem_v[n]
        pods: int = self._pods_v[n]
        max_pods: int = self._max_pods_v[n]
        short = cpu < alloc.cpu_milli or memory < alloc.memory_mib or pods >= max_pods
        gpus, gpu_memory = alloc.gpus, alloc.gpu_memory
        start = n * self._width
        for i in range(len(gpus)):  # by index: a zip is a generic call
            at = start + gpus[i]
            free: int = self._gpu_v[at]
            short = short or free < alloc.gpu_milli
            if i < len(gpu_memory):
                mib: int = self._gpu_mem_v[at]
                short = short or mib < gpu_memory[i]
        short = short or (
            (alloc.mig_count > 0 and self.mig_free[n, alloc.mig_profile] < alloc.mig_count)
            or bool(alloc.rdma and set(alloc.rdma) & self.busy("rdma", n))
            or bool(alloc.fpga and set(alloc.fpga) & self.busy("fpga", n))
        )
        if short:
            raise AllocationError(
                f"pod {alloc.pod} cannot be put back on {self.nodes[n].name}: its room is taken"
            )
        self._apply(alloc, -1)
        self.allocations[alloc.pod] = alloc

    def restamp(self, stamps: Mapping[int, int]) -> None:
        """Put nodes' ``node_clock`` stamps back to ``stamps``, taken before a trial whose
        every release was restored since (each node exactly as it was then), so that what
        was worked out of them before the trial holds again: a trial of victims otherwise
        marks its node changed for every shape's cache, whose next cycle redoes it.

        Only after a trial during which no cache that compares stamps with an earlier
        ``clock`` (``ShapeCache``: ``node_clock > seen_at``) was brought up to date: it
        would take what it saw mid-trial for the node as it is. Caches that keep the stamp
        they saw and compare for equality are safe: ``clock`` itself never goes back, so a
        stamp taken mid-trial is never seen again."""
        clocks = self._clock_v
        for n, stamp in stamps.items():
            clocks[n] = stamp

    def _row(self, view: memoryview, node: int) -> list[int]:
        """``node``'s row of a (nodes, GPU slots) figure, from its flat view."""
        start = node * self._width
        return view[start : start + self._width].tolist()

    def _apply(self, alloc: Allocation, sign: int) -> None:
        """Take ``alloc``'s resources from its node (``sign`` -1) or give them back (+1).

        Written through the flat views (see __init__): Python ints, no numpy scalars. Each
        figure read is named an int, and added to or taken from rather than multiplied by
        ``sign``: the compiled build adds items of a view (typed as anything) generically,
        and multiplies by a negative int on its slow path."""
        n = alloc.node
        gpus = alloc.gpus
        give = sign > 0
        cpu, memory = alloc.cpu_milli, alloc.memory_mib
        view = self._cpu_v
        free_cpu: int = view[n]
        view[n] = free_cpu + cpu if give else free_cpu - cpu
        view = self._mem_v
        free_mem: int = view[n]
        view[n] = free_mem + memory if give else free_mem - memory
        view = self._pods_v
        pods: int = view[n]
        view[n] = pods - sign
        if gpus:
            gpu_milli = alloc.gpu_milli
            width = self._width
            start = n * width
            view = self._gpu_v
            # The node's wholly free GPUs and largest free share follow from the slots
            # that change (each GPU is MILLI_PER_GPU at most, so one wholly free GPU is
            # the largest share); only where the largest share shrank to none wholly free
            # is the row read again.
            was_idle: int = self._idle_v[n]
            was_most: int = self._max_free_v[n]
            idle, most, shrank = was_idle, was_most, False
            for g in gpus:
                at = start + g
                old: int = view[at]
                new = old + gpu_milli if give else old - gpu_milli
                view[at] = new
                if old == MILLI_PER_GPU:
                    idle -= 1
                if new == MILLI_PER_GPU:
                    idle += 1
                if new > most:
                    most = new
                elif new < old == most:
                    shrank = True
            if idle:
                most = MILLI_PER_GPU
            elif shrank:
                # One loop over the row: ``max`` is a generic call, costing more than
                # the loop compiled.
                row = self._row(view, n)
                most = row[0]
                for v in row:
                    if v > most:
                        most = v
            if idle != was_idle:
                self._idle_v[n] = idle
            if most != was_most:
                self._max_free_v[n] = most
            view = self._gpu_total_v
            total: int = view[n]
            held = gpu_milli * len(gpus)
            view[n] = total + held if give else total - held
            kind = 0 if gpu_milli < MILLI_PER_GPU else len(gpus)
            view = self._kinds_v
            at = n * (width + 1) + kind
            kinds: int = view[at]
            view[at] = kinds - sign
            gpu_memory = alloc.gpu_memory
            if gpu_memory[0]:  # GPUs of unknown memory (a trace) account none
                view = self._gpu_mem_v
                for i in range(len(gpus)):  # by index: a zip is a generic call
                    at = start + gpus[i]
                    mib: int = view[at]
                    view[at] = mib + gpu_memory[i] if give else mib - gpu_memory[i]
            if alloc.odd:
                view = self._odd_v
                odd: int = view[n]
                view[n] = odd - sign
                self.odd_total -= sign
        if alloc.mig_count or alloc.rdma or alloc.fpga:
            self._apply_devices(alloc, sign)
        self.clock += 1
        self._clock_v[n] = self.clock
        ticks = self._ticks
        ticks.append(n)
        if len(ticks) > 4096:  # the older half goes: a cache that far behind compares stamps
            del ticks[:2048]
            self._ticks_from += 2048

    def _apply_devices(self, alloc: Allocation, sign: int) -> None:
        n = alloc.node
        if alloc.mig_count:
            self.mig_free[n, alloc.mig_profile] += sign * alloc.mig_count
        for device, held, free_count in (
            ("rdma", alloc.rdma, self.rdma_free),
            ("fpga", alloc.fpga, self.fpga_free),
        ):
            if held:
                busy = self._busy.setdefault((device, n), set())
                if sign < 0:
                    busy.update(held)
                else:
                    busy.difference_update(held)
                free_count[n] += sign * len(held)

    def check_invariants(self) -> None:
        """Raise :class:`AllocationError` if any free figure left its bounds."""
        problems = []
        if (self.cpu_free < 0).any() or (self.cpu_free > self.cpu_cap).any():
            problems.append("CPU")
        if (self.mem_free < 0).any() or (self.mem_free > self.mem_cap).any():
            problems.append("memory")
        if (self.gpu_free < 0).any() or (self.gpu_free > self.gpu_cap).any():
            problems.append("GPU milli")
        if (self.gpu_mem_free < 0).any() or (self.gpu_mem_free > self.gpu_mem_cap).any():
            problems.append("GPU memory")
        if (self.mig_free < 0).any() or (self.mig_free > self.mig_cap).any():
            problems.append("MIG instances")
        for free, cap, what in ((self.rdma_free, self.rdma_cap, "RDMA"),
                                (self.fpga_free, self.fpga_cap, "FPGA")):  # fmt: skip
            if (free < 0).any() or (free > cap).any():
                problems.append(what)
        if (self.gpu_free_total != self.gpu_free.sum(axis=1)).any():
            problems.append("GPU totals")
        if (self.gpu_idle_count != (self.gpu_free == MILLI_PER_GPU).sum(axis=1)).any():
            problems.append("idle GPU counts")
        if (self.gpu_max_free != self.gpu_free.max(axis=1)).any():
            problems.append("largest free GPU share")
        if (self.gpu_pod_kinds < 0).any() or (self.pods < 0).any() or (self.gpu_odd < 0).any():
            problems.append("pod counts")
        if problems:
            raise AllocationError("state out of bounds: " + ", ".join(problems))

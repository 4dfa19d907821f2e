"""Replay pods that come and go: each arrives at its creation time and leaves at its
deletion time, on the trace's own clock (seconds).

At each instant of that clock, in this order:

1. Departures, in input order. A placed pod gives back what it holds
   (``ClusterState.release``). A pod still waiting is withdrawn from the queue: its owner
   deleted it before it ran. Departures come before arrivals, so what leaves at an instant
   is free for what comes at it.
2. If anything was given back, one retry round over the waiting pods: highest priority
   first, then first come (creation time, then input order) first, as kube-scheduler moves
   its unschedulable pods back to the active queue on a pod deletion. A waiting pod that
   does not fit does not block the ones behind it.
3. Arrivals, in input order: one scheduling cycle each, through the same scheduler as
   every other replay; a pod that fits no node joins the queue.
4. With defragmentation on (``kgpu.sim.churn_defrag``), while pods wait: a round of moves
   that lets some of them fit; if it placed any, one retry round, as after departures.
5. A sample: GPU milli allocated, GPU milli asked by the pods present (placed or waiting),
   the number waiting, and the cluster's fragmentation (FGD's, against the typical pods).

A pod's deletion time is fixed by the trace, whenever it was placed: a pod placed late runs
for less time (its owner deleted it when the trace says). A pod without a deletion time
stays to the end. A pod deleted at the second it was created is not scheduled: it counts
as withdrawn after no wait.

Bound on work: placements only take resources, so within one round a pod of a shape that
failed cannot fit either, and is not tried; an arriving pod whose shape already waits is
queued without a cycle (nothing was given back since that shape last failed, or a round
would have tried it). A round therefore runs at most one failing cycle per shape waiting,
plus one per pod it places; these skips change no outcome.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from kgpu.framework.scheduler import Scheduler
from kgpu.model.pod import PodSpec
from kgpu.sim.churn_defrag import ChurnDefrag, DefragStats
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import FragmentModel, TypicalPod

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class Outcome(IntEnum):
    """How a pod's stay ended."""

    PLACED = 0  # placed when it arrived
    PLACED_LATE = 1  # waited, then placed when others left
    WITHDRAWN = 2  # deleted while still waiting
    WAITING = 3  # still waiting when the replay ended


@dataclass(frozen=True, slots=True)
class ChurnPod:
    """A pod of the replay: what it asks for, when it comes and when it is deleted."""

    spec: PodSpec
    created: int
    deleted: int | None  # None: never deleted


@dataclass(slots=True)
class ChurnResult:
    """What a churn replay saw. Series are sampled once per instant with an event, after
    its events; a value holds until the next instant."""

    total_gpu_milli: int
    times: IntArray  # the instants, ascending
    used_milli: IntArray  # GPU milli allocated
    asked_milli: IntArray  # GPU milli asked by the pods present, placed or waiting
    waiting: IntArray  # pods waiting
    frag_milli: FloatArray  # FGD's fragmentation of the whole cluster
    outcome: IntArray  # an Outcome per pod
    waited_s: IntArray  # per pod: seconds from arrival to placement, withdrawal or the end
    nodes: IntArray  # per pod: the node it was placed on, -1 if none
    cycles: int  # scheduling cycles run
    elapsed_s: float
    defrag: DefragStats | None = None  # None: defragmentation was off

    @property
    def start(self) -> int:
        return int(self.times[0]) if len(self.times) else 0

    @property
    def end(self) -> int:
        return int(self.times[-1]) if len(self.times) else 0

    def time_average(self, series: IntArray | FloatArray) -> float:
        """The series' mean over [start, end], each value weighted by how long it held."""
        if len(series) == 0:
            return 0.0
        span = self.end - self.start
        if span == 0:
            return float(series[-1])
        return float((series[:-1] * np.diff(self.times)).sum() / span)

    def pct(self, milli: float) -> float:
        return 100.0 * milli / max(self.total_gpu_milli, 1)

    @property
    def time_avg_alloc_pct(self) -> float:
        return self.pct(self.time_average(self.used_milli))

    @property
    def time_avg_asked_pct(self) -> float:
        return self.pct(self.time_average(self.asked_milli))

    @property
    def time_avg_frag_pct(self) -> float:
        return self.pct(self.time_average(self.frag_milli))

    def pending_s(self, q: float) -> float:
        """The q-th percentile (0..100) of the pods' waits, numpy's linear interpolation;
        pods never placed count with what they waited until withdrawn or until the end."""
        return float(np.percentile(self.waited_s, q)) if len(self.waited_s) else 0.0

    def count(self, outcome: Outcome) -> int:
        return int((self.outcome == outcome).sum())


class _Fragmentation:
    """The cluster's fragmentation kept per node and recomputed only for nodes that an
    allocation or release touched since the last sample (``ClusterState.node_clock``)."""

    def __init__(self, typical: list[TypicalPod], state: ClusterState) -> None:
        self.model = FragmentModel(typical, state)
        every = np.arange(len(state), dtype=np.int64)
        self.per_node = self.model.node_fragmentation(state, every)
        self.seen = state.node_clock.copy()

    def total(self, state: ClusterState) -> float:
        changed = np.flatnonzero(state.node_clock != self.seen)
        if len(changed):
            self.per_node[changed] = self.model.node_fragmentation(state, changed)
            self.seen[changed] = state.node_clock[changed]
        return float(self.per_node.sum())


def replay_churn(
    state: ClusterState,
    scheduler: Scheduler,
    pods: Sequence[ChurnPod],
    typical: list[TypicalPod],
    progress: Callable[[int], None] | None = None,
    defrag: ChurnDefrag | None = None,
) -> ChurnResult:
    """Replay ``pods`` on ``state`` (which it changes) with ``scheduler``; ``progress``
    hears how many more events were handled since it was last called. ``defrag`` (made
    over the same pods) moves pods when others wait."""
    start = time.perf_counter()
    n = len(pods)
    frag = _Fragmentation(typical, state)
    outcome = np.full(n, Outcome.WAITING, dtype=np.int64)
    waited = np.zeros(n, dtype=np.int64)
    nodes = np.full(n, -1, dtype=np.int64)
    # Queued by priority and shape: within one, arrival order is queue order.
    shapes = [(p.spec.priority, p.spec.shape) for p in pods]
    # Deleted the second it was created, a pod would hold anything for no time at all:
    # it is not scheduled, and counts as withdrawn after no wait.
    outcome[[i for i, p in enumerate(pods) if p.deleted == p.created]] = Outcome.WITHDRAWN
    # Waiting pods per priority and shape, each deque in queue order; a round merges
    # their heads.
    queue: dict[tuple[int, tuple[object, ...]], deque[int]] = {}
    queued = 0
    cycles = 0
    used = state.used_gpu_milli
    asked = used  # pods placed before the replay are present too

    def order(i: int) -> tuple[int, int, int]:
        return (-pods[i].spec.priority, pods[i].created, i)

    def place(i: int, now: int) -> bool:
        nonlocal cycles
        cycles += 1
        spec = pods[i].spec
        found = scheduler.placement(state, spec)
        if found is None:
            return False
        state.allocate(spec, found.node, found.gpus)
        settle(i, found.node, now)
        return True

    def settle(i: int, node: int, now: int) -> None:
        """Record pod ``i`` placed on ``node`` (its allocation is made)."""
        nonlocal used
        used += pods[i].spec.gpu.total_milli
        nodes[i] = node
        waited[i] = now - pods[i].created
        outcome[i] = Outcome.PLACED if waited[i] == 0 else Outcome.PLACED_LATE
        if defrag is not None:
            defrag.placed(i, node, now)

    def defragment(now: int) -> None:
        nonlocal queued
        assert defrag is not None
        heads = sorted((q[0] for q in queue.values()), key=order)
        steps = defrag.round(state, now, heads)
        for step in steps:
            i = defrag.index[step.pending.key]
            queue[shapes[i]].popleft()  # a head: the round is shown heads only
            if not queue[shapes[i]]:
                del queue[shapes[i]]
            queued -= 1
            settle(i, step.node, now)
            for move in step.moves:
                nodes[defrag.index[move.pod.key]] = move.target
        if steps and queue:
            retry(now)

    def retry(now: int) -> None:
        nonlocal queued
        heads = [(order(q[0]), shape) for shape, q in queue.items()]
        heapq.heapify(heads)
        while heads:
            _, shape = heapq.heappop(heads)
            waiting = queue[shape]
            if not place(waiting[0], now):
                continue  # the shape is done for this round: the cluster only fills
            waiting.popleft()
            queued -= 1
            if waiting:
                heapq.heappush(heads, (order(waiting[0]), shape))
            else:
                del queue[shape]

    events = _events(pods)
    times: list[int] = []
    series: list[tuple[int, int, int, float]] = []
    handled = 0
    for now, leaving, coming in events:
        released = False
        for i in leaving:
            if nodes[i] >= 0:
                state.release(pods[i].spec.key)
                if defrag is not None:
                    defrag.left(i, int(nodes[i]))
                used -= pods[i].spec.gpu.total_milli
                released = True
            elif outcome[i] == Outcome.WAITING:
                queue[shapes[i]].remove(i)
                if not queue[shapes[i]]:
                    del queue[shapes[i]]
                queued -= 1
                outcome[i] = Outcome.WITHDRAWN
                waited[i] = now - pods[i].created
            asked -= pods[i].spec.gpu.total_milli
        if released and queue:
            retry(now)
        for i in coming:
            asked += pods[i].spec.gpu.total_milli
            if shapes[i] in queue or not place(i, now):
                queue.setdefault(shapes[i], deque()).append(i)
                queued += 1
        if defrag is not None and queue:
            defragment(now)
        times.append(now)
        series.append((used, asked, queued, frag.total(state)))
        handled += len(leaving) + len(coming)
        if progress is not None and handled >= 256:
            progress(handled)
            handled = 0
    if progress is not None and handled:
        progress(handled)
    end = times[-1] if times else 0
    for shape_queue in queue.values():
        for i in shape_queue:
            waited[i] = end - pods[i].created
    columns = list(zip(*series, strict=True)) or [(), (), (), ()]
    return ChurnResult(
        total_gpu_milli=state.total_gpu_milli,
        times=np.array(times, dtype=np.int64),
        used_milli=np.array(columns[0], dtype=np.int64),
        asked_milli=np.array(columns[1], dtype=np.int64),
        waiting=np.array(columns[2], dtype=np.int64),
        frag_milli=np.array(columns[3], dtype=np.float64),
        outcome=outcome,
        waited_s=waited,
        nodes=nodes,
        cycles=cycles,
        elapsed_s=time.perf_counter() - start,
        defrag=None if defrag is None else defrag.stats,
    )


def _events(pods: Sequence[ChurnPod]) -> list[tuple[int, list[int], list[int]]]:
    """(instant, pods leaving, pods coming) per instant, ascending, each list in input
    order. A pod deleted at its creation instant is in neither list (see ``replay_churn``)."""
    at: dict[int, tuple[list[int], list[int]]] = {}
    for i, p in enumerate(pods):
        if p.deleted == p.created:
            continue
        at.setdefault(p.created, ([], []))[1].append(i)
        if p.deleted is not None:
            at.setdefault(p.deleted, ([], []))[0].append(i)
    return [(t, *at[t]) for t in sorted(at)]

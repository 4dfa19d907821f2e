"""Replay an arrival sequence through the scheduling core, as the paper's simulator does.

Pods arrive one at a time and are never deleted; each is placed at once or fails and is
dropped. After each attempt the replay records how much GPU had arrived and how much is
allocated, from which the allocation curve is drawn.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kgpu.framework.scheduler import Scheduler
from kgpu.model.pod import PodSpec
from kgpu.state.cluster import ClusterState


@dataclass(slots=True)
class ReplayResult:
    total_gpu_milli: int
    pods: int
    failed: int
    arrived_milli: npt.NDArray[np.int64]  # cumulative, after each attempt
    used_milli: npt.NDArray[np.int64]  # allocated, after each attempt
    nodes: list[int] = field(default_factory=list)  # chosen node per attempt, -1 if failed
    elapsed_s: float = 0.0

    @property
    def final_alloc_pct(self) -> float:
        return curve_final(self.curve())

    def curve(self, max_pct: int = 130) -> list[tuple[int, float]]:
        return allocation_curve(self.arrived_milli, self.used_milli, self.total_gpu_milli, max_pct)


def allocation_curve(
    arrived: npt.NDArray[np.int64], used: npt.NDArray[np.int64], capacity: int, max_pct: int
) -> list[tuple[int, float]]:
    """Mean allocation (% of GPU capacity) over the events whose arrived share rounds to k%.

    As the paper's analysis scripts do it: both shares rounded (arrivals to whole percent,
    half to even; allocation to two decimals); a percent with no event of its own takes
    the events within one percent of it, and is left out if there are none either.
    """
    if len(arrived) == 0 or capacity == 0:
        return []
    bucket = np.round(arrived * 100.0 / capacity).astype(np.int64)
    alloc = np.round(used * 100.0 / capacity, 2)
    size = max(max_pct + 2, int(bucket.max()) + 1)
    sums = np.bincount(bucket, weights=alloc, minlength=size)
    counts = np.bincount(bucket, minlength=size)
    curve = []
    for k in range(max_pct + 1):
        if counts[k]:
            curve.append((k, float(sums[k] / counts[k])))
            continue
        lo, hi = max(k - 1, 0), k + 2
        if counts[lo:hi].sum():
            curve.append((k, float(sums[lo:hi].sum() / counts[lo:hi].sum())))
    return curve


def curve_final(curve: list[tuple[int, float]]) -> float:
    """The headline figure: the curve's last column (130% of capacity for tune 1.3)."""
    return curve[-1][1] if curve else 0.0


def replay(
    state: ClusterState,
    scheduler: Scheduler,
    pods: Sequence[PodSpec],
    progress: Callable[[int], None] | None = None,
) -> ReplayResult:
    start = time.perf_counter()
    n = len(pods)
    arrived = np.zeros(n, dtype=np.int64)
    used = np.zeros(n, dtype=np.int64)
    nodes = [-1] * n
    total_arrived = 0
    used_now = state.used_gpu_milli
    failed = 0
    for i, pod in enumerate(pods):
        # ``placement``, not ``schedule``: a failed pod is dropped, so why it failed (a
        # count of reasons over every node) is not asked.
        outcome = scheduler.placement(state, pod)
        total_arrived += pod.gpu.total_milli
        if outcome is not None:
            state.allocate(pod, outcome.node, outcome.gpus)
            used_now += pod.gpu.total_milli
            nodes[i] = outcome.node
        else:
            failed += 1
        arrived[i] = total_arrived
        used[i] = used_now
        if progress is not None and i % 256 == 255:
            progress(256)
    if progress is not None:
        progress(n % 256)
    return ReplayResult(
        total_gpu_milli=state.total_gpu_milli,
        pods=n,
        failed=failed,
        arrived_milli=arrived,
        used_milli=used,
        nodes=nodes,
        elapsed_s=time.perf_counter() - start,
    )

"""One replay of a pod list on a node list, as ``kgpu simulate openb`` and ``kgpu demo`` run it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kgpu.config import load_profile
from kgpu.model.node import NodeInfo
from kgpu.plugins.registry import PluginContext, build_scheduler
from kgpu.sim.arrivals import tune_workload
from kgpu.sim.openb import TracePod, read_nodes, read_pods
from kgpu.sim.replay import ReplayResult, replay
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import FragmentModel, TypicalPod, typical_pods


@dataclass(slots=True)
class OpenbRun:
    policy: str
    seed: int
    tune: float
    state: ClusterState
    result: ReplayResult
    frag_pct: float  # idle GPU milli that the typical pods cannot use, % of capacity

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "seed": self.seed,
            "tune": self.tune,
            "total_gpus": self.result.total_gpu_milli // 1000,
            "pods": self.result.pods,
            "failed_pods": self.result.failed,
            "final_gpu_alloc_pct": round(self.result.final_alloc_pct, 4),
            "frag_gpu_pct": round(self.frag_pct, 4),
            "curve": [[k, round(v, 4)] for k, v in self.result.curve()],
            "elapsed_s": round(self.result.elapsed_s, 3),
        }


def tie_rank(n: int, seed: int) -> np.ndarray[Any, np.dtype[np.int64]]:
    """A fixed, seeded permutation of the nodes: ties go to the lowest rank."""
    rank = np.empty(n, dtype=np.int64)
    rank[np.random.default_rng([seed, 1]).permutation(n)] = np.arange(n)
    return rank


def cluster_fragmentation(state: ClusterState, trace: list[TracePod]) -> float:
    """FGD's fragmentation of the whole cluster, as a percentage of GPU capacity."""
    return fragmentation_pct(state, typical_pods(p.to_pod() for p in trace))


def fragmentation_pct(state: ClusterState, typical: list[TypicalPod]) -> float:
    """FGD's fragmentation of the whole cluster against these typical pods, in % of GPUs."""
    model = FragmentModel(typical, state)
    frag = model.node_fragmentation(state, np.arange(len(state), dtype=np.int64)).sum()
    return float(100.0 * frag / max(state.total_gpu_milli, 1))


def run_trace(
    nodes: Sequence[NodeInfo],
    trace: list[TracePod],
    policy: str,
    seed: int,
    tune: float = 1.3,
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> OpenbRun:
    """Tune the pod list to ``tune`` × the cluster's GPUs and replay it under one policy.

    ``on_start`` hears the number of arrivals once they are known, ``progress`` how many
    more have been placed or dropped since it was last called.
    """
    state = ClusterState(nodes)
    arrivals = tune_workload(trace, state.total_gpu_milli, tune, seed)
    # Typical pods come from the pod list, not the tuned arrivals: the copies would
    # only re-weight the same shapes by sampling noise.
    typical = typical_pods(p.to_pod() for p in trace)
    scheduler = build_scheduler(
        load_profile(policy), PluginContext(seed=seed, typical_pods=typical)
    )
    scheduler.set_tie_rank(tie_rank(len(state), seed))
    pods = [p.to_pod() for p in arrivals]
    if on_start is not None:
        on_start(len(pods))
    result = replay(state, scheduler, pods, progress)
    return OpenbRun(policy, seed, tune, state, result, fragmentation_pct(state, typical))


def run_openb(
    nodes_csv: Path,
    pods_csv: Path,
    policy: str,
    seed: int,
    tune: float = 1.3,
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> OpenbRun:
    return run_trace(
        read_nodes(nodes_csv), read_pods(pods_csv), policy, seed, tune, progress, on_start
    )

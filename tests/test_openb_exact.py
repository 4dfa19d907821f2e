"""The paper simulator's own replay, event by event: same arrivals, same tie-break order.

../shared/data/openb/reference holds one run of the paper's simulator (default trace, seed
42, tune 1.3). Replaying exactly its arrival sequence with its node order for ties, kgpu's
``fgd`` and ``bestfit`` must reach the same final allocation, and place pods on the same
nodes.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kgpu.config import load_profile
from kgpu.model.node import NodeName
from kgpu.plugins.registry import PluginContext, build_scheduler
from kgpu.sim.openb import read_nodes, read_pods
from kgpu.sim.replay import replay
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import typical_pods


def _replay_reference(openb: Path, policy: str, ref: str) -> tuple[float, int, int]:
    nodes = read_nodes(openb / "openb_node_list_gpu_node.csv")
    trace = read_pods(openb / "openb_pod_list_default.csv")
    by_name = {p.name: p for p in trace}
    with (openb / "reference" / f"events_default_{ref}_42.csv").open() as f:
        events = list(csv.DictReader(f))
    arrivals = [replace(by_name[e["base_pod"]], name=e["pod"]).to_pod() for e in events]
    state = ClusterState(nodes)
    rank = np.zeros(len(state), dtype=np.int64)
    with (openb / "reference" / "node_rank_default_seed42.csv").open() as f:
        for row in csv.DictReader(f):
            rank[state.index[NodeName(row["node"])]] = int(row["node_rank"])
    context = PluginContext(seed=42, typical_pods=typical_pods(p.to_pod() for p in trace))
    scheduler = build_scheduler(load_profile(policy), context)
    scheduler.set_tie_rank(rank)
    result = replay(state, scheduler, arrivals)
    state.check_invariants()
    same_node = sum(
        (nodes[n].name if n >= 0 else "") == e["node"]
        for n, e in zip(result.nodes, events, strict=True)
    )
    return result.final_alloc_pct, same_node, len(events)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("policy", "ref", "expected"), [("fgd", "FGD", 95.29), ("bestfit", "BestFit", 93.13)]
)
def test_reference_replay_matches_paper_simulator(
    openb_dir: Path, policy: str, ref: str, expected: float
) -> None:
    final, same_node, total = _replay_reference(openb_dir, policy, ref)
    assert final == pytest.approx(expected, abs=0.05)
    # Go sums FGD's fragment per class in floating point; for a handful of CPU-only pods
    # that rounding breaks a tie between two nodes differently. Every GPU pod agrees.
    assert total - same_node <= 10

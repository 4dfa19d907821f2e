"""The openb replay with every GPU's memory accounted: the trace's gpu_milli is a share of
one GPU (compute and memory alike), so per-GPU memory accounting must change no placement."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kgpu.sim.openb import read_nodes, read_pods
from kgpu.sim.openb_run import run_trace


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["fgd", "kgpu"])
def test_memory_accounting_changes_no_openb_placement(openb_dir: Path, policy: str) -> None:
    nodes = read_nodes(openb_dir / "openb_node_list_gpu_node.csv")
    trace = read_pods(openb_dir / "openb_pod_list_gpushare40.csv")
    # Odd sizes on purpose: shares of them round down, and must still never bind first.
    with_memory = [replace(n, gpu_memory_mib=15_109 + 7 * (i % 5)) for i, n in enumerate(nodes)]
    plain = run_trace(nodes, trace, policy, seed=7)
    devices = run_trace(with_memory, trace, policy, seed=7)
    assert devices.result.nodes == plain.result.nodes
    assert devices.state.allocations.keys() == plain.state.allocations.keys()
    for key, alloc in plain.state.allocations.items():
        assert devices.state.allocations[key].gpus == alloc.gpus
    assert devices.state.odd_total == 0
    devices.state.check_invariants()

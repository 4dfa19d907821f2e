"""NodeResourcesFit: the pod limit, then CPU, then memory; node by node or over arrays."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kgpu.framework.cycle import CycleState
from kgpu.plugins.node.resource_fit import NodeResourcesFit
from kgpu.state.cluster import ClusterState
from tests.builders import make_node, make_pod, verdict_reasons


def test_a_node_keeps_the_first_reason_it_fails() -> None:
    state = ClusterState(
        [
            make_node("full").cpu(1000).memory(1024).max_pod_count(1).build(),
            make_node("cpu").cpu(1000).memory(1024).build(),
            make_node("mem").cpu(8000).memory(1024).build(),
            make_node("ok").cpu(8000).memory(8192).build(),
        ]
    )
    state.allocate(make_pod("x").cpu(0).memory(0).build(), 0, [])
    pod = make_pod("p").cpu(2000).memory(2048).build()
    cycle = CycleState(state, pod)
    every = NodeResourcesFit().filter(cycle, pod, np.arange(4, dtype=np.int64))
    expected = ["TooManyPods", "InsufficientCPU", "InsufficientMemory", ""]
    assert verdict_reasons(every) == expected
    for node in range(4):
        alone = NodeResourcesFit().filter(cycle, pod, np.array([node], dtype=np.int64))
        assert verdict_reasons(alone) == [expected[node]]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4000), st.integers(0, 4096)), max_size=30),
    st.integers(0, 6000),
    st.integers(0, 6000),
)
def test_nodes_judged_one_by_one_get_the_verdicts_of_the_array_path(
    placed: list[tuple[int, int, int]], cpu: int, memory: int
) -> None:
    nodes = [
        make_node(f"n{i}").cpu(2000 + 1000 * i).memory(2048 + 1024 * i).max_pod_count(3).build()
        for i in range(6)
    ]
    state = ClusterState(nodes)
    for i, (node, c, m) in enumerate(placed):
        pod = make_pod(f"x{i}").cpu(c).memory(m).build()
        if state.pods[node] < 3 and state.cpu_free[node] >= c and state.mem_free[node] >= m:
            state.allocate(pod, node, [])
    pod = make_pod("p").cpu(cpu).memory(memory).build()
    cycle = CycleState(state, pod)
    every = verdict_reasons(NodeResourcesFit().filter(cycle, pod, np.arange(6, dtype=np.int64)))
    pairs = [
        verdict_reasons(NodeResourcesFit().filter(cycle, pod, np.array([a, b], dtype=np.int64)))
        for a, b in ((0, 1), (2, 3), (4, 5))
    ]
    assert every == [reason for pair in pairs for reason in pair]

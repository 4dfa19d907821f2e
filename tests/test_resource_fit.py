"""NodeResourcesFit: the pod limit, then CPU, then memory; node by node or over arrays."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgpu.framework.cycle import CycleState
from kgpu.model.pod import PodSpec
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


def _filled_cluster(count: int) -> ClusterState:
    """``count`` nodes of varied size, each partly filled: some full of pods, some short of
    CPU or memory for the pods judged below."""
    rng = np.random.default_rng(11)
    state = ClusterState(
        [
            make_node(f"n{i}")
            .cpu(int(rng.integers(2, 17)) * 1000)
            .memory(int(rng.integers(2, 33)) * 1024)
            .max_pod_count(int(rng.integers(1, 6)))
            .build()
            for i in range(count)
        ]
    )
    for i in range(count):
        for j in range(int(rng.integers(0, 5))):
            pod = make_pod(f"x{i}-{j}").cpu(int(rng.integers(0, 4)) * 1000).memory(2048).build()
            cpu, memory, slots = state.room(i)
            if slots > 0 and cpu >= pod.cpu_milli and memory >= pod.memory_mib:
                state.allocate(pod, i, [])
    return state


@pytest.mark.parametrize(
    "pod",
    [
        make_pod("small").cpu(500).memory(512).build(),
        make_pod("cpu").cpu(6000).memory(1024).build(),
        make_pod("mem").cpu(1000).memory(16_384).build(),
    ],
)
def test_most_of_the_cluster_gets_the_verdicts_its_nodes_get_apart(pod: PodSpec) -> None:
    """Asked about most of the cluster, the filter compares over every node and gathers the
    first reasons; asked about a few dozen nodes of it, it gathers their figures; about a
    handful, it judges them one by one. All three give each node the same verdict."""
    state = _filled_cluster(80)
    cycle = CycleState(state, pod)
    every = NodeResourcesFit().filter(cycle, pod, np.arange(80, dtype=np.int64))
    parts = [np.arange(start, min(start + 17, 80), dtype=np.int64) for start in range(0, 80, 17)]
    apart = [NodeResourcesFit().filter(cycle, pod, part) for part in parts]
    alone = [
        NodeResourcesFit().filter(cycle, pod, np.array([n], dtype=np.int64)) for n in range(80)
    ]
    reasons = verdict_reasons(every)
    assert len(set(reasons)) == 4  # every reason and a pass, so the order of tests is seen
    assert reasons == [r for part in apart for r in verdict_reasons(part)]
    assert reasons == [verdict_reasons(one)[0] for one in alone]

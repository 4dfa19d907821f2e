"""Nodes in the same state are scored once: the scores and GPU choices are those of scoring
every node, on clusters where the split is made and where it is not."""

from __future__ import annotations

import numpy as np

from kgpu.framework.cycle import CycleState
from kgpu.model.pod import PodSpec
from kgpu.plugins.node.fgd import FgdScore
from kgpu.plugins.node.strand_aware_fgd import StrandAwareFgd
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import TypicalPod
from kgpu.state.node_classes import MIN_NODES, NodeClasses
from tests.builders import make_node, make_pod

TYPICAL = [
    TypicalPod(0.4, 4000, 500, 1, memory_mib=8192),
    TypicalPod(0.3, 8000, 1000, 2, memory_mib=16384),
    TypicalPod(0.3, 2000, 0, 0, memory_mib=4096),
]


def _cluster(count: int) -> ClusterState:
    kinds = [("A100", 64_000), ("T4", 64_000), ("A100", 96_000)]
    return ClusterState(
        [
            make_node(f"n{i:04d}").gpus(8, kinds[i % 3][0]).cpu(kinds[i % 3][1]).build()
            for i in range(count)
        ]
    )


def _pods() -> list[PodSpec]:
    return [
        make_pod("share").share(300).cpu(3000).build(),
        make_pod("half").share(500).cpu(5000).build(),
        make_pod("whole").gpus(2).cpu(9000).build(),
        make_pod("cpu").gpus(0).cpu(1500).build(),
    ]


def test_a_fresh_cluster_is_a_few_states_and_each_placement_makes_at_most_one_more() -> None:
    state = _cluster(MIN_NODES * 2)
    classes = NodeClasses(state)
    nodes = np.arange(len(state), dtype=np.int64)
    split = classes.split(state, nodes)
    assert split is not None
    first, inverse = split
    assert len(first) == 3  # A100 64 cores, T4 64 cores, A100 96 cores
    assert [state.nodes[int(n)].gpu_model for n in first[inverse[:3]]] == ["A100", "T4", "A100"]
    state.allocate(make_pod("x").gpus(1).build(), 4, [0])
    split = classes.split(state, nodes)
    assert split is not None
    first, inverse = split
    assert len(first) == 4
    assert first[inverse[4]] == 4  # a state of its own
    assert first[inverse[7]] != 4 and first[inverse[7]] % 3 == 1  # node 7 is as before


def test_too_few_or_too_varied_nodes_are_not_split() -> None:
    state = _cluster(MIN_NODES * 2)
    classes = NodeClasses(state)
    assert classes.split(state, np.arange(MIN_NODES - 1, dtype=np.int64)) is None
    for i in range(0, len(state), 2):  # every other node a state of its own
        state.allocate(make_pod(f"p{i}").cpu(1000 + i).gpus(0).build(), i, [])
    assert classes.split(state, np.arange(len(state), dtype=np.int64)) is None


def test_scores_and_gpu_choices_are_those_of_scoring_every_node() -> None:
    for make in (lambda: FgdScore(TYPICAL), lambda: StrandAwareFgd(TYPICAL)):
        split_state, plain_state = _cluster(MIN_NODES * 2), _cluster(MIN_NODES * 2)
        nodes = np.arange(len(split_state), dtype=np.int64)
        rng = np.random.default_rng(7)
        for step in range(40):
            # The same placements on both; ``plain`` is scored a few nodes at a time, too few
            # to split.
            for pod in _pods():
                scored = make()
                assert scored.score(CycleState(split_state, pod), pod, nodes).tolist() == (
                    _piecewise(make(), plain_state, pod, nodes)
                )
                # The GPU a split scoring remembers for a node is the one a fresh choice takes.
                for node in range(0, 30, 3):
                    assert scored.choose_gpus(split_state, pod, node) == make().choose_gpus(
                        plain_state, pod, node
                    )
            node = int(rng.integers(0, 20))
            placed = make_pod(f"s{step}").share(int(rng.integers(1, 10)) * 100).build()
            gpus = [int(np.argmax(split_state.gpu_free[node] >= placed.gpu.milli))]
            if split_state.gpu_free[node, gpus[0]] < placed.gpu.milli:
                continue
            split_state.allocate(placed, node, gpus)
            plain_state.allocate(placed, node, gpus)


def _piecewise(
    plugin: FgdScore | StrandAwareFgd, state: ClusterState, pod: PodSpec, nodes: np.ndarray
) -> list[float]:
    out: list[float] = []
    for start in range(0, len(nodes), MIN_NODES // 2):
        part = nodes[start : start + MIN_NODES // 2]
        out += plugin.score(CycleState(state, pod), pod, part).tolist()
    return out


def test_ids_are_numbered_afresh_when_they_outgrow_the_nodes() -> None:
    state = _cluster(MIN_NODES)
    classes = NodeClasses(state)
    nodes = np.arange(len(state), dtype=np.int64)
    for i in range(4 * len(state) + 1100):  # a state never seen again each time
        pod = make_pod(f"p{i}").cpu(i + 1).gpus(0).build()
        state.allocate(pod, 0, [])
        classes.split(state, nodes)
        state.release(pod.key)
    state.allocate(make_pod("last").cpu(1).gpus(0).build(), 0, [])
    split = classes.split(state, nodes)
    assert split is not None
    first, inverse = split
    assert len(first) == 4  # node 0, and the three kinds of the others
    assert first[inverse[0]] == 0 and first[inverse[3]] != 0 and first[inverse[3]] % 3 == 0


def test_a_split_of_part_of_the_cluster_sees_the_changes_in_that_part() -> None:
    """A decision splits its feasible nodes, ascending, most of the cluster but not all:
    changes to them are seen whether or not nodes outside changed too."""
    state = _cluster(MIN_NODES * 2)
    classes = NodeClasses(state)
    evens = np.arange(0, len(state), 2, dtype=np.int64)
    assert classes.split(state, evens) is not None
    state.allocate(make_pod("in").gpus(1).build(), 6, [0])
    state.allocate(make_pod("out").gpus(2).build(), 9, [0, 1])
    split = classes.split(state, evens)
    assert split is not None
    first, inverse = split
    assert len(first) == 4 and first[inverse[3]] == 6  # node 6, alone in its state
    split = classes.split(state, np.arange(len(state), dtype=np.int64))
    assert split is not None
    first, inverse = split
    assert len(first) == 5 and first[inverse[9]] == 9  # node 9's change is seen once asked

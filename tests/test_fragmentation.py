"""FGD's fragmentation measure and the FGD and FragPacking scores built on it."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kgpu.framework.cycle import CycleState
from kgpu.model.pod import PodSpec
from kgpu.plugins.node.fgd import FgdScore, sigmoid_score, sigmoid_scores_of
from kgpu.plugins.node.strand_aware_fgd import StrandAwareFgd
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import FragmentModel, TypicalPod, typical_pods
from tests.builders import make_node, make_pod


def test_typical_pods_cover_95_percent_most_frequent_first() -> None:
    pods = (
        [make_pod(f"a{i}").share(500).cpu(2000).build() for i in range(60)]
        + [make_pod(f"b{i}").gpus(1).cpu(4000).build() for i in range(36)]
        + [make_pod(f"c{i}").gpus(0).cpu(1000).build() for i in range(3)]
        + [make_pod("d").gpus(2).cpu(8000).build()]
    )
    typical = typical_pods(pods)
    # 60 + 36 = 96 >= 95 of 100: the two rare shapes are left out, weights renormalised.
    assert [(t.cpu_milli, t.gpu_milli, t.gpu_count) for t in typical] == [
        (2000, 500, 1),
        (4000, 1000, 1),
    ]
    assert [round(t.weight, 4) for t in typical] == [0.625, 0.375]


def test_typical_pods_carry_their_pods_mean_memory_without_telling_shapes_apart_by_it() -> None:
    pods = [
        make_pod(f"a{i}").share(500).cpu(2000).memory(m).build()
        for i, m in enumerate((1000, 2000, 4001))
    ]
    (typical,) = typical_pods(pods)
    assert (typical.weight, typical.gpu_milli, typical.memory_mib) == (1.0, 500, 2334)


def _typical() -> list[TypicalPod]:
    return [
        TypicalPod(0.5, 1000, 500, 1),  # a half share
        TypicalPod(0.3, 1000, 1000, 2),  # two whole GPUs
        TypicalPod(0.2, 1000, 0, 0),  # no GPU: never uses idle GPUs
    ]


def test_fragment_per_typical_pod() -> None:
    state = ClusterState([make_node("a").gpus(4).cpu(8000).build()])
    state.allocate(make_pod("x").share(700).build(), 0, [0])  # GPU0 has 300 free
    state.allocate(make_pod("y").gpus(2).build(), 0, [1, 2])  # GPU3 alone is idle
    model = FragmentModel(_typical(), state)
    frags = model.fragments(state, np.array([0]))[0].tolist()
    # half share fits GPU3: only GPU0's 300 is a fragment; two whole GPUs: no room, all
    # 1300 idle milli are fragment; a GPU-less pod leaves all 1300 as fragment.
    assert frags == [300, 1300, 1300]
    assert model.node_fragmentation(state, np.array([0]))[0] == pytest.approx(
        0.5 * 300 + 0.3 * 1300 + 0.2 * 1300
    )


def _cycle(state: ClusterState, pod: PodSpec) -> CycleState:
    return CycleState(state, pod)


def test_fgd_scores_50_when_nothing_changes_and_prefers_filling_a_fragment() -> None:
    state = ClusterState([make_node("a").gpus(2).build(), make_node("b").gpus(2).build()])
    state.allocate(make_pod("x").share(500).build(), 0, [0])
    fgd = FgdScore(_typical())
    nodes = np.arange(2, dtype=np.int64)
    cpu_pod = make_pod("c").gpus(0).cpu(100).build()
    assert list(fgd.score(_cycle(state, cpu_pod), cpu_pod, nodes)) == [50.0, 50.0]
    share = make_pod("s").share(500).build()
    scores = fgd.score(_cycle(state, share), share, nodes)
    assert scores[0] > scores[1]  # completing GPU0 of node a beats opening a GPU of b
    assert fgd.choose_gpus(state, share, 0) == (0,)


def test_strand_aware_fgd_keeps_gpu_less_pods_off_idle_gpus() -> None:
    state = ClusterState(
        [
            make_node("idle").gpus(8).build(),
            make_node("full").gpus(2).build(),
            make_node("full-busy-cpu").gpus(2).build(),
        ]
    )
    for node in (1, 2):
        state.allocate(make_pod(f"w{node}").gpus(2).cpu(1000).build(), node, [0, 1])
    state.allocate(make_pod("cpu-hog").gpus(0).cpu(40_000).build(), 2, [])
    plugin = StrandAwareFgd(_typical())
    fgd = FgdScore(_typical())
    nodes = np.arange(3, dtype=np.int64)
    cpu_pod = make_pod("c").gpus(0).cpu(100).build()
    # FGD sees a three-way tie; the GPU-less pod goes where no GPU is idle, and there to
    # the node with the most CPU to spare.
    assert list(fgd.score(_cycle(state, cpu_pod), cpu_pod, nodes)) == [50.0, 50.0, 50.0]
    scores = plugin.score(_cycle(state, cpu_pod), cpu_pod, nodes)
    assert np.floor(scores).tolist() == [50.0, 50.0, 50.0]
    assert int(np.argmax(scores)) == 1
    assert scores[2] > scores[0]
    # A whole-GPU pod is scored exactly as FGD scores it (on the one node with room).
    room = np.array([0], dtype=np.int64)
    whole = make_pod("w").gpus(1).build()
    assert (
        plugin.score(_cycle(state, whole), whole, room).tolist()
        == fgd.score(_cycle(state, whole), whole, room).tolist()
    )
    # A 300 share opens an idle GPU. Its 700 free milli will almost surely take a half
    # share and keep the 200 that no typical pod fits: about 203 more idle milli than
    # FGD counts, and the score drops from FGD's 46 to 41.
    share = make_pod("s").share(300).build()
    assert fgd.score(_cycle(state, share), share, room).tolist() == [46.0]
    assert np.floor(plugin.score(_cycle(state, share), share, room)).tolist() == [41.0]


def test_gpu_choice_reuses_scoring_only_while_the_node_is_unchanged() -> None:
    state = ClusterState([make_node("a").gpus(4).build(), make_node("b").gpus(4).build()])
    state.allocate(make_pod("x").share(600).build(), 0, [2])
    nodes = np.arange(2, dtype=np.int64)
    share = make_pod("s").share(300).build()
    for make in (lambda: FgdScore(_typical()), lambda: StrandAwareFgd(_typical())):
        scored, fresh = make(), make()
        scored.score(_cycle(state, share), share, nodes)
        assert scored.choose_gpus(state, share, 0) == fresh.choose_gpus(state, share, 0) == (2,)
        # The node changes after scoring: the remembered GPU (2) no longer holds the share.
        state.allocate(make_pod("y").share(400).build(), 0, [2])
        assert scored.choose_gpus(state, share, 0) == fresh.choose_gpus(state, share, 0)
        assert scored.choose_gpus(state, share, 0) != (2,)
        state.release(make_pod("y").build().key)


def test_typical_pods_of_a_workload_where_every_pod_differs_stay_few_and_round_up() -> None:
    # 3,000 pods, no two alike: one typical pod each would make every decision 3,000 wide.
    pods = [
        make_pod(f"p{i}").share(100 + (i * 7) % 800).cpu(1000 + i).memory(1000 + i).build()
        for i in range(3000)
    ]
    typical = typical_pods(pods)
    assert 1 < len(typical) <= 100
    assert sum(t.weight for t in typical) == pytest.approx(1.0)
    # On the grid, requests are rounded up: no typical pod asks for less than the smallest
    # pod, and shares stay shares.
    assert min(t.cpu_milli for t in typical) >= 1000
    assert all(100 <= t.gpu_milli < 1000 and t.gpu_count == 1 for t in typical)


def test_typical_pods_keep_exact_shapes_while_they_are_few() -> None:
    pods = [make_pod(f"p{i}").share(101 + i).cpu(1001 + i).build() for i in range(40)]
    # 38 of the 40 cover 95%; of equal counts the larger requests make the cut.
    assert sorted(t.gpu_milli for t in typical_pods(pods)) == [101 + i for i in range(2, 40)]


def test_fgd_scores_a_rise_too_large_for_exp_as_zero_and_quietly() -> None:
    """int(100 × sigmoid(ΔF / 1000)): past a rise of 700,000 milli exp would overflow, and
    the score is 0 there as just below it, with no warning from numpy."""
    drops = np.array([-1e12, -710_000.0, -700_000.0, -1000.0, -0.0, 0.0, 1000.0, 1e12])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sigmoid_score(drops).tolist() == [0, 0, 0, 26, 50, 50, 73, 100]


def test_a_few_decreases_score_as_an_array_of_them_does() -> None:
    """The node-by-node path scores its few decreases on Python floats: the same scores to
    the last bit as over an array, at the sigmoid's steps and past exp's range."""
    rng = np.random.default_rng(3)
    steps = [1000.0 * np.log(100.0 / k - 1.0) for k in range(1, 100)]  # where it steps
    drops = [*rng.normal(0.0, 3000.0, 500).tolist(), *steps, -1e12, -0.0, 0.0, 1e12]
    drops += [np.nextafter(s, np.inf) for s in steps] + [np.nextafter(s, -np.inf) for s in steps]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert sigmoid_scores_of(drops) == sigmoid_score(np.array(drops)).tolist()

"""kgpu's default score: FGD with GPUs stranded for want of CPU counted as fragmentation."""

from __future__ import annotations

import numpy as np
import pytest

from kgpu.config import load_profile
from kgpu.framework.cycle import CycleState
from kgpu.framework.scheduler import Placement
from kgpu.model.pod import PodSpec
from kgpu.plugins.node.fgd import FgdScore
from kgpu.plugins.node.strand_aware_fgd import (
    StrandAwareFgd,
    cpu_per_gpu_milli,
    memory_per_gpu_milli,
)
from kgpu.plugins.registry import PluginContext, build_scheduler
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import TypicalPod
from tests.builders import make_node, make_pod

# One typical pod: a whole GPU with 4 cores, so a GPU needs 4,000 milli-CPU to be usable.
TYPICAL = [TypicalPod(1.0, 4000, 1000, 1)]


@pytest.mark.parametrize(
    ("typical", "expected"),
    [
        (TYPICAL, 4.0),
        # weighted by frequency: (0.5·1000 + 0.3·6000) / (0.5·500 + 0.3·2·1000); the
        # GPU-less pod brings no GPU to feed
        (
            [
                TypicalPod(0.5, 1000, 500, 1),
                TypicalPod(0.3, 6000, 1000, 2),
                TypicalPod(0.2, 9000, 0, 0),
            ],
            2300 / 850,
        ),
        ([TypicalPod(1.0, 9000, 0, 0)], 0.0),
        ([], 0.0),
    ],
)
def test_cpu_per_gpu_milli_comes_from_the_typical_gpu_pods(
    typical: list[TypicalPod], expected: float
) -> None:
    assert cpu_per_gpu_milli(typical) == pytest.approx(expected)


def _two_nodes(cpu_a: int, cpu_b: int) -> ClusterState:
    return ClusterState(
        [make_node("a").gpus(4).cpu(cpu_a).build(), make_node("b").gpus(4).cpu(cpu_b).build()]
    )


def _scores(plugin: FgdScore | StrandAwareFgd, state: ClusterState, pod: PodSpec) -> list[float]:
    nodes = np.arange(len(state), dtype=np.int64)
    return [float(v) for v in plugin.score(CycleState(state, pod), pod, nodes)]


@pytest.mark.parametrize(
    ("pod", "fgd", "kgpu"),
    [
        # On a (16 cores for 4 GPUs) the 8-core pod leaves 8 cores for 3 idle GPUs: one
        # GPU's 1000 milli is stranded, ΔF = −1000, int(100·sigmoid(−1)) = 26. On b (32
        # cores) nothing is stranded. FGD sees no change anywhere: the typical pod still fits.
        (make_pod("w").gpus(1).cpu(8000).build(), [50, 50], [26, 50]),
        # A share: FGD's ΔF is −500 on both (a 500 leftover the typical pod cannot use);
        # no typical pod is a share, so those 500 will stay idle: another −500 on both.
        # On a, 12 cores left feed 3,000 of 3,500 idle milli: 500 more, ΔF = −1500 → 18;
        # on b, ΔF = −1000 → 26.
        (make_pod("s").share(500).cpu(4000).build(), [37, 37], [18, 26]),
        # A GPU-less pod that takes 8 cores strands 2 GPUs on a: ΔF = −2000 → 11; the
        # tie-break adds less than a point.
        (make_pod("c").gpus(0).cpu(8000).build(), [50, 50], [11, 50]),
        # A pod within the GPU's CPU share strands nothing: exactly FGD's integer score.
        (make_pod("f").gpus(1).cpu(4000).build(), [50, 50], [50, 50]),
    ],
)
def test_stranded_gpus_lower_the_score(pod: PodSpec, fgd: list[int], kgpu: list[int]) -> None:
    state = _two_nodes(16_000, 32_000)
    assert _scores(FgdScore(TYPICAL), state, pod) == fgd
    assert np.floor(_scores(StrandAwareFgd(TYPICAL), state, pod)).tolist() == kgpu


def test_gpus_freed_of_stranding_raise_the_score() -> None:
    """A pod taking a GPU that the node's CPU could not feed anyway un-strands it."""
    state = _two_nodes(16_000, 32_000)
    state.allocate(make_pod("hog").gpus(0).cpu(8000).build(), 0, [])  # a: 2 GPUs stranded
    pod = make_pod("w").gpus(1).cpu(1000).build()
    # FGD: on a the typical pod still fits, its fragment stays 0 → 50. kgpu: before, 8 cores
    # feed 2000 of 4000 idle milli; after, 7 cores feed 1750 of 3000: 750 fewer stranded
    # milli, int(100·sigmoid(0.75)) = 67.
    assert _scores(FgdScore(TYPICAL), state, pod) == [50, 50]
    assert np.floor(_scores(StrandAwareFgd(TYPICAL), state, pod)).tolist() == [67, 50]


def test_the_kgpu_policy_places_a_cpu_heavy_gpu_pod_where_no_gpu_is_stranded() -> None:
    state = _two_nodes(16_000, 32_000)
    pod = make_pod("w").gpus(1).cpu(8000).build()
    for policy, node in (("fgd", 0), ("kgpu", 1)):
        outcome = build_scheduler(
            load_profile(policy), PluginContext(typical_pods=TYPICAL)
        ).schedule(state, pod)
        assert isinstance(outcome, Placement)
        assert (state.nodes[outcome.node].name, outcome.gpus) == (f"{'ab'[node]}", (0,))


def test_memory_per_gpu_milli_comes_from_the_typical_gpu_pods_mean_memory() -> None:
    typical = [
        TypicalPod(0.5, 1000, 500, 1, memory_mib=4096),
        TypicalPod(0.3, 6000, 1000, 2, memory_mib=32768),
        TypicalPod(0.2, 9000, 0, 0, memory_mib=65536),  # brings no GPU to feed
    ]
    assert memory_per_gpu_milli(typical) == pytest.approx((0.5 * 4096 + 0.3 * 32768) / 850)
    assert memory_per_gpu_milli(TYPICAL) == 0  # no memory known: memory strands nothing


# A whole GPU with 4 cores and 16 GiB: a GPU needs 4,000 milli-CPU and 16,384 MiB.
HUNGRY = [TypicalPod(1.0, 4000, 1000, 1, memory_mib=16_384)]


def test_gpus_a_node_has_no_memory_left_to_feed_are_stranded_too() -> None:
    """Two 4-GPU nodes with 64 cores each: a with 64 GiB (16 per GPU, just enough), b with
    256. A GPU-less pod taking 1 core and 32 GiB leaves a 32 GiB: two GPUs' worth, so 2,000
    idle milli are stranded, ΔF = −2000 → 11. FGD sees no change on either node."""
    state = ClusterState(
        [
            make_node("a").gpus(4).cpu(64_000).memory(65_536).build(),
            make_node("b").gpus(4).cpu(64_000).memory(262_144).build(),
        ]
    )
    pod = make_pod("c").gpus(0).cpu(1000).memory(32_768).build()
    assert _scores(FgdScore(HUNGRY), state, pod) == [50, 50]
    assert np.floor(_scores(StrandAwareFgd(HUNGRY), state, pod)).tolist() == [11, 50]
    outcome = build_scheduler(load_profile("kgpu"), PluginContext(typical_pods=HUNGRY)).schedule(
        state, pod
    )
    assert isinstance(outcome, Placement)
    assert state.nodes[outcome.node].name == "b"


# Shares, whole GPUs and GPU-less pods, as a replay's typical pods mix them.
MIXED = [
    TypicalPod(0.3, 4000, 1000, 1, memory_mib=16_384),
    TypicalPod(0.2, 8000, 1000, 2, memory_mib=32_768),
    TypicalPod(0.2, 2000, 300, 1, memory_mib=8192),
    TypicalPod(0.15, 3000, 550, 1, memory_mib=4096),
    TypicalPod(0.15, 6000, 0, 0, memory_mib=24_576),
]


def _varied_cluster(nodes: int) -> ClusterState:
    """Nodes of 2 to 8 GPUs and varied CPU and memory, partly filled by shares, whole GPUs
    and GPU-less pods: few of them alike, so no two ways of scoring meet the same input."""
    rng = np.random.default_rng(7)
    state = ClusterState(
        [
            make_node(f"n{i}")
            .gpus(int(rng.choice([2, 4, 8])))
            .cpu(int(rng.integers(16, 97)) * 1000)
            .memory(int(rng.integers(64, 513)) * 1024)
            .build()
            for i in range(nodes)
        ]
    )
    for i in range(nodes):
        for j, share in enumerate(rng.choice([0, 250, 300, 550, 1000], size=3).tolist()):
            pod = make_pod(f"p{i}-{j}").cpu(int(rng.integers(1, 9)) * 1000).memory(2048)
            placed = (pod.share(share) if 0 < share < 1000 else pod.gpus(share // 1000)).build()
            room = [g for g, f in enumerate(state.gpu_row(i)) if f >= placed.gpu.milli]
            gpus = room[: placed.gpu.count]
            if not state.fits(placed, i, gpus):  # else it is left out: the node is full
                state.allocate(placed, i, gpus)
    return state


@pytest.mark.parametrize(
    "pod",
    [
        make_pod("s").share(300).cpu(2000).memory(8192).build(),
        make_pod("t").share(550).cpu(5000).memory(4096).build(),
        make_pod("w").gpus(1).cpu(6000).memory(65_536).build(),
        make_pod("m").gpus(2).cpu(8000).build(),
        make_pod("c").gpus(0).cpu(12_000).memory(131_072).build(),
    ],
)
def test_a_few_nodes_score_as_they_do_among_many(pod: PodSpec) -> None:
    """A decision that rescores the few nodes changed since (a replay's usual cycle) works
    them out one by one; over many, over arrays. Both must give the same figures to the
    last bit, and the same GPU for a share."""
    state = _varied_cluster(200)
    many = StrandAwareFgd(MIXED)
    nodes = np.arange(len(state), dtype=np.int64)
    together = many.score(CycleState(state, pod), pod, nodes)
    gpus_together = [many.choose_gpus(state, pod, n) for n in range(len(state))]
    few = StrandAwareFgd(MIXED)
    apart = np.concatenate(
        [few.score(CycleState(state, pod), pod, part) for part in np.array_split(nodes, 40)]
    )
    assert together.tobytes() == apart.tobytes()
    assert [few.choose_gpus(state, pod, n) for n in range(len(state))] == gpus_together


@pytest.mark.parametrize(
    "pod",
    [
        make_pod("s").share(300).cpu(2000).build(),
        make_pod("h").share(550).cpu(9000).build(),
        make_pod("w").gpus(1).cpu(6000).build(),
        make_pod("m").gpus(2).cpu(30_000).build(),
        make_pod("c").gpus(0).cpu(12_000).build(),
    ],
)
def test_fgds_model_gives_a_few_nodes_the_figures_it_gives_them_among_many(pod: PodSpec) -> None:
    """FGD's fragmentation drops of a few nodes are worked out node by node, of many over
    arrays: the same figures to the last bit, for the same GPUs of a share, and again after
    some nodes changed (their kept parts recomputed, the others' reused)."""
    state = _varied_cluster(200)
    nodes = np.arange(len(state), dtype=np.int64)
    parts = np.array_split(nodes, 40)
    few = FgdScore(MIXED).model(state)
    for round_ in range(2):
        many = FgdScore(MIXED).model(state)
        if pod.gpu.is_shared:
            at, slot, together = many.decrease_if_shared(state, pod, nodes)
            pieces = [few.decrease_if_shared(state, pod, part) for part in parts]
            assert (
                np.concatenate(
                    [part[a] for part, (a, _, _) in zip(parts, pieces, strict=True)]
                ).tolist()
                == at.tolist()
            )
            assert np.concatenate([s for _, s, _ in pieces]).tolist() == slot.tolist()
            apart = np.concatenate([d for _, _, d in pieces])
        else:
            together = many.decrease_if_whole(state, pod, nodes)
            apart = np.concatenate([few.decrease_if_whole(state, pod, part) for part in parts])
        assert together.tobytes() == apart.tobytes()
        assert np.count_nonzero(together) > 0  # the figures are not all alike
        for node in range(0, len(state), 7):  # change some nodes before the second round
            placed = make_pod(f"more{round_}-{node}").share(250).cpu(1000).build()
            room = [g for g, f in enumerate(state.gpu_row(node)) if f >= 250][:1]
            if room and not state.fits(placed, node, room):
                state.allocate(placed, node, room)

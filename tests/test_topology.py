"""NVLink-aware GPU choice, the island score and RDMA next to the GPUs: scenarios through
the whole scheduling cycle (the ``kgpu`` profile), and the annotation that records them."""

from __future__ import annotations

import json

import numpy as np

from kgpu.config import load_profile
from kgpu.framework.cycle import CycleState
from kgpu.framework.scheduler import Placement
from kgpu.kube.objects.device_allocation import (
    ALLOCATION_ANNOTATION,
    VISIBLE_DEVICES_ANNOTATION,
    render_allocation,
)
from kgpu.model.devices import Device, NodeDevices
from kgpu.model.gpu import GpuRequest, whole_gpus
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodSpec
from kgpu.model.topology import GpuLinks, link_rank
from kgpu.plugins.node.gpu_topology import GpuTopology
from kgpu.plugins.registry import build_scheduler
from kgpu.state.cluster import ClusterState
from tests.builders import make_node, make_pod


def links(kinds: list[list[str]]) -> GpuLinks:
    return GpuLinks(
        tuple(tuple(0 if k == "X" else link_rank(k) or 0 for k in row) for row in kinds)
    )


def islands_of_four() -> GpuLinks:
    """A DGX-like node: GPUs 0-3 and 4-7 each joined by NVLink, the two halves by SYS."""
    return links(
        [
            ["X" if a == b else "NV4" if a // 4 == b // 4 else "SYS" for b in range(8)]
            for a in range(8)
        ]
    )


def node(name: str, topology: GpuLinks | None, gpus: int = 8, **devices: object) -> NodeInfo:
    devs = NodeDevices(
        gpus=tuple(
            Device(g, f"GPU-{name}-{g}", numa=g // 4, pcie=f"sw{g // 2}") for g in range(gpus)
        ),
        links=topology,
        **devices,  # type: ignore[arg-type]
    )
    return make_node(name).gpus(gpus, "A100", 81_920).with_devices(devs).build()


def place(state: ClusterState, pod: PodSpec, policy: str = "kgpu") -> Placement:
    outcome = build_scheduler(load_profile(policy)).schedule(state, pod)
    assert isinstance(outcome, Placement), outcome
    state.allocate(pod, outcome.node, outcome.gpus)
    return outcome


def test_a_four_gpu_pod_lands_inside_one_island() -> None:
    state = ClusterState([node("dgx", islands_of_four())])
    place(state, make_pod("one").gpus(1).build())
    assert state.node_gpus_free(0)[0] == 0  # the lone GPU went where it breaks no island
    four = place(state, make_pod("four").gpus(4).build())
    assert four.gpus == (4, 5, 6, 7)  # not the lowest idle 1, 2, 3, 4 across the islands


def test_a_two_gpu_pod_takes_the_free_nvlink_pair() -> None:
    """GPUs 0 and 1 reach nothing over NVLink; 2 and 3 are an NVLink pair."""
    pair = links(
        [
            ["X", "PHB", "SYS", "SYS"],
            ["PHB", "X", "SYS", "SYS"],
            ["SYS", "SYS", "X", "NV2"],
            ["SYS", "SYS", "NV2", "X"],
        ]
    )
    state = ClusterState([node("n", pair, gpus=4)])
    assert place(state, make_pod("two").gpus(2).build()).gpus == (2, 3)
    state.release(make_pod("two").build().key)
    # A single GPU keeps the pair whole: it takes an unconnected one.
    assert place(state, make_pod("one").gpus(1).build()).gpus == (0,)


def test_without_topology_whole_gpus_are_the_lowest_idle_as_before() -> None:
    state = ClusterState([node("plain", None)])
    place(state, make_pod("one").gpus(1).build())
    assert place(state, make_pod("four").gpus(4).build()).gpus == (1, 2, 3, 4)


def test_the_score_prefers_a_node_where_the_request_fits_one_island() -> None:
    split, whole = node("split", islands_of_four()), node("whole", islands_of_four())
    state = ClusterState([split, whole])
    # "split" keeps 2 idle GPUs in each island; "whole" keeps one island idle.
    for g in (0, 1, 4, 5):
        state.allocate(make_pod(f"s{g}").gpus(1).build(), 0, [g])
    for g in (0, 1, 2, 3):
        state.allocate(make_pod(f"w{g}").gpus(1).build(), 1, [g])
    four = make_pod("four").gpus(4).build()
    scores = GpuTopology().score(CycleState(state, four), four, np.array([0, 1]))
    assert scores.tolist() == [0.0, 100.0]  # SYS is rank 0: the worst there is
    assert place(state, four).node == 1
    two = make_pod("two").gpus(2).build()
    assert GpuTopology().score(CycleState(state, two), two, np.array([0])).tolist() == [100.0]


def test_rdma_devices_sit_next_to_the_gpus() -> None:
    """GPU 0 is taken, so a 4-GPU pod gets GPUs 4-7 (NUMA node 1, switches sw2 and sw3):
    of the NICs, mlx5_2 shares switch sw2 with them and beats mlx5_3, which is only on
    the same NUMA node, and mlx5_0, the lowest but on the other NUMA node."""
    nics = (
        Device(0, "mlx5_0", numa=0, pcie="sw0"),
        Device(1, "mlx5_3", numa=1, pcie="sw9"),
        Device(2, "mlx5_2", numa=1, pcie="sw2"),
    )
    state = ClusterState([node("dgx", islands_of_four(), rdma=nics)])
    state.allocate(make_pod("one").gpus(1).build(), 0, [0])
    pod = make_pod("train").request(GpuRequest(4, 1000, rdma=1)).build()
    placed = place(state, pod)
    assert placed.gpus == (4, 5, 6, 7)
    alloc = state.allocations[pod.key]
    assert alloc.rdma == (2,)
    notes = render_allocation(state, alloc)
    assert json.loads(notes[ALLOCATION_ANNOTATION])["rdma"] == [
        {"minor": 2, "uuid": "mlx5_2", "resources": {"kubernetes.io/rdma": 100}}
    ]
    assert notes[VISIBLE_DEVICES_ANNOTATION] == "4,5,6,7"
    # Two NICs wanted, only NUMA node 1 has two: both of those, switch first.
    two = make_pod("more").request(GpuRequest(2, 1000, rdma=2)).build()
    state.release(pod.key)
    state.allocate(two, 0, [4, 5])
    assert state.allocations[two.key].rdma == (1, 2)


def test_the_annotation_is_the_design_contract() -> None:
    state = ClusterState([node("n", None, gpus=2)])
    share = make_pod("share").request(GpuRequest(1, 500, memory_milli=100)).build()
    state.allocate(share, 0, [1])
    data = json.loads(render_allocation(state, state.allocations[share.key])[ALLOCATION_ANNOTATION])
    assert data == {
        "gpu": [
            {
                "minor": 1,
                "uuid": "GPU-n-1",
                "resources": {
                    "kubernetes.io/gpu-core": 50,
                    "kubernetes.io/gpu-memory-ratio": 10,
                    "kubernetes.io/gpu-memory": "8192Mi",
                    "kgpu.io/gpu-milli": 500,
                },
            }
        ]
    }
    whole = make_pod("whole").request(whole_gpus(1)).build()
    state.allocate(whole, 0, [0])
    notes = render_allocation(state, state.allocations[whole.key])
    resources = json.loads(notes[ALLOCATION_ANNOTATION])["gpu"][0]["resources"]
    assert resources["kubernetes.io/gpu-memory"] == "81920Mi"
    assert resources["kubernetes.io/gpu-memory-ratio"] == 100


def test_requests_the_topology_score_leaves_alone_are_placed_by_the_first_score() -> None:
    """A share, one whole GPU or none score 0 everywhere (``zero_for``), so the scheduler
    neither asks GpuTopology nor adds it: kgpu's choice and its total are StrandAwareFGD's
    own best. Two whole GPUs are scored by their links."""
    state = ClusterState([node("dgx", islands_of_four()), node("plain", None)])
    state.allocate(make_pod("busy").gpus(1).build(), 0, [0])
    nodes = np.array([0, 1])
    topology = GpuTopology()
    for pod in (
        make_pod("share").share(500).build(),
        make_pod("one").gpus(1).build(),
        make_pod("none").gpus(0).cpu(2000).build(),
    ):
        assert topology.zero_for(pod)
        assert topology.score(CycleState(state, pod), pod, nodes).tolist() == [0.0, 0.0]
        scheduler = build_scheduler(load_profile("kgpu"))
        outcome = scheduler.schedule(state, pod)
        assert isinstance(outcome, Placement)
        first = scheduler.scores[0][0].score(CycleState(state, pod), pod, nodes)
        assert (outcome.node, outcome.score) == (int(first.argmax()), float(first.max()))
    two = make_pod("two").gpus(2).build()
    assert not topology.zero_for(two)
    assert topology.score(CycleState(state, two), two, nodes).tolist() == [100.0, 50.0]

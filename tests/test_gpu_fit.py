"""GpuFit's reasons when a node's Device marks GPUs unhealthy: the node says so instead of
reading as merely full, on every path (one node or many, plain or device requests)."""

from __future__ import annotations

import numpy as np
import pytest

from kgpu.config import load_profile
from kgpu.framework.cycle import CycleState
from kgpu.framework.scheduler import Unschedulable
from kgpu.model.devices import Device, NodeDevices
from kgpu.model.gpu import GpuRequest
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodSpec
from kgpu.plugins.node.gpu_fit import GpuFit
from kgpu.plugins.registry import build_scheduler
from kgpu.state.cluster import ClusterState
from tests.builders import make_node, make_pod, verdict_reasons


def _node(name: str, bad: tuple[int, ...]) -> NodeInfo:
    gpus = tuple(Device(m, f"GPU-{name}-{m}", healthy=m not in bad) for m in range(4))
    return make_node(name).gpus(4, "H100").with_devices(NodeDevices(gpus=gpus)).build()


def _state(bad: tuple[int, ...], taken: dict[int, int], count: int = 10) -> ClusterState:
    """``count`` alike nodes of four GPUs: ``bad`` unhealthy, ``taken`` slot → milli held."""
    state = ClusterState([_node(f"n{i}", bad) for i in range(count)])
    for i in range(count):
        for slot, milli in taken.items():
            state.allocate(make_pod(f"x{i}-{slot}").share(milli).build(), i, [slot])
    return state


def _reason(state: ClusterState, pod: PodSpec, nodes: int) -> str:
    picked = np.arange(nodes, dtype=np.int64)
    return verdict_reasons(GpuFit().filter(CycleState(state, pod), pod, picked))[0]


@pytest.mark.parametrize(
    ("bad", "taken", "pod", "reason"),
    [
        # Two idle and two unhealthy: three would fit were they healthy, five never.
        ((1, 3), {}, make_pod().gpus(3).build(), "GPUUnhealthy"),
        ((1, 3), {}, make_pod().gpus(5).build(), "InsufficientGPU"),
        ((1, 3), {}, make_pod().gpus(2).build(), ""),
        ((), {0: 1000, 1: 1000}, make_pod().gpus(3).build(), "InsufficientGPU"),
        # The healthy GPUs have 0.4 free; an unhealthy one would have all of it.
        ((1, 3), {0: 600, 2: 600}, make_pod().share(500).build(), "GPUUnhealthy"),
        ((1, 3), {0: 600, 2: 600}, make_pod().share(400).build(), ""),
        ((), {0: 600, 1: 600, 2: 600, 3: 600}, make_pod().share(500).build(), "InsufficientGPUShare"),
        # A request that also sizes GPU memory goes through the device path.
        ((1, 3), {}, make_pod().request(GpuRequest(3, 1000, memory_mib=1_000)).build(), "GPUUnhealthy"),
        ((), {0: 1000, 1: 1000}, make_pod().request(GpuRequest(3, 1000, memory_mib=1_000)).build(), "InsufficientGPU"),
    ],
)  # fmt: skip
def test_a_node_short_only_for_its_unhealthy_gpus_says_so(
    bad: tuple[int, ...], taken: dict[int, int], pod: PodSpec, reason: str
) -> None:
    state = _state(bad, taken)
    # One or two nodes are judged one by one, more as arrays: both give the same reason.
    assert _reason(state, pod, 1) == reason
    assert _reason(state, pod, 10) == reason


def test_the_pending_message_counts_the_nodes_with_unhealthy_gpus() -> None:
    state = ClusterState([_node("n0", (0, 1)), _node("n1", ())])
    for slot in (0, 1):
        state.allocate(make_pod(f"x{slot}").gpus(1).build(), 1, [slot])
    result = build_scheduler(load_profile("kgpu")).schedule(state, make_pod("big").gpus(3).build())
    assert isinstance(result, Unschedulable)
    assert result.status.message == (
        "0/2 nodes are available: 1 insufficient GPU, "
        "1 node(s) had unhealthy GPUs the pod would need."
    )


def _mixed_cluster(count: int) -> ClusterState:
    """``count`` nodes: A100 and T4 nodes of four GPUs (some with unhealthy ones), a few
    without GPUs, each partly filled by shares and whole GPUs."""
    rng = np.random.default_rng(5)
    nodes = []
    for i in range(count):
        kind = i % 5
        if kind == 0:
            nodes.append(make_node(f"n{i}").build())
        elif kind == 1:
            nodes.append(_node(f"n{i}", (int(rng.integers(0, 4)),)))
        else:
            nodes.append(make_node(f"n{i}").gpus(4, "A100" if kind == 2 else "T4").build())
    state = ClusterState(nodes)
    for i in range(count):
        for j, share in enumerate(rng.choice([0, 300, 600, 1000], size=6).tolist()):
            if not share:
                continue
            pod = (
                make_pod(f"x{i}-{j}").share(share)
                if share < 1000
                else make_pod(f"x{i}-{j}").gpus(1)
            )
            placed = pod.build()
            room = [
                g for g, f in enumerate(state.gpu_row(i)[: state.nodes[i].gpu_count]) if f >= share
            ]
            if room and not state.fits(placed, i, room[:1]):
                state.allocate(placed, i, room[:1])
    return state


@pytest.mark.parametrize(
    ("pod", "seen"),
    [
        (make_pod().share(500).build(), {"GPUUnhealthy", "InsufficientGPUShare"}),
        (make_pod().share(800, "A100").build(), {"GPUModelMismatch", "InsufficientGPUShare"}),
        (make_pod().gpus(2).build(), {"GPUUnhealthy", "InsufficientGPU"}),
        (make_pod().gpus(3, "T4").build(), {"GPUModelMismatch", "InsufficientGPU"}),
    ],
)
def test_most_of_the_cluster_gets_the_verdicts_its_nodes_get_apart(
    pod: PodSpec, seen: set[str]
) -> None:
    """A plain request judged on most of the cluster (tests over every node), on a few
    dozen nodes (their figures gathered) and on one node at a time: the same verdicts."""
    state = _mixed_cluster(80)
    cycle = CycleState(state, pod)
    every = verdict_reasons(GpuFit().filter(cycle, pod, np.arange(80, dtype=np.int64)))
    parts = [np.arange(start, min(start + 17, 80), dtype=np.int64) for start in range(0, 80, 17)]
    apart = [r for part in parts for r in verdict_reasons(GpuFit().filter(cycle, pod, part))]
    alone = [_reason_of(state, pod, n) for n in range(80)]
    assert every == apart == alone
    assert {"NoGPU", ""} | seen <= set(every)  # the reasons whose order matters are met


def _reason_of(state: ClusterState, pod: PodSpec, node: int) -> str:
    picked = np.array([node], dtype=np.int64)
    return verdict_reasons(GpuFit().filter(CycleState(state, pod), pod, picked))[0]

"""NodePlacement: bin packing or spreading, per profile, for GPU pods and CPU pods apart."""

from __future__ import annotations

import pytest

from kgpu.framework.profile import Profile, WeightedPlugin
from kgpu.framework.scheduler import Placement
from kgpu.plugins.node.node_placement import NodePlacement
from kgpu.plugins.registry import build_scheduler
from kgpu.state.cluster import ClusterState
from tests.builders import make_node, make_pod

FILTERS = ("NodeUnschedulable", "NodeSelector", "TaintToleration", "NodeResourcesFit", "GpuFit")


def _profile(gpu: str, cpu: str) -> Profile:
    return Profile(
        name=f"{gpu}-{cpu}",
        filters=FILTERS,
        scores=(WeightedPlugin(name="NodePlacement"),),
        gpuChoice="GpuTightest",
        pluginArgs={"NodePlacement": {"gpu": gpu, "cpu": cpu}},
    )


def _cluster() -> ClusterState:
    state = ClusterState([make_node("busy").gpus(4).build(), make_node("idle").gpus(4).build()])
    state.allocate(make_pod("gpu-hog").gpus(2).cpu(1000).build(), 0, (0, 1))
    state.allocate(make_pod("cpu-hog").cpu(30_000).build(), 1, ())
    return state


@pytest.mark.parametrize(
    ("gpu", "cpu", "gpu_pod_node", "cpu_pod_node"),
    [
        ("binpack", "binpack", "busy", "idle"),
        ("spread", "binpack", "idle", "idle"),
        ("binpack", "spread", "busy", "busy"),
        ("spread", "spread", "idle", "busy"),
    ],
)
def test_gpu_and_cpu_strategies_are_chosen_apart(
    gpu: str, cpu: str, gpu_pod_node: str, cpu_pod_node: str
) -> None:
    scheduler = build_scheduler(_profile(gpu, cpu))
    state = _cluster()
    got = []
    for pod in (make_pod("g").gpus(1).build(), make_pod("c").cpu(2000).build()):
        outcome = scheduler.schedule(state, pod)
        assert isinstance(outcome, Placement)
        got.append(state.nodes[outcome.node].name)
    assert got == [gpu_pod_node, cpu_pod_node]


def test_bad_arguments_say_what_is_expected() -> None:
    with pytest.raises(ValueError, match="argument gpu is 'pack', expected binpack or spread"):
        NodePlacement.from_args({"gpu": "pack"})
    with pytest.raises(ValueError, match=r"arguments \['memory'\] are unknown"):
        NodePlacement.from_args({"memory": "spread"})

"""Table tests of the paper's score plugins: the exact integer scores the paper's simulator
gives, on small hand-built nodes."""

from __future__ import annotations

import numpy as np
import pytest

from kgpu.framework.cycle import CycleState
from kgpu.model.pod import PodSpec
from kgpu.plugins.node.best_fit import BestFit, min_max_normalize
from kgpu.plugins.node.dot_product import DotProduct
from kgpu.plugins.node.gpu_clustering import GpuClustering
from kgpu.plugins.node.gpu_packing import GpuPacking
from kgpu.state.cluster import ClusterState
from tests.builders import make_node, make_pod


def _state() -> ClusterState:
    """n0: 8 idle GPUs; n1: 4 GPUs, one holding a 0.6 share; n2: 2 GPUs, one taken whole."""
    state = ClusterState(
        [
            make_node("n0").gpus(8).cpu(96_000).build(),
            make_node("n1").gpus(4).cpu(32_000).build(),
            make_node("n2").gpus(2).cpu(16_000).build(),
        ]
    )
    state.allocate(make_pod("share").share(600).cpu(4000).build(), 1, [2])
    state.allocate(make_pod("whole").gpus(1).cpu(8000).build(), 2, [0])
    return state


def _scores(plugin: object, pod: PodSpec) -> list[float]:
    state = _state()
    nodes = np.arange(len(state), dtype=np.int64)
    return list(plugin.score(CycleState(state, pod), pod, nodes))  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        # all idle 8-GPU node: max(33-8, 8); tightest partial GPU (400 left): 100-4; 1 idle GPU: 49
        (make_pod("s").share(300).build(), [25, 96, 49]),
        # a share bigger than the partial GPU's 400 must open an idle GPU there: 49
        (make_pod("s").share(500).build(), [25, 49, 49]),
        (make_pod("w").gpus(2).build(), [25, 48, 48]),
        (make_pod("c").gpus(0).build(), [0, 0, 0]),
    ],
)
def test_gpu_packing(pod: PodSpec, expected: list[float]) -> None:
    assert _scores(GpuPacking(), pod) == expected


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        # base 25·(8000 − free)/8000 (n0: 0, n1: 14, n2: 21) plus 25 on a node without GPU
        # pods, 75 where only this kind runs, 0 where only other kinds run
        (make_pod("s").share(300).build(), [25, 14 + 75, 21 + 0]),
        (make_pod("w").gpus(1).build(), [25, 14 + 0, 21 + 75]),
        (make_pod("c").gpus(0).build(), [0, 0, 0]),
    ],
)
def test_gpu_clustering(pod: PodSpec, expected: list[float]) -> None:
    assert _scores(GpuClustering(), pod) == expected


def test_dot_product_prefers_the_node_whose_free_resources_align_least() -> None:
    pod = make_pod("s").share(500).cpu(8000).build()
    got = _scores(DotProduct(), pod)
    state = _state()
    expected = [
        int(100 * (1 - ((c / 128000) * (8000 / 128000) + (g / 8000) * (500 / 8000)) / 2))
        for c, g in zip(state.cpu_free, state.gpu_free_total, strict=True)
    ]
    assert got == expected
    assert int(np.argmax(got)) == 2  # the fullest node


def test_best_fit_raw_and_normalised() -> None:
    pod = make_pod("w").gpus(1).cpu(4000).build()
    got = _scores(BestFit(), pod)
    state = _state()
    expected = [
        int((1 - ((c - 4000) / 128000 * 0.5 + (g - 1000) / 8000 * 0.5)) * 100)
        for c, g in zip(state.cpu_free, state.gpu_free_total, strict=True)
    ]
    assert got == expected
    assert list(min_max_normalize(np.array(got, dtype=np.float64))) == [
        (s - min(got)) * 100 // (max(got) - min(got)) for s in got
    ]
    assert list(min_max_normalize(np.array([7.0, 7.0]))) == [0.0, 0.0]

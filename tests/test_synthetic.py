"""The built-in synthetic cluster and workload: seeded, in the documented mix, all valid."""

from __future__ import annotations

from collections import Counter

import pytest

from kgpu.model.units import MILLI_PER_GPU
from kgpu.sim.openb import OPENB_MAX_PODS
from kgpu.sim.synthetic import NODE_KINDS, synthetic_nodes, synthetic_pods


def test_same_seed_same_cluster_and_pods() -> None:
    assert synthetic_nodes(50, seed=7) == synthetic_nodes(50, seed=7)
    assert synthetic_pods(300, seed=7) == synthetic_pods(300, seed=7)


def test_other_seed_other_cluster_and_pods() -> None:
    assert synthetic_nodes(50, seed=7) != synthetic_nodes(50, seed=8)
    assert synthetic_pods(300, seed=7) != synthetic_pods(300, seed=8)


def test_node_mix_follows_the_shares() -> None:
    nodes = synthetic_nodes(400, seed=1)
    assert len(nodes) == 400
    assert len({n.name for n in nodes}) == 400
    by_model = Counter(n.gpu_model for n in nodes)
    for kind in NODE_KINDS:
        assert by_model[kind.model] == round(kind.share * 400)
    assert all(n.max_pods == OPENB_MAX_PODS for n in nodes)
    assert sum(n.gpu_count for n in nodes) == 1780


def test_pod_mix_within_bounds() -> None:
    pods = synthetic_pods(4000, seed=3)
    n = len(pods)
    cpu_only = sum(p.num_gpu == 0 for p in pods) / n
    shared = sum(p.num_gpu == 1 and p.gpu_milli < MILLI_PER_GPU for p in pods) / n
    whole_one = sum(p.num_gpu == 1 and p.gpu_milli == MILLI_PER_GPU for p in pods) / n
    multi = sum(p.num_gpu > 1 for p in pods) / n
    assert cpu_only == pytest.approx(0.13, abs=0.025)
    assert shared == pytest.approx(0.37, abs=0.03)
    assert whole_one == pytest.approx(0.45, abs=0.03)
    assert multi == pytest.approx(0.05, abs=0.015)
    gpu_pods = [p for p in pods if p.num_gpu]
    constrained = sum(bool(p.gpu_spec) for p in gpu_pods) / len(gpu_pods)
    assert constrained == pytest.approx(0.10, abs=0.025)
    assert {p.num_gpu for p in pods} == {0, 1, 2, 4, 8}


def test_every_pod_is_valid_and_fits_an_empty_node() -> None:
    nodes = synthetic_nodes(len(NODE_KINDS) * 20, seed=5)
    for pod in synthetic_pods(2000, seed=5):
        spec = pod.to_pod()  # GpuRequest rejects malformed GPU requests
        assert pod.cpu_milli >= 1000 and pod.memory_mib > 0
        assert pod.gpu_spec == () or pod.num_gpu > 0
        fits = [
            n
            for n in nodes
            if n.cpu_milli >= pod.cpu_milli
            and n.memory_mib >= pod.memory_mib
            and n.gpu_count >= pod.num_gpu
            and (pod.num_gpu == 0 or spec.gpu.allows(n.gpu_model))
        ]
        assert fits, pod


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="node count"):
        synthetic_nodes(0)
    with pytest.raises(ValueError, match="pod count"):
        synthetic_pods(0)

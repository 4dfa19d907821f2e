"""Per-GPU accounting of compute and memory, MPS, MIG and RDMA: exact and symmetric
allocate and release, the filter and the choice held to memory, and rebuilding a state from
the annotations written with the Binding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kgpu.framework.cycle import CycleState
from kgpu.framework.reasons import INSUFFICIENT_GPU_MEMORY
from kgpu.kube.objects.device_allocation import ALLOCATION_ANNOTATION, parse, render_allocation
from kgpu.kube.snapshot.allocation_rebuild import account_recorded
from kgpu.model.devices import Device, NodeDevices
from kgpu.model.gpu import GpuRequest, gpu_share, mig_instances, mps_replicas, whole_gpus
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodKey, PodSpec
from kgpu.plugins.node.device_choice import DeviceChoice
from kgpu.plugins.node.gpu_fit import GpuFit
from kgpu.plugins.node.gpu_tightest import GpuTightest
from kgpu.state.cluster import AllocationError, ClusterState
from tests.builders import make_node, make_pod, state_arrays, verdict_reasons

GPU_MIB = 81_920


def _pod(name: str, gpu: GpuRequest, cpu: int = 100) -> PodSpec:
    return make_pod(name).cpu(cpu).memory(64).request(gpu).build()


def _one(gpus: int = 1, **kw: Any) -> ClusterState:
    node = make_node("a").gpus(gpus, "A100", GPU_MIB)
    for key, value in kw.items():
        node = getattr(node, key)(*value) if isinstance(value, tuple) else getattr(node, key)(value)
    return ClusterState([node.build()])


@pytest.mark.parametrize(
    ("gpu", "milli", "mib", "odd"),
    [
        (gpu_share(500), 500, 40_960, False),  # memory follows compute
        (GpuRequest(1, 333), 333, 27_279, False),  # rounded down, as total × ratio
        (GpuRequest(1, 500, memory_milli=250), 500, 20_480, True),  # core 50, ratio 25
        (GpuRequest(1, 600, memory_mib=4096), 600, 4096, True),  # core 60, 4Gi
        (GpuRequest(1, 0, memory_mib=20_000), 245, 20_000, True),  # KAI gpu-memory: 20000 MiB
        (whole_gpus(1), 1000, GPU_MIB, False),
    ],
)
def test_each_gpu_accounts_compute_and_memory(
    gpu: GpuRequest, milli: int, mib: int, odd: bool
) -> None:
    state = _one(2)
    alloc = state.allocate(_pod("p", gpu), 0, [1])
    assert (alloc.gpu_milli, alloc.gpu_memory, alloc.odd) == (milli, (mib,), odd)
    assert state.node_gpus_free(0) == [1000, 1000 - milli]
    assert state.node_gpus_memory_free(0) == [GPU_MIB, GPU_MIB - mib]
    assert int(state.gpu_odd[0]) == odd
    state.release(alloc.pod)
    assert state.node_gpus_memory_free(0) == [GPU_MIB, GPU_MIB] and state.odd_total == 0


def test_mps_replicas_mig_instances_and_rdma_devices() -> None:
    state = _one(4, replicas=8, mig_slices=("1g.10gb", 7), rdma_devices=2)
    mps = state.allocate(_pod("mps", mps_replicas(2)), 0, [3])
    assert (mps.gpu_milli, mps.gpu_memory) == (250, (20_480,))
    mig = state.allocate(_pod("mig", mig_instances("1g.10gb", 3)), 0, [])
    assert state.mig_free.tolist() == [[4]] and mig.gpus == ()
    net = state.allocate(_pod("net", GpuRequest(1, 1000, rdma=2)), 0, [0])
    assert net.rdma == (0, 1) and state.rdma_free.tolist() == [0]
    with pytest.raises(AllocationError, match="needs 1 free rdma devices"):
        state.allocate(_pod("more", GpuRequest(rdma=1)), 0, [])
    for key in ("default/mps", "default/mig", "default/net"):
        state.release(PodKey(key))
    assert state.mig_free.tolist() == [[7]] and state.rdma_free.tolist() == [2]
    state.check_invariants()


def test_compute_that_fits_is_not_enough_when_memory_is_gone() -> None:
    """A pod of 10% compute holding all of GPU 0's memory leaves 90% compute nobody can use:
    the filter says so, and a policy's pick of that GPU is corrected."""
    state = _one(2)
    state.allocate(_pod("hog", GpuRequest(1, 100, memory_mib=GPU_MIB)), 0, [0])
    state.allocate(_pod("half", gpu_share(500)), 0, [1])
    nodes = np.array([0], dtype=np.int64)
    big = _pod("big", gpu_share(600))
    verdicts = GpuFit().filter(CycleState(state, big), big, nodes)
    assert verdicts.rejected[0][0] == INSUFFICIENT_GPU_MEMORY
    small = _pod("small", gpu_share(400))
    assert GpuTightest().choose_gpus(state, small, 0) == (1,)  # tightest by compute: 1
    assert GpuFit().filter(CycleState(state, small), small, nodes).ok.all()
    tiny = _pod("tiny", gpu_share(50))
    assert GpuTightest().choose_gpus(state, tiny, 0) == (1,)
    state.release(PodKey("default/half"))
    # Now GPU 0 is the tightest by compute, but it has no memory: the choice moves on.
    assert GpuTightest().choose_gpus(state, tiny, 0) == (0,)
    assert DeviceChoice(GpuTightest()).choose_gpus(state, tiny, 0) == (1,)


def test_refused_allocations_change_nothing() -> None:
    state = _one(1)
    state.allocate(_pod("hog", GpuRequest(1, 100, memory_mib=GPU_MIB)), 0, [0])
    before = state.gpu_mem_free.copy(), state.gpu_free.copy()
    with pytest.raises(AllocationError, match="needs 500 milli and 40960 MiB on GPU 0 of a"):
        state.allocate(_pod("p", gpu_share(500)), 0, [0])
    assert np.array_equal(before[0], state.gpu_mem_free)
    assert np.array_equal(before[1], state.gpu_free)


# ---------------------------------------------------------------------------- properties

REQUESTS = st.sampled_from(
    [
        gpu_share(250),
        gpu_share(500),
        GpuRequest(1, 333),
        whole_gpus(1),
        whole_gpus(2),
        whole_gpus(4),
        GpuRequest(1, 300, memory_milli=700),
        GpuRequest(1, 700, memory_milli=100),
        GpuRequest(1, 200, memory_mib=30_000),
        GpuRequest(1, 0, memory_mib=12_000),
        GpuRequest(2, 1000, memory_mib=40_000),
        mps_replicas(1),
        mps_replicas(3),
        mig_instances("1g.10gb", 2),
        GpuRequest(rdma=1),
        GpuRequest(1, 1000, rdma=1),
    ]
)


@st.composite
def _clusters(draw: st.DrawFn) -> list[NodeInfo]:
    nodes = []
    for i in range(draw(st.integers(1, 3))):
        count = draw(st.integers(1, 8))
        node = make_node(f"n{i}").gpus(count, "A100", draw(st.sampled_from([16_384, 81_920])))
        node = node.replicas(draw(st.sampled_from([1, 1, 4, 8])))
        if draw(st.booleans()):
            node = node.mig_slices("1g.10gb", 7)
        healthy = [draw(st.booleans()) or g == 0 for g in range(count)]
        nics = draw(st.integers(0, 2))
        node = node.with_devices(
            NodeDevices(
                gpus=tuple(
                    Device(g, f"GPU-{i}-{g}", ok, numa=g % 2) for g, ok in enumerate(healthy)
                ),
                rdma=tuple(Device(r, f"mlx5_{r}", numa=r % 2) for r in range(nics)),
            )
        )
        nodes.append(node.build())
    return nodes


def _snapshot(state: ClusterState) -> dict[str, Any]:
    arrays = state_arrays(state)
    arrays.pop("node_clock")
    return {**arrays, "busy": {k: set(v) for k, v in state._busy.items() if v}}


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            assert np.array_equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def _held_per_gpu(state: ClusterState) -> tuple[np.ndarray, np.ndarray]:
    milli = np.zeros_like(state.gpu_cap)
    mib = np.zeros_like(state.gpu_mem_cap)
    for alloc in state.allocations.values():
        for g, m in zip(alloc.gpus, alloc.gpu_memory, strict=True):
            milli[alloc.node, g] += alloc.gpu_milli
            mib[alloc.node, g] += m
    return milli, mib


def _node_by_node_equals_arrays(state: ClusterState, gpu: GpuRequest) -> None:
    """GpuFit's two paths (Python for a few nodes, arrays for many) give the same verdicts
    and the same reasons."""
    nodes = np.arange(len(state), dtype=np.int64)
    for req in (
        gpu,
        GpuRequest(
            gpu.count,
            gpu.milli,
            ("T4",),
            gpu.memory_milli,
            gpu.memory_mib,
            gpu.kind,
            gpu.replicas,
            gpu.mig_profile,
            gpu.rdma,
            gpu.fpga,
        ),
    ):
        assert verdict_reasons(GpuFit._few(state, req, nodes)) == verdict_reasons(
            GpuFit._many(state, req, nodes)
        )


@settings(max_examples=120, deadline=None)
@given(_clusters(), st.lists(st.tuples(st.integers(0, 9), REQUESTS, st.booleans()), max_size=40))
def test_random_device_allocations_stay_exact_and_rebuild_from_annotations(
    nodes: list[NodeInfo], ops: list[tuple[int, GpuRequest, bool]]
) -> None:
    state = ClusterState(nodes)
    initial = _snapshot(state)
    choice, fit = DeviceChoice(GpuTightest()), GpuFit()
    specs: dict[PodKey, PodSpec] = {}
    for i, (where, gpu, release) in enumerate(ops):
        if release and specs:
            state.release(sorted(specs)[where % len(specs)])
            specs.pop(sorted(specs)[where % len(specs)])
        else:
            pod = _pod(f"p{i}", gpu)
            node = where % len(nodes)
            if fit.filter(CycleState(state, pod), pod, np.array([node])).ok[0]:
                gpus = choice.choose_gpus(state, pod, node) if gpu.count else ()
                state.allocate(pod, node, gpus)
                specs[pod.key] = pod
            else:
                # Whatever the filter refuses, allocate refuses too, and changes nothing.
                before = _snapshot(state)
                with pytest.raises(AllocationError):
                    state.allocate(pod, node, range(gpu.gpu_slots))
                _same(before, _snapshot(state))
        state.check_invariants()
        _node_by_node_equals_arrays(state, gpu)
        # Never more than a GPU has; each GPU's memory handed out once: free = cap - held.
        milli, mib = _held_per_gpu(state)
        assert np.array_equal(state.gpu_free, state.gpu_cap - milli)
        assert np.array_equal(state.gpu_mem_free, state.gpu_mem_cap - mib)
    # A restarted scheduler reads every allocation back from its annotation: the same state.
    rebuilt = ClusterState(nodes)
    for key, alloc in state.allocations.items():
        text = render_allocation(state, alloc)[ALLOCATION_ANNOTATION]
        assert account_recorded(rebuilt, specs[key], alloc.node, parse("Pod x", text)) == ""
    assert rebuilt.allocations == state.allocations
    _same(_snapshot(rebuilt), _snapshot(state))
    for key in list(specs):
        state.release(key)
    _same(_snapshot(state), initial)

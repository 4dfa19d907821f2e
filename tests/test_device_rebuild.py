"""Requests no GPU can hold, refused without blocking anyone; and the state a restarted
scheduler rebuilds from Kubernetes objects: annotations, the kubelet's checkpoint, the
lowest free minors, and nodes held when nothing else is safe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kgpu.framework.status import Code
from kgpu.kube.objects.device_allocation import render_allocation
from kgpu.kube.objects.node_pod import node_from_k8s, pod_from_k8s
from kgpu.kube.snapshot.cache_snapshot import SnapshotBuilder
from kgpu.model.gpu import GpuRequest, gpu_share
from kgpu.plugins.node.device_choice import DeviceChoice
from kgpu.plugins.node.gpu_tightest import GpuTightest
from kgpu.sim.manifest_results import PodStatus
from kgpu.sim.manifests import simulate_manifests
from kgpu.state.cluster import ClusterState
from tests.builders import make_node, make_pod
from tests.kube_objects import SCHEDULER, node_obj, pod_obj
from tests.session_harness import Snap, binds, pending

TOO_LARGE = (
    "GPU memory larger than any GPU: annotation gpu-memory asks 100000 MiB of one GPU, "
    "expected at most 81920 MiB, the memory of the largest GPU in the cluster"
)


def test_a_memory_no_gpu_has_is_unresolvable_and_the_others_go_on() -> None:
    snap = Snap([make_node("a").gpus(2, "A100", 81_920).build()])
    big = pod_from_k8s(pod_obj("big", annotations={"gpu-memory": "100000"}))
    assert big.gpu == GpuRequest(1, 0, memory_mib=100_000)
    snap.pending(big)
    snap.pending(pod_from_k8s(pod_obj("fits", annotations={"gpu-memory": "81920"})))
    snap.pending(make_pod("after").share(500))
    result = snap.run(plugins=("priority", "gang"))
    assert sorted(binds(result)) == [("after", "a"), ("fits", "a")]
    assert pending(result) == {"big": TOO_LARGE}
    assert result.pending[0].status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_a_malformed_request_never_blocks_the_others(tmp_path: Path) -> None:
    bad = pod_obj("bad")
    bad["spec"]["containers"][0]["resources"]["requests"]["kubernetes.io/gpu"] = "150"
    good = pod_obj("good", fraction="0.5")
    docs = [node_obj("a", gpus=1), bad, good]
    (tmp_path / "all.yaml").write_text("\n---\n".join(json.dumps(d) for d in docs))
    run = simulate_manifests(tmp_path)
    by_pod = {r.pod: r for r in run.results}
    assert by_pod["default/good"].status is PodStatus.SCHEDULED
    assert by_pod["default/bad"].status is PodStatus.PENDING
    assert by_pod["default/bad"].message == (
        "Pod default/bad: resource kubernetes.io/gpu is 150, expected a share of one GPU "
        "below 100, or whole GPUs as a multiple of 100 (100 = one GPU)"
    )


def _bound(name: str, node: str, **kw: Any) -> dict[str, Any]:
    return pod_obj(name, node=node, **kw)


def test_rebuilding_from_annotations_equals_the_live_state() -> None:
    """Pods placed live (a memory-sized share, a ratio, whole GPUs) write their annotations;
    a fresh snapshot of the same objects has exactly the live arrays."""
    nodes = [node_obj("a", gpus=4), node_obj("b", gpus=2)]
    live = ClusterState([node_from_k8s(n) for n in nodes])
    choice = DeviceChoice(GpuTightest())
    objs = [
        pod_obj("mem", annotations={"gpu-memory": "30000"}),
        pod_obj("half", fraction="0.5"),
        pod_obj("two", gpus=2),
        pod_obj("ratio"),
    ]
    objs[3]["spec"]["containers"][0]["resources"]["requests"].update(
        {"kubernetes.io/gpu-core": "30", "kubernetes.io/gpu-memory-ratio": "70"}
    )
    bound = []
    for obj, node in zip(objs, (0, 0, 1, 0), strict=True):
        spec = pod_from_k8s(obj)
        alloc = live.allocate(spec, node, choice.choose_gpus(live, spec, node))
        obj["metadata"]["annotations"].update(render_allocation(live, alloc))
        obj["spec"]["nodeName"] = live.nodes[node].name
        bound.append(obj)
    snap = SnapshotBuilder(SCHEDULER).build(nodes, bound, {})
    assert snap.from_annotations == 4 and snap.problems == []
    for name in ("gpu_free", "gpu_mem_free", "gpu_odd", "cpu_free", "pods"):
        assert np.array_equal(getattr(snap.state, name), getattr(live, name)), name
    assert snap.state.allocations == live.allocations


def _device(node: str, checkpoints: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": "Device",
        "metadata": {
            "name": node,
            "resourceVersion": "7",
            "annotations": {"kgpu.io/devices-checkpoints": json.dumps(checkpoints)},
        },
        "spec": {"devices": [{"type": "gpu", "minor": g, "uuid": f"GPU-{g}"} for g in range(4)]},
    }


def test_a_foreign_pod_holds_the_gpus_its_checkpoint_names_else_the_lowest() -> None:
    theirs = _bound("theirs", "a", gpus=2, scheduler="default-scheduler")
    theirs["metadata"]["uid"] = "u-theirs"
    other = _bound("other", "a", gpus=1, scheduler="default-scheduler")
    checkpoint = [
        {"podUID": "u-theirs", "resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-2", "GPU-3"]}
    ]
    snap = SnapshotBuilder(SCHEDULER).build(
        [node_obj("a", gpus=4)], [theirs, other], {}, devices={"a": _device("a", checkpoint)}
    )
    assert snap.state.node_gpus_free(0) == [0, 1000, 0, 0]  # theirs on 2, 3; other lowest
    assert snap.foreign == 2 and snap.held == 0


def test_a_pod_that_does_not_fit_holds_what_is_left_of_gpu_memory_and_compute() -> None:
    hog = _bound("hog", "a", annotations={"gpu-memory": "81920"}, scheduler="default-scheduler")
    odd = _bound("odd", "a", scheduler="default-scheduler")
    odd["spec"]["containers"][0]["resources"]["requests"].update(
        {"kubernetes.io/gpu-core": "10", "kubernetes.io/gpu-memory": "40Gi"}
    )
    odd["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"
    hog["metadata"]["creationTimestamp"] = "2025-01-01T00:00:01Z"
    snap = SnapshotBuilder(SCHEDULER).build([node_obj("a", gpus=1)], [hog, odd], {})
    state = snap.state
    # odd holds 100 milli and 40960 MiB; hog (all 81920 MiB) no longer fits: it holds the rest.
    assert snap.held == 1 and state.allocations[make_pod("odd").build().key].gpu_milli == 100
    assert state.node_gpus_free(0) == [0] and state.node_gpus_memory_free(0) == [0]
    state.check_invariants()
    # Nothing is handed out on the held node, however small.
    assert state.fits(make_pod("x").build(), 0) != ""
    assert state.fits(make_pod("y").cpu(0).memory(0).request(gpu_share(1)).build(), 0, [0])


def _ours(name: str, minor: int, **kw: Any) -> dict[str, Any]:
    """A pod kgpu bound to node a, its annotation naming GPU ``minor``."""
    note = {"minor": minor, "resources": {"kgpu.io/gpu-milli": 1000}}
    pod = _bound(name, "a", **kw)
    pod["metadata"]["annotations"]["kgpu.io/device-allocation"] = json.dumps({"gpu": [note]})
    return pod


def _by_name(name: str, *ids: str) -> dict[str, Any]:
    return {"podNamespace": "default", "podName": name, "resourceName": "nvidia.com/gpu",
            "deviceIDs": list(ids)}  # fmt: skip


def test_the_kubelet_s_gpus_win_over_the_annotation_where_they_have_room() -> None:
    pod = _ours("mine", 0, gpus=1)
    snap = SnapshotBuilder(SCHEDULER).build(
        [node_obj("a", gpus=4)], [pod], {}, devices={"a": _device("a", [_by_name("mine", "GPU-2")])}
    )
    assert snap.state.node_gpus_free(0) == [1000, 1000, 0, 1000]
    [diff] = snap.differences
    assert (diff.node, diff.recorded, diff.kubelet, diff.conflict) == ("a", (0,), (2,), "")
    assert snap.problems == [] and snap.from_annotations == 1


def test_a_claim_on_gpus_another_pod_holds_is_a_conflict_and_nothing_counts_twice() -> None:
    share = _ours("share", 1, fraction="0.5")
    share["metadata"]["annotations"]["kgpu.io/device-allocation"] = (
        '{"gpu":[{"minor":1,"resources":{"kgpu.io/gpu-milli":500}}]}'
    )
    share["metadata"]["creationTimestamp"] = "2025-01-01T00:00:00Z"
    whole = _ours("whole", 0, gpus=1)
    whole["metadata"]["creationTimestamp"] = "2025-01-01T00:00:01Z"
    claims = [_by_name("whole", "GPU-1"), _by_name("gone", "GPU-3")]
    snap = SnapshotBuilder(SCHEDULER).build(
        [node_obj("a", gpus=4)], [share, whole], {}, devices={"a": _device("a", claims)}
    )
    # The books keep the annotation: whole on 0, the share on 1, GPU 1 not given twice.
    assert snap.state.node_gpus_free(0) == [0, 500, 1000, 1000]
    [diff] = snap.differences
    assert (diff.recorded, diff.kubelet) == ((0,), (1,))
    assert "GPUs [1] of a have no room for it in kgpu's books" in diff.conflict
    [stray] = snap.problems
    assert (stray.reason, stray.message) == (
        "UnknownCheckpointPod",
        "Device a: checkpoint entries for pods not on node a are not used: "
        "pod default/gone, which does not exist (GPU-3)",
    )


def test_refused_checkpoint_entries_are_a_warning_on_the_device() -> None:
    bad = [_by_name("x", "GPU-7"), _by_name("theirs", "GPU-1")]
    theirs = _bound("theirs", "a", gpus=1, scheduler="default-scheduler")
    snap = SnapshotBuilder(SCHEDULER).build(
        [node_obj("a", gpus=4)], [theirs], {}, devices={"a": _device("a", bad)}
    )
    assert snap.state.node_gpus_free(0) == [1000, 0, 1000, 1000]  # the good entry is used
    [problem] = snap.problems
    assert problem.reason == "InvalidDeviceCheckpoint"
    assert problem.message == (
        'Device a: annotation kgpu.io/devices-checkpoints[0].deviceIDs[0] is "GPU-7", '
        "expected the uuid of a GPU in spec.devices; those entries are not used"
    )

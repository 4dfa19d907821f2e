"""The device-allocation annotation and the per-session snapshot, from plain dicts."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from kgpu.kube.objects.device_allocation import (
    ALLOCATION_ANNOTATION,
    VISIBLE_DEVICES_ANNOTATION,
    DeviceAllocation,
    parse,
    render,
)
from kgpu.kube.objects.node_pod import ConversionError, pod_from_k8s
from kgpu.kube.snapshot.cache_snapshot import Assumed, SnapshotBuilder
from kgpu.model.gpu import whole_gpus
from kgpu.model.node import NodeName
from kgpu.model.pod import PodKey, PodSpec
from tests.kube_objects import node_obj, pod_obj

REF = "Pod default/p"


def test_render_writes_the_contract() -> None:
    notes = render([1, 0], 500, gpu_memory_mib=81920)
    assert notes[VISIBLE_DEVICES_ANNOTATION] == "0,1"
    data = json.loads(notes[ALLOCATION_ANNOTATION])
    assert data == {
        "gpu": [
            {
                "minor": m,
                "resources": {
                    "kubernetes.io/gpu-core": 50,
                    "kubernetes.io/gpu-memory-ratio": 50,
                    "kubernetes.io/gpu-memory": "40960Mi",
                    "kgpu.io/gpu-milli": 500,
                },
            }
            for m in (0, 1)
        ]
    }


@pytest.mark.parametrize(
    ("minors", "milli"), [((0,), 1000), ((2, 5), 1000), ((3,), 333), ((0,), 1)]
)
def test_render_then_parse_is_exact(minors: tuple[int, ...], milli: int) -> None:
    text = render(minors, milli, uuids={minors[0]: "GPU-abc"})[ALLOCATION_ANNOTATION]
    assert parse(REF, text) == DeviceAllocation(minors, milli)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"gpu": [{"minor": 0, "resources": {"kubernetes.io/gpu-core": 100}}]}', ((0,), 1000)),
        ('{"gpu": [{"minor": 1, "resources": {"kubernetes.io/gpu-core": 33.3}}]}', ((1,), 333)),
        ('{"gpu": [{"minor": 0, "resources": {"kubernetes.io/gpu-core": 25}},'
         ' {"minor": 1, "resources": {"kubernetes.io/gpu-core": 50}}]}', ((0, 1), 500)),
        ('{"rdma": []}', ((), 0)),
    ],
    ids=["koordinator", "decimal-percent", "largest-share", "no-gpu"],
)  # fmt: skip
def test_parse_reads_koordinator_writing(text: str, expected: tuple[tuple[int, ...], int]) -> None:
    assert parse(REF, text) == DeviceAllocation(*expected)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("GPU 0", 'annotation kgpu.io/device-allocation is "GPU 0", expected JSON such as'),
        ("[1]", "expected a JSON object"),
        ('{"gpu": {"minor": 0}}', "annotation kgpu.io/device-allocation.gpu is"),
        ('{"gpu": [{"minor": -1, "resources": {}}]}', ".gpu[0].minor is -1, expected a GPU minor"),
        ('{"gpu": [{"minor": "0", "resources": {}}]}', '.gpu[0].minor is "0"'),
        ('{"gpu": [{"minor": 0, "resources": {}}, {"minor": 0, "resources": {}}]}', "expected"),
        ('{"gpu": [{"minor": 0}]}', ".gpu[0].resources is null, expected an object"),
        ('{"gpu": [{"minor": 0, "resources": {"kubernetes.io/gpu-core": 0}}]}', "above 0"),
        ('{"gpu": [{"minor": 0, "resources": {"kubernetes.io/gpu-core": 150}}]}', "at most 100"),
        ('{"gpu": [{"minor": 0, "resources": {"kgpu.io/gpu-milli": 2000}}]}', "from 1 to 1000"),
    ],
)
def test_parse_names_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConversionError) as caught:
        parse(REF, text)
    assert str(caught.value).startswith(REF + ": annotation kgpu.io/device-allocation")
    assert message in str(caught.value)


# ---------------------------------------------------------------------------- snapshots


def annotated(
    name: str, node: str, minors: list[int], milli: int = 1000, **kw: object
) -> dict[str, Any]:
    notes = render(minors, milli)
    return pod_obj(name, node=node, gpus=len(minors), annotations=notes, **kw)  # type: ignore[arg-type]


def free(snap_state: object, node: int) -> list[int]:
    return snap_state.node_gpus_free(node)  # type: ignore[attr-defined, no-any-return]


def test_ready_nodes_only_and_bound_pods_everywhere() -> None:
    nodes = [node_obj("b", gpus=4), node_obj("a", gpus=4), node_obj("down", ready=False)]
    pods = [
        annotated("ours", "a", [2]),
        pod_obj("theirs", gpus=2, node="a", scheduler="default-scheduler"),
        pod_obj("done", gpus=4, node="b", scheduler="default-scheduler"),
        pod_obj("elsewhere", gpus=1, node="down"),
        pod_obj("pending", gpus=1),
        pod_obj("not-ours", gpus=1, scheduler="default-scheduler"),
    ]
    pods[2]["status"] = {"phase": "Succeeded"}
    snap = SnapshotBuilder("kgpu-scheduler").build(nodes, pods, {})
    assert [n.name for n in snap.state.nodes] == ["a", "b"]
    assert free(snap.state, 0) == [0, 0, 0, 1000]  # ours on 2 (annotation), theirs on 0, 1
    assert free(snap.state, 1) == [1000] * 4  # a finished pod holds nothing
    assert [p.spec.key for p in snap.pending] == ["default/pending"]
    assert (snap.from_annotations, snap.foreign, snap.problems) == (1, 1, [])


def test_assumed_pods_count_until_the_cache_shows_them() -> None:
    nodes = [node_obj("a", gpus=2)]
    spec = PodSpec(PodKey("default/flying"), cpu_milli=1000, gpu=whole_gpus(1))
    pods = [pod_obj("flying", gpus=1)]
    pods[0]["metadata"]["uid"] = "u1"
    entry = Assumed("u1", spec, NodeName("a"), (1,))
    snap = SnapshotBuilder("kgpu-scheduler").build(nodes, pods, {spec.key: entry})
    assert snap.pending == [] and snap.assumed == 1
    assert free(snap.state, 0) == [1000, 0]
    # A pod deleted and created again under the same name is not the assumed one.
    pods[0]["metadata"]["uid"] = "u2"
    snap = SnapshotBuilder("kgpu-scheduler").build(nodes, pods, {spec.key: entry})
    assert [p.spec.key for p in snap.pending] == ["default/flying"]


@pytest.mark.parametrize(
    ("note", "why"),
    [
        ("GPU 0 please", "expected JSON"),
        (render([0, 1], 1000)[ALLOCATION_ANNOTATION], "names 2 GPUs, expected the 1"),
        (render([7], 1000)[ALLOCATION_ANNOTATION], "names GPUs [7] of node a"),
        (None, "annotation kgpu.io/device-allocation is missing"),
    ],
    ids=["garbled", "count", "no-such-gpu", "missing"],
)
def test_a_bad_annotation_warns_and_counts_the_pod_once(note: str | None, why: str) -> None:
    nodes = [node_obj("a", gpus=2)]
    notes = {} if note is None else {ALLOCATION_ANNOTATION: note}
    pods = [pod_obj("odd", gpus=1, node="a", annotations=notes)]
    snap = SnapshotBuilder("kgpu-scheduler").build(nodes, pods, {})
    assert free(snap.state, 0) == [0, 1000]  # on the lowest free GPU, once
    [problem] = snap.problems
    assert problem.reason == "InvalidDeviceAllocation"
    assert why in problem.message and "accounted on GPUs 0 of a" in problem.message


def test_two_annotations_on_one_gpu_over_capacity_fill_the_node() -> None:
    """Two pods recorded on the same whole GPU: the second cannot be where it says; it is
    put on the next free GPU, and when there is none, the node counts as full."""
    nodes = [node_obj("a", gpus=1)]
    pods = [annotated("one", "a", [0]), annotated("two", "a", [0])]
    snap = SnapshotBuilder("kgpu-scheduler").build(nodes, pods, {})
    assert free(snap.state, 0) == [0]
    assert snap.held == 1
    assert int(snap.state.cpu_free[0]) == 0
    snap.state.check_invariants()


def test_an_unreadable_bound_pod_fills_its_node() -> None:
    nodes = [node_obj("a", gpus=2)]
    odd = pod_obj("odd", node="a", scheduler="default-scheduler")
    odd["spec"]["containers"][0]["resources"]["limits"] = {"kubernetes.io/gpu-core": "50"}
    snap = SnapshotBuilder("kgpu-scheduler").build(nodes, [odd], {})
    assert free(snap.state, 0) == [0, 0]
    assert [p.reason for p in snap.problems] == ["UnreadableBoundPod"]
    assert "counts node a as full" in snap.problems[0].message


def test_unreadable_pending_pods_are_reported_not_scheduled() -> None:
    bad = pod_obj("bad", fraction="2")
    snap = SnapshotBuilder("kgpu-scheduler").build([node_obj("a")], [bad], {})
    assert snap.pending == []
    [(obj, error)] = snap.unreadable
    assert obj is bad and "gpu-fraction" in str(error)


def test_one_builder_rereads_a_pod_whose_version_changes() -> None:
    """Sessions share one builder, which remembers each version's reading: a changed pod
    (new resourceVersion) is read again, a deleted one is forgotten."""
    builder = SnapshotBuilder("kgpu-scheduler")
    nodes = [node_obj("a", gpus=2)]
    nodes[0]["metadata"]["resourceVersion"] = "1"
    pending = pod_obj("p", fraction="0.5")
    bound = annotated("b", "a", [0])
    for obj, version in ((pending, "10"), (bound, "11")):
        obj["metadata"].update(uid=f"u-{version}", resourceVersion=version)
    snap = builder.build(nodes, [pending, bound], {})
    assert [p.spec.gpu.milli for p in snap.pending] == [500]
    assert free(snap.state, 0) == [0, 1000]
    # The annotation edited (a new version): the next session sees the new request; the
    # bound pod's allocation moved to GPU 1 (a new version too) is read where it is now.
    pending = json.loads(json.dumps(pending))
    pending["metadata"]["annotations"]["gpu-fraction"] = "0.25"
    pending["metadata"]["resourceVersion"] = "12"
    bound = json.loads(json.dumps(bound))
    bound["metadata"]["annotations"].update(render([1], 1000))
    bound["metadata"]["resourceVersion"] = "13"
    snap = builder.build(nodes, [pending, bound], {})
    assert [p.spec.gpu.milli for p in snap.pending] == [250]
    assert free(snap.state, 0) == [1000, 0]
    assert snap.problems == []
    assert len(builder.conversions) == 3  # the node and the two pods
    snap = builder.build(nodes, [bound], {})
    assert snap.pending == [] and len(builder.conversions) == 2


def bound_by_binding(
    pending: dict[str, Any], node: str, notes: dict[str, str], version: str
) -> dict[str, Any]:
    """``pending`` as its Binding leaves it: on ``node``, with ``notes`` added."""
    bound: dict[str, Any] = json.loads(json.dumps(pending))
    bound["spec"]["nodeName"] = node
    bound["metadata"]["annotations"].update(notes)
    bound["metadata"]["resourceVersion"] = version
    return bound


def test_a_pod_bound_by_its_binding_reads_as_a_fresh_read() -> None:
    builder = SnapshotBuilder("kgpu-scheduler")
    nodes = [node_obj("a", gpus=2)]
    pending = pod_obj("p", fraction="0.5", annotations={"team": "vision"})
    pending["metadata"].update(uid="u-p", resourceVersion="10")
    assert [p.spec.gpu.milli for p in builder.build(nodes, [pending], {}).pending] == [500]
    bound = bound_by_binding(pending, "a", render([1], 500), "11")
    snap = builder.build(nodes, [bound], {})
    assert free(snap.state, 0) == [1000, 500]
    assert (snap.from_annotations, snap.problems) == (1, [])
    [running] = snap.bound
    fresh = pod_from_k8s(bound)
    assert running.spec == fresh and running.spec.annotations == fresh.annotations


@pytest.mark.parametrize(
    ("change", "milli"),
    [
        (lambda p: p["metadata"]["annotations"].update({"gpu-fraction": "0.25"}), 250),
        (lambda p: p["spec"].update(priority=7), 500),
        (lambda p: p["metadata"].update(labels={"kgpu.io/queue": "research"}), 500),
    ],
    ids=["gpu-fraction annotation", "priority", "queue label"],
)
def test_a_pod_changed_beside_its_binding_is_read_again(
    change: Callable[[dict[str, Any]], None], milli: int
) -> None:
    builder = SnapshotBuilder("kgpu-scheduler")
    nodes = [node_obj("a", gpus=2)]
    pending = pod_obj("p", fraction="0.5")
    pending["metadata"].update(uid="u-p", resourceVersion="10")
    builder.build(nodes, [pending], {})
    bound = bound_by_binding(pending, "a", render([0], milli), "11")
    change(bound)
    [running] = builder.build(nodes, [bound], {}).bound
    assert running.spec == pod_from_k8s(bound)
    assert running.spec.gpu.milli == milli

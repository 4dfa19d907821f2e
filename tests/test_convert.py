"""Kubernetes Nodes and Pods (plain dicts) into NodeInfo and PodSpec, and the exact messages
of what cannot be converted."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from kgpu.kube.objects.node_pod import ConversionError, node_from_k8s, pod_from_k8s, pod_node_name
from kgpu.model.gpu import NO_GPU
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodSpec
from kgpu.model.taints import Effect, Taint, Toleration
from tests.builders import make_node, make_pod

A100 = "NVIDIA-A100-SXM4-80GB"

Obj = dict[str, Any]
Edit = Callable[[Obj], None]


def k8s_node(name: str = "n", **allocatable: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {}},
        "spec": {},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", **allocatable}},
    }


def gpu_node(name: str = "n") -> Obj:
    node = k8s_node(name, **{"nvidia.com/gpu": "8"})
    node["metadata"]["labels"] = {
        "nvidia.com/gpu.product": A100,
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.memory": "81920",
    }
    return node


def k8s_pod(name: str = "p", **requests: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi", **requests}},
                }
            ]
        },
    }


def edited(base: Obj, *edits: Edit) -> Obj:
    for edit in edits:
        edit(base)
    return base


def labels(**values: Any) -> Edit:
    return lambda obj: obj["metadata"].setdefault("labels", {}).update(values)


def annotate(**values: Any) -> Edit:
    return lambda obj: obj["metadata"].setdefault("annotations", {}).update(values)


def spec(**values: Any) -> Edit:
    return lambda obj: obj["spec"].update(values)


def limits(**values: Any) -> Edit:
    return lambda obj: (
        obj["spec"]["containers"][0]["resources"].setdefault("limits", {}).update(values)
    )


def container(requests: Obj, restart: str | None = None) -> Obj:
    out: Obj = {"name": "c", "resources": {"requests": requests}}
    if restart:
        out["restartPolicy"] = restart
    return out


def gpus(n: Any) -> dict[str, Any]:
    return {"nvidia.com/gpu": n}


# ---------------------------------------------------------------------------- nodes

NODES: list[tuple[str, Obj, NodeInfo]] = [
    (
        "GFD-labelled GPU node",
        gpu_node(),
        make_node("n").cpu(64_000).memory(262_144).gpus(8, A100, 81_920).build(),
    ),
    ("CPU node", k8s_node(), make_node("n").cpu(64_000).memory(262_144).build()),
    (
        "fractional cpu and decimal memory round down",
        k8s_node(cpu="31800m", memory="16G", pods="58"),
        make_node("n").cpu(31_800).memory(15_258).max_pod_count(58).build(),
    ),
    (
        "capacity when allocatable is absent",
        {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": 8, "memory": "32Gi"}}},
        make_node("n").cpu(8000).memory(32_768).build(),
    ),
    (
        "GPU count from GFD when the device plugin says nothing",
        edited(k8s_node(), labels(**{"nvidia.com/gpu.count": "4", "nvidia.com/gpu.product": "T4"})),
        make_node("n").cpu(64_000).memory(262_144).gpus(4, "T4", 0).build(),
    ),
    (
        "the device plugin's count wins over GFD's (an unhealthy GPU is not allocatable)",
        edited(gpu_node(), lambda o: o["status"]["allocatable"].update(gpus("7"))),
        make_node("n").cpu(64_000).memory(262_144).gpus(7, A100, 81_920).build(),
    ),
    (
        "time-sliced GPUs count once",
        edited(
            k8s_node(**gpus("32")),
            labels(**{"nvidia.com/gpu.replicas": "8", "nvidia.com/gpu.product": "T4"}),
        ),
        make_node("n").cpu(64_000).memory(262_144).gpus(4, "T4", 0).replicas(8).build(),
    ),
    (
        "taints and cordon",
        edited(
            k8s_node(),
            spec(
                unschedulable=True,
                taints=[
                    {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
                    {"key": "spot", "effect": "PreferNoSchedule"},
                ],
            ),
        ),
        make_node("n")
        .cpu(64_000)
        .memory(262_144)
        .taint("dedicated", "ml")
        .taint("spot", "", Effect.PREFER_NO_SCHEDULE)
        .cordoned()
        .build(),
    ),
]


@pytest.mark.parametrize(("obj", "expected"), [c[1:] for c in NODES], ids=[c[0] for c in NODES])
def test_node_from_k8s(obj: Obj, expected: NodeInfo) -> None:
    node = node_from_k8s(obj)
    labels = obj["metadata"].get("labels") or {}
    assert node == NodeInfo(**{**_fields(expected), "labels": labels})


def _fields(node: NodeInfo) -> dict[str, Any]:
    return {name: getattr(node, name) for name in NodeInfo.__slots__}


NODE_ERRORS: list[tuple[str, Obj, str]] = [
    (
        "no name",
        {"metadata": {}, "status": {"allocatable": {"cpu": "1", "memory": "1Gi"}}},
        "Node (no name): metadata.name is missing, expected a non-empty string",
    ),
    (
        "no cpu",
        {"metadata": {"name": "n"}, "status": {"allocatable": {"memory": "1Gi"}}},
        "Node n: status.allocatable[cpu] is missing, expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3",
    ),
    (
        "memory in words",
        k8s_node(memory="lots"),
        'Node n: status.allocatable[memory] is "lots", expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3',
    ),
    (
        "half a GPU",
        k8s_node(**gpus("1.5")),
        'Node n: status.allocatable[nvidia.com/gpu] is "1.5", expected a whole number of GPUs',
    ),
    (
        "unquoted label",
        edited(k8s_node(), labels(**{"nvidia.com/gpu.count": 8})),
        "Node n: label nvidia.com/gpu.count is 8, expected a string (quote it in YAML)",
    ),
    (
        "GPU memory with a unit",
        edited(gpu_node(), labels(**{"nvidia.com/gpu.memory": "80GB"})),
        'Node n: label nvidia.com/gpu.memory is "80GB", expected a whole number of MiB',
    ),
    (
        "unknown taint effect",
        edited(k8s_node(), spec(taints=[{"key": "a", "effect": "Never"}])),
        'Node n: spec.taints[0].effect is "Never", expected one of NoSchedule, PreferNoSchedule, NoExecute',
    ),
    (
        "taint without key",
        edited(k8s_node(), spec(taints=[{"effect": "NoSchedule"}])),
        "Node n: spec.taints[0].key is missing, expected a non-empty string",
    ),
    (
        "taints not a list",
        edited(k8s_node(), spec(taints={"key": "a"})),
        'Node n: spec.taints is {"key": "a"}, expected a list',
    ),
    (
        "unschedulable as a word",
        edited(k8s_node(), spec(unschedulable="yes")),
        'Node n: spec.unschedulable is "yes", expected true or false',
    ),
]


@pytest.mark.parametrize(
    ("obj", "message"), [c[1:] for c in NODE_ERRORS], ids=[c[0] for c in NODE_ERRORS]
)
def test_node_errors_name_object_field_value_and_expectation(obj: Obj, message: str) -> None:
    with pytest.raises(ConversionError) as info:
        node_from_k8s(obj)
    assert str(info.value) == message


# ---------------------------------------------------------------------------- pods

PODS: list[tuple[str, Obj, PodSpec]] = [
    ("CPU pod", k8s_pod(), make_pod("p").build()),
    (
        "no namespace means default",
        edited(k8s_pod(), lambda o: o["metadata"].pop("namespace")),
        make_pod("p").build(),
    ),
    ("whole GPUs from limits", edited(k8s_pod(), limits(**gpus(2))), make_pod("p").gpus(2).build()),
    (
        "a limit without a request is the request",
        edited(
            k8s_pod(),
            lambda o: o["spec"]["containers"][0]["resources"].update(
                {"requests": {}, "limits": {"cpu": "2", "memory": "3Gi"}}
            ),
        ),
        make_pod("p").cpu(2000).memory(3072).build(),
    ),
    (
        "containers add up; an init container needs only its own",
        edited(
            k8s_pod(cpu="500m", memory="512Mi"),
            lambda o: o["spec"]["containers"].append(container({"cpu": "250m", "memory": "1.5Gi"})),
            spec(initContainers=[container({"cpu": "3", "memory": "1Mi"})]),
        ),
        make_pod("p").cpu(3000).memory(2048).build(),
    ),
    (
        "a sidecar adds to the containers and to later init containers",
        edited(
            k8s_pod(cpu="1"),
            spec(
                initContainers=[
                    container({"cpu": "500m"}, restart="Always"),
                    container({"cpu": "1"}),
                ],
                overhead={"cpu": "100m", "memory": "64Mi"},
            ),
        ),
        make_pod("p").cpu(1600).memory(1088).build(),
    ),
    (
        "a half GPU",
        edited(k8s_pod(), annotate(**{"gpu-fraction": "0.5"})),
        make_pod("p").share(500).build(),
    ),
    (
        "a third rounds down so three fit",
        edited(k8s_pod(), annotate(**{"gpu-fraction": "0.3333"})),
        make_pod("p").share(333).build(),
    ),
    (
        "a fraction of 1 is one whole GPU",
        edited(k8s_pod(), annotate(**{"gpu-fraction": "1.0"})),
        make_pod("p").gpus(1).build(),
    ),
    (
        "card names in order of preference",
        edited(k8s_pod(), limits(**gpus(1)), annotate(**{"volcano.sh/card.name": "H100|A100"})),
        make_pod("p").gpus(1, "H100", "A100").build(),
    ),
    (
        "a card name on a share",
        edited(
            k8s_pod(),
            annotate(**{"gpu-fraction": "0.25", "volcano.sh/card.name": "T4"}),
        ),
        make_pod("p").share(250, "T4").build(),
    ),
    (
        "product selector stays a selector, sorted",
        edited(
            k8s_pod(),
            limits(**gpus(1)),
            spec(nodeSelector={"zone": "a", "nvidia.com/gpu.product": A100}),
        ),
        make_pod("p")
        .gpus(1)
        .selector("nvidia.com/gpu.product", A100)
        .selector("zone", "a")
        .build(),
    ),
    (
        "tolerations",
        edited(
            k8s_pod(),
            spec(
                tolerations=[
                    {
                        "key": "dedicated",
                        "operator": "Equal",
                        "value": "ml",
                        "effect": "NoSchedule",
                    },
                    {"operator": "Exists"},
                ]
            ),
        ),
        replace(
            make_pod("p").build(),
            tolerations=(
                Toleration("dedicated", "Equal", "ml", "NoSchedule"),
                Toleration("", "Exists", "", ""),
            ),
        ),
    ),
    ("priority", edited(k8s_pod(), spec(priority=1000)), make_pod("p").priority(1000).build()),
]


@pytest.mark.parametrize(("obj", "expected"), [c[1:] for c in PODS], ids=[c[0] for c in PODS])
def test_pod_from_k8s(obj: Obj, expected: PodSpec) -> None:
    assert pod_from_k8s(obj) == expected


@pytest.mark.parametrize(
    ("pod_labels", "queue"),
    [
        ({"kai.scheduler/queue": "team-a"}, "team-a"),
        ({"kgpu.io/queue": "team-b"}, "team-b"),
        ({"kai.scheduler/queue": "team-a", "kgpu.io/queue": "team-b"}, "team-b"),
        ({}, ""),
    ],
)
def test_queue_label(pod_labels: dict[str, str], queue: str) -> None:
    assert pod_from_k8s(edited(k8s_pod(), labels(**pod_labels))).queue == queue


def test_annotations_are_kept() -> None:
    pod = pod_from_k8s(edited(k8s_pod(), annotate(team="ml")))
    assert pod.annotations == {"team": "ml"}
    assert pod.gpu == NO_GPU


def test_converted_toleration_matches_taints() -> None:
    pod = pod_from_k8s(edited(k8s_pod(), spec(tolerations=[{"key": "a", "operator": "Exists"}])))
    assert pod.tolerations[0].tolerates(Taint("a", "x"))
    assert not pod.tolerations[0].tolerates(Taint("b", "x"))


def test_node_name() -> None:
    assert pod_node_name(edited(k8s_pod(), spec(nodeName="n1"))) == "n1"
    assert pod_node_name(k8s_pod()) == ""


FRACTION = "Pod default/p: annotation gpu-fraction is {}, expected a number with 0 < f <= 1"
ANY_QUANTITY = "a quantity such as 500m, 4, 1.5, 8Gi or 1e3"

POD_ERRORS: list[tuple[str, Obj, str]] = [
    (
        "fraction in words",
        edited(k8s_pod(), annotate(**{"gpu-fraction": "abc"})),
        FRACTION.format('"abc"'),
    ),
    (
        "fraction zero",
        edited(k8s_pod(), annotate(**{"gpu-fraction": "0"})),
        FRACTION.format('"0"'),
    ),
    (
        "fraction above one",
        edited(k8s_pod(), annotate(**{"gpu-fraction": "1.5"})),
        FRACTION.format('"1.5"'),
    ),
    (
        "negative fraction",
        edited(k8s_pod(), annotate(**{"gpu-fraction": "-0.5"})),
        FRACTION.format('"-0.5"'),
    ),
    (
        "fraction as a ratio",
        edited(k8s_pod(), annotate(**{"gpu-fraction": "1/2"})),
        FRACTION.format('"1/2"'),
    ),
    (
        "fraction below a milli-GPU",
        edited(k8s_pod(), annotate(**{"gpu-fraction": "0.0004"})),
        'Pod default/p: annotation gpu-fraction is "0.0004", expected at least 0.001, the smallest share kgpu accounts',
    ),
    (
        "unquoted fraction",
        edited(k8s_pod(), annotate(**{"gpu-fraction": 0.5})),
        "Pod default/p: annotation gpu-fraction is 0.5, expected a string (quote it in YAML)",
    ),
    (
        "fraction beside whole GPUs",
        edited(k8s_pod(), limits(**gpus(2)), annotate(**{"gpu-fraction": "0.5"})),
        'Pod default/p: annotation gpu-fraction is "0.5", expected no gpu-fraction on a pod that requests nvidia.com/gpu: 2',
    ),
    (
        "half a GPU as a resource",
        edited(k8s_pod(), limits(**gpus("0.5"))),
        'Pod default/p: spec.containers[0].resources.limits[nvidia.com/gpu] is "0.5", expected a whole number',
    ),
    (
        "cpu in words",
        k8s_pod(cpu="lots"),
        f'Pod default/p: spec.containers[0].resources.requests[cpu] is "lots", expected {ANY_QUANTITY}',
    ),
    (
        "negative memory",
        k8s_pod(memory="-1Gi"),
        'Pod default/p: spec.containers[0].resources.requests[memory] is "-1Gi", expected a quantity of at least 0',
    ),
    (
        "empty card name",
        edited(k8s_pod(), limits(**gpus(1)), annotate(**{"volcano.sh/card.name": "A100||H100"})),
        'Pod default/p: annotation volcano.sh/card.name is "A100||H100", expected GPU product names separated by "|", such as "A100|H100"',
    ),
    (
        "MIG card name",
        edited(
            k8s_pod(),
            limits(**gpus(1)),
            annotate(**{"volcano.sh/card.name": "A100/mig-1g.10gb-mixed"}),
        ),
        'Pod default/p: annotation volcano.sh/card.name is "A100/mig-1g.10gb-mixed", expected GPU product names (whole-GPU cards) for a pod that requests whole or shared GPUs; MIG and MPS cards go with nvidia.com/mig-<profile> and nvidia.com/gpu.shared',
    ),
    (
        "Koordinator gpu-core without memory",
        k8s_pod(**{"koordinator.sh/gpu-core": "50"}),
        "Pod default/p: resource koordinator.sh/gpu-core is 50, expected koordinator.sh/gpu-memory-ratio or koordinator.sh/gpu-memory beside it",
    ),
    (
        "priority as a word",
        edited(k8s_pod(), spec(priority="high")),
        'Pod default/p: spec.priority is "high", expected an integer',
    ),
    (
        "unknown toleration operator",
        edited(k8s_pod(), spec(tolerations=[{"key": "a", "operator": "In"}])),
        'Pod default/p: spec.tolerations[0].operator is "In", expected Equal or Exists',
    ),
    (
        "Exists with a value",
        edited(k8s_pod(), spec(tolerations=[{"key": "a", "operator": "Exists", "value": "x"}])),
        'Pod default/p: spec.tolerations[0].value is "x", expected no value with operator Exists',
    ),
    (
        "toleration effect",
        edited(k8s_pod(), spec(tolerations=[{"key": "a", "effect": "Always"}])),
        'Pod default/p: spec.tolerations[0].effect is "Always", expected empty or one of NoSchedule, PreferNoSchedule, NoExecute',
    ),
    (
        "containers not a list",
        edited(k8s_pod(), spec(containers={"name": "main"})),
        'Pod default/p: spec.containers is {"name": "main"}, expected a list',
    ),
    (
        "selector value unquoted",
        edited(k8s_pod(), spec(nodeSelector={"gpu": True})),
        "Pod default/p: spec.nodeSelector gpu is true, expected a string (quote it in YAML)",
    ),
    (
        "no name",
        {"metadata": {"namespace": "lab"}, "spec": {}},
        "Pod lab/(no name): metadata.name is missing, expected a non-empty string",
    ),
]


@pytest.mark.parametrize(
    ("obj", "message"), [c[1:] for c in POD_ERRORS], ids=[c[0] for c in POD_ERRORS]
)
def test_pod_errors_name_object_field_value_and_expectation(obj: Obj, message: str) -> None:
    with pytest.raises(ConversionError) as info:
        pod_from_k8s(obj)
    assert str(info.value) == message


def test_error_carries_its_parts() -> None:
    with pytest.raises(ConversionError) as info:
        pod_from_k8s(edited(k8s_pod(), annotate(**{"gpu-fraction": "abc"})))
    err = info.value
    assert (err.obj, err.field, err.value) == ("Pod default/p", "annotation gpu-fraction", "abc")

"""Pods that ask alike read once: a copy under the pod's own key is what a fresh read gives."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from kgpu.kube.objects.device_allocation import ALLOCATION_ANNOTATION, parse, render
from kgpu.kube.objects.node_pod import ConversionError, pod_from_k8s
from kgpu.kube.snapshot.alike_pods import KEPT, TEXT_MAX, AlikePods, request_text
from kgpu.model.pod import PodSpec
from tests.kube_objects import pod_obj

Pod = dict[str, Any]


def _labelled(p: Pod) -> None:
    p["metadata"]["labels"] = {"kgpu.io/queue": "research", "app": "train"}


def _tolerating(p: Pod) -> None:
    p["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    p["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "A100", "zone": "a"}


def _with_sidecar(p: Pod) -> None:
    p["spec"]["initContainers"] = [
        {"name": "log", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
        {"name": "setup", "resources": {"requests": {"cpu": "3", "memory": "8Gi"}}},
    ]
    p["spec"]["overhead"] = {"cpu": "100m"}


def _koordinator(p: Pod) -> None:
    p["spec"]["containers"][0]["resources"]["limits"] = {
        "koordinator.sh/gpu-core": "50",
        "koordinator.sh/gpu-memory-ratio": "50",
    }


KINDS: dict[str, Callable[[], Pod]] = {
    "cpu-only": lambda: pod_obj("p", cpu="2"),
    "whole-gpus": lambda: pod_obj("p", "team", gpus=2, priority=100),
    "share": lambda: pod_obj("p", fraction="0.5"),
    "labels-and-queue": lambda: _changed(pod_obj("p", gpus=1), _labelled),
    "tolerations-and-selector": lambda: _changed(pod_obj("p", gpus=1), _tolerating),
    "init-containers-and-overhead": lambda: _changed(pod_obj("p"), _with_sidecar),
    "koordinator-dialect": lambda: _changed(pod_obj("p"), _koordinator),
    "no-namespace": lambda: _changed(pod_obj("p"), lambda p: p["metadata"].pop("namespace")),
}


def _changed(p: Pod, change: Callable[[Pod], None]) -> Pod:
    change(p)
    return p


def _named(p: Pod, name: str) -> Pod:
    out = copy.deepcopy(p)
    out["metadata"]["name"] = name
    return out


def _same(a: PodSpec, b: PodSpec) -> None:
    assert a == b
    assert a.key == b.key
    assert a.annotations == b.annotations


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_pod_alike_reads_as_a_fresh_read_under_its_own_name(kind: str) -> None:
    first = KINDS[kind]()
    alike = AlikePods()
    _same(alike.read(first), pod_from_k8s(first))
    second = _named(first, "q")
    read = alike.read(second)
    _same(read, pod_from_k8s(second))
    assert read.key.endswith("/q")
    assert read.annotations is not alike.read(first).annotations  # each pod its own dict


@pytest.mark.parametrize(
    "change",
    [
        lambda p: p["metadata"].__setitem__("namespace", "other"),
        lambda p: p["metadata"]["annotations"].__setitem__("gpu-fraction", "0.25"),
        lambda p: p["metadata"].__setitem__("labels", {"kgpu.io/queue": "b"}),
        lambda p: p["spec"].__setitem__("priority", 7),
        lambda p: p["spec"]["containers"][0]["resources"]["requests"].__setitem__("cpu", "3"),
        lambda p: p["spec"]["containers"].append(copy.deepcopy(p["spec"]["containers"][0])),
        _tolerating,
        _with_sidecar,
    ],
    ids=[
        "namespace",
        "annotation",
        "label",
        "priority",
        "request",
        "second-container",
        "toleration",
        "init-container",
    ],
)
def test_a_pod_that_differs_in_what_is_read_is_read_afresh(change: Callable[[Pod], None]) -> None:
    first = pod_obj("p", fraction="0.5")
    alike = AlikePods()
    alike.read(first)
    other = _changed(_named(first, "q"), change)
    _same(alike.read(other), pod_from_k8s(other))
    assert len(alike) == 2


def _message(read: Callable[[Pod], object], pod: Pod) -> str:
    with pytest.raises(ConversionError) as caught:
        read(pod)
    return str(caught.value)


@pytest.mark.parametrize("name", ["", 5, None])
def test_a_bad_name_is_refused_as_a_fresh_read_refuses_it(name: object) -> None:
    good = pod_obj("p", gpus=1)
    alike = AlikePods()
    alike.read(good)
    bad = _named(good, "x")
    bad["metadata"]["name"] = name
    assert _message(alike.read, bad) == _message(pod_from_k8s, bad)


def test_a_bad_pod_is_refused_each_time_under_its_own_name() -> None:
    bad = pod_obj("p")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    alike = AlikePods()
    for name in ("p", "q"):
        pod = _named(bad, name)
        message = _message(alike.read, pod)
        assert message == _message(pod_from_k8s, pod)
        assert f"/{name}" in message
    assert len(alike) == 0


def test_objects_not_as_json_decodes_them_and_long_ones_are_read_in_full() -> None:
    class Wrapped(dict[str, Any]):
        pass

    class Opaque:
        def __repr__(self) -> str:
            return "'1'"

    pod = pod_obj("p", gpus=1)
    assert request_text(pod) is not None
    assert request_text({**pod, "metadata": Wrapped(pod["metadata"])}) is None
    assert request_text({**pod, "spec": Wrapped(pod["spec"])}) is None
    odd = _changed(_named(pod, "q"), lambda p: p["metadata"].__setitem__("labels", {1: "a"}))
    assert request_text(odd) is None
    odd = _changed(_named(pod, "q"), lambda p: p["spec"].__setitem__("priority", Opaque()))
    assert request_text(odd) is None
    long = _changed(pod_obj("p"), lambda p: p["metadata"]["annotations"].update(n="x" * TEXT_MAX))
    assert request_text(long) is None
    alike = AlikePods()
    _same(alike.read(long), pod_from_k8s(long))
    assert len(alike) == 0


def test_what_is_kept_stays_bounded() -> None:
    alike = AlikePods()
    for i in range(KEPT + 10):
        pod = pod_obj(f"p{i}", cpu=str(i + 1))
        _same(alike.read(pod), pod_from_k8s(pod))
    assert len(alike) <= KEPT


def test_an_allocation_written_alike_parses_once_and_a_bad_one_names_each_pod() -> None:
    text = render([1, 3], 1000)[ALLOCATION_ANNOTATION]
    alike = AlikePods()
    first = alike.allocation(pod_obj("p"), text)
    assert first == parse("Pod default/p", text)
    assert alike.allocation(pod_obj("q"), text) is first
    for name in ("p", "q"):
        with pytest.raises(ConversionError, match=f"Pod default/{name}"):
            alike.allocation(pod_obj(name), '{"gpu": 3}')

"""The mutating webhook: the containers' GPU environment after the API server applies its
JSONPatch, for every kind of pod, and its answers to input no API server sends."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from kgpu.kube.admission.pod_env import mutate
from kgpu.kube.objects.gpu_env import ENV_CONFIGMAP_ANNOTATION, env_configmap
from tests.test_webhook import SCHEDULER, pod, review

Obj = dict[str, Any]
CONFIGMAP = "kgpu-gpu-env-00c0ffee00aa"
CONFIGMAP_ENV = [
    {
        "name": "NVIDIA_VISIBLE_DEVICES",
        "valueFrom": {"configMapKeyRef": {"name": CONFIGMAP, "key": "NVIDIA_VISIBLE_DEVICES"}},
    },
    {
        "name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        "valueFrom": {
            "configMapKeyRef": {
                "name": CONFIGMAP,
                "key": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                "optional": True,
            }
        },
    },
    {
        "name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
        "valueFrom": {
            "configMapKeyRef": {
                "name": CONFIGMAP,
                "key": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                "optional": True,
            }
        },
    },
]
USER_ENV = [
    {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
    {"name": "HOME", "value": "/root"},
    {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "100"},
]


def token(n: int) -> str:
    assert n == 6
    return "00c0ffee00aa"


def apply(obj: Obj, patch: list[Obj]) -> Obj:
    """RFC 6902 ``add`` (the only operation the webhook sends) on a copy of ``obj``."""
    out = copy.deepcopy(obj)
    for op in patch:
        assert op["op"] == "add", op
        *parents, last = (
            t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]
        )
        target: Any = out
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            target.insert(len(target) if last == "-" else int(last), op["value"])
        else:
            target[last] = op["value"]
    return out


def mutated(obj: Obj) -> Obj:
    response = mutate(review(obj), SCHEDULER, token)["response"]
    assert response["allowed"], response
    if "patch" not in response:
        return obj
    assert response["patchType"] == "JSONPatch"
    return apply(obj, json.loads(base64.b64decode(response["patch"])))


def envs(obj: Obj, group: str = "containers") -> list[list[Obj]]:
    return [c.get("env") for c in obj["spec"][group]]


def with_env(obj: Obj, env: list[Obj], init: bool = False) -> Obj:
    obj["spec"]["containers"][0]["env"] = copy.deepcopy(env)
    if init:
        obj["spec"]["initContainers"] = [
            {"name": "init", "image": "busybox", "env": copy.deepcopy(env)},
            {"name": "bare", "image": "busybox"},
        ]
    return obj


HOME = [{"name": "HOME", "value": "/root"}]


@pytest.mark.parametrize(
    "annotations, requests",
    [
        ({"gpu-fraction": "0.5"}, {}),
        ({"gpu-memory": "4096"}, {}),
        ({}, {"kubernetes.io/gpu-core": "30", "kubernetes.io/gpu-memory-ratio": "30"}),
        ({}, {"kubernetes.io/gpu": "50"}),
    ],
)
def test_a_share_reads_its_gpu_from_a_fresh_configmap_in_every_container(
    annotations: dict[str, str], requests: dict[str, str]
) -> None:
    obj = with_env(pod(annotations={**annotations, ENV_CONFIGMAP_ANNOTATION: "mine"}, **requests),
                   USER_ENV, init=True)  # fmt: skip
    out = mutated(obj)
    assert env_configmap(out) == CONFIGMAP
    assert out["metadata"]["annotations"] == {**annotations, ENV_CONFIGMAP_ANNOTATION: CONFIGMAP}
    assert envs(out) == [HOME + CONFIGMAP_ENV]
    assert envs(out, "initContainers") == [HOME + CONFIGMAP_ENV, CONFIGMAP_ENV]


@pytest.mark.parametrize("annotations", [None, "absent"])
def test_a_share_without_annotations_gets_them(annotations: str | None) -> None:
    obj = pod("p", None, **{"kubernetes.io/gpu": "50"})
    obj["metadata"]["annotations"] = annotations
    if annotations == "absent":
        del obj["metadata"]["annotations"]
    assert mutated(obj)["metadata"]["annotations"] == {ENV_CONFIGMAP_ANNOTATION: CONFIGMAP}


@pytest.mark.parametrize(
    "requests",
    [{"nvidia.com/gpu": "2"}, {"nvidia.com/gpu.shared": "1"}, {"nvidia.com/mig-1g.5gb": "1"}],
)
def test_a_device_plugin_pod_loses_its_own_values_and_gets_the_plugins(
    requests: dict[str, str],
) -> None:
    obj = with_env(pod("p", None, **requests), USER_ENV, init=True)
    out = mutated(obj)
    assert env_configmap(out) is None
    assert envs(out) == [HOME]
    # A container that set nothing is left alone.
    assert envs(out, "initContainers") == [HOME, None]


def test_a_pod_without_gpus_sees_none_even_when_it_asks_for_all() -> None:
    void = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    out = mutated(with_env(pod(), USER_ENV, init=True))
    assert env_configmap(out) is None
    assert envs(out) == [HOME + void]
    assert envs(out, "initContainers") == [HOME + void, void]


def test_pods_of_other_schedulers_and_other_operations_are_left_alone() -> None:
    other = with_env(pod(annotations={"gpu-fraction": "0.5"}), USER_ENV)
    other["spec"]["schedulerName"] = "default-scheduler"
    response = mutate(review(other), SCHEDULER, token)["response"]
    assert response == {"uid": review(other)["request"]["uid"], "allowed": True}
    mine = with_env(pod(annotations={"gpu-fraction": "0.5"}), USER_ENV)
    response = mutate(review(mine, "UPDATE", mine), SCHEDULER, token)["response"]
    assert "patch" not in response and response["allowed"]


def test_a_generated_name_is_enough() -> None:
    obj = pod(annotations={"gpu-fraction": "0.5"})
    obj["metadata"] = {"generateName": "job-", "annotations": {"gpu-fraction": "0.5"}}
    assert env_configmap(mutated(obj)) == CONFIGMAP


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda o: o["spec"]["containers"][0].update(env={"A": "1"}),
            'Pod default/p: spec.containers[0].env is {"A": "1"}, expected a list',
        ),
        (
            lambda o: o["spec"]["containers"][0].update(env=["A=1"]),
            'Pod default/p: spec.containers[0].env[0] is "A=1", expected a mapping',
        ),
        (
            lambda o: o["metadata"]["annotations"].update({"gpu-fraction": "half"}),
            "Pod default/p: annotation gpu-fraction",
        ),
        (lambda o: o["spec"].update(containers="x"), "Pod default/p: spec.containers"),
    ],
)
def test_what_no_api_server_sends_is_denied_with_what_was_expected(
    change: Any, message: str
) -> None:
    obj = pod(annotations={"gpu-fraction": "0.5"})
    change(obj)
    response = mutate(review(obj), SCHEDULER, token)["response"]
    assert not response["allowed"]
    assert response["status"]["message"].startswith(message), response
    assert "patch" not in response


def test_a_pod_without_metadata_is_denied() -> None:
    request = review(pod(annotations={"gpu-fraction": "0.5"}))
    request["request"]["object"]["metadata"] = None
    response = mutate(request, SCHEDULER, token)["response"]
    assert response["status"]["message"] == "Pod default/p: metadata is null, expected an object"


def test_many_containers_give_one_operation_each() -> None:
    obj = pod(annotations={"gpu-fraction": "0.5"})
    obj["spec"]["containers"] *= 2000
    response = mutate(review(obj), SCHEDULER, token)["response"]
    patch = json.loads(base64.b64decode(response["patch"]))
    assert len(patch) == 2001
    assert all(env == CONFIGMAP_ENV for env in envs(apply(obj, patch)))

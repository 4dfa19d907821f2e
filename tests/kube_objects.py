"""Kubernetes objects for the edge's tests, as the API server holds them (plain dicts)."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kgpu.kube.live.record_key import DATA_KEY, default_secret, split
from kgpu.kube.objects.record_signature import RecordKey

if TYPE_CHECKING:
    from kgpu.kube.api.client import Answer, KubeClient
    from tests.kube_double import KubeDouble

SCHEDULER = "kgpu-scheduler"
# The key kgpu run finds in the double when a test signed a record before any started.
TEST_KEY = RecordKey(bytes(range(32)))


def signed(double: KubeDouble, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (a bound pod) with its records signed as kgpu would have signed them as it
    bound it: a pod kgpu placed before a restart. The double is given the key's Secret."""
    namespace, name = split(default_secret(SCHEDULER))
    secret = double.get("secrets", name, namespace)
    if secret is None:  # a scheduler started before made its own
        data = {DATA_KEY: base64.b64encode(TEST_KEY.secret).decode()}
        meta = {"name": name, "namespace": namespace}
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": data}
        double.put(secret)
    key = RecordKey(base64.b64decode(secret["data"][DATA_KEY]))
    m = obj["metadata"]
    m.setdefault("uid", str(uuid.uuid4()))
    notes = m.setdefault("annotations", {})
    notes.update(key.signed(m["uid"], obj["spec"]["nodeName"], notes))
    return obj


def node_obj(
    name: str,
    gpus: int = 8,
    product: str = "A100",
    memory_mib: int = 81920,
    cpu: str = "64",
    labels: dict[str, str] | None = None,
    ready: bool = True,
) -> dict[str, Any]:
    """A GPU node as GPU Feature Discovery and the device plugin describe it."""
    allocatable = {"cpu": cpu, "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.memory": str(memory_mib),
                **(labels or {}),
            },
        },
        "status": {
            "capacity": allocatable,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod_obj(
    name: str,
    namespace: str = "default",
    *,
    gpus: int = 0,
    fraction: str = "",
    cpu: str = "1",
    scheduler: str = SCHEDULER,
    node: str = "",
    annotations: dict[str, str] | None = None,
    priority: int | None = None,
) -> dict[str, Any]:
    """A pod asking for ``gpus`` whole GPUs (``nvidia.com/gpu``) or a ``fraction`` of one."""
    notes = dict(annotations or {})
    if fraction:
        notes["gpu-fraction"] = fraction
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    if gpus:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "example/train:1", "resources": resources}],
    }
    if node:
        spec["nodeName"] = node
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": notes},
        "spec": spec,
    }


def allocation_of(pod: dict[str, Any]) -> tuple[str, list[int], int]:
    """(node, GPU minors, milli per GPU) as the pod's kgpu.io/device-allocation records."""
    text = pod["metadata"].get("annotations", {}).get("kgpu.io/device-allocation")
    if text is None:
        return pod["spec"].get("nodeName", ""), [], 0
    gpus = json.loads(text)["gpu"]
    milli = max(
        (
            g["resources"].get("kgpu.io/gpu-milli", 10 * g["resources"]["kubernetes.io/gpu-core"])
            for g in gpus
        ),
        default=0,
    )
    return pod["spec"].get("nodeName", ""), [g["minor"] for g in gpus], milli


def gpu_use(pods: list[dict[str, Any]]) -> dict[tuple[str, int], int]:
    """Milli held on each (node, minor) by the bound pods' annotations."""
    use: dict[tuple[str, int], int] = {}
    for pod in pods:
        node, minors, milli = allocation_of(pod)
        if node:
            for minor in minors:
                use[(node, minor)] = use.get((node, minor), 0) + milli
    return use


def bind(client: KubeClient, namespace: str, name: str, node: str, **options: Any) -> None:
    """``client.bind_async``, waited for: raises the :class:`KubeError` the Binding met."""
    answers: list[Answer] = []
    client.bind_async(namespace, name, node, answers.append, **options)
    wait_until(lambda: bool(answers))
    if isinstance(answers[0], Exception):
        raise answers[0]


def learn_preconditions(
    client: KubeClient, namespace: str, name: str, uid: str, resource_version: str
) -> bool:
    """``client.learn_binding_preconditions``, waited for."""
    learned: list[bool] = []
    client.learn_binding_preconditions(namespace, name, uid, resource_version, learned.append)
    wait_until(lambda: bool(learned))
    return learned[0]


def wait_until(check: Callable[[], bool], timeout: float = 30.0, every: float = 0.05) -> None:
    # A bound on waiting, not a timing claim: generous, as CI's 2 cores run a kube-apiserver,
    # a kubelet and the suite at once (10 s was seen to run out under that load).
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout}s: {check}")
        time.sleep(every)

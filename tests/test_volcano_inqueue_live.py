"""`kgpu run` against the API double as Volcano's job controller sees it: a Volcano Job's
PodGroup, created before its pods, is written Inqueue by kgpu; one past its queue's quota
stays Pending with a Warning; the pods created once Inqueue are placed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import Timeouts
from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, pod_obj, wait_until
from tests.schedulers import fast_options, schedulers

Start = Callable[..., RunningScheduler]
V1BETA1 = "scheduling.volcano.sh/v1beta1"


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    with KubeDouble(crds=True) as d:
        yield d


@pytest.fixture
def start(double: KubeDouble, tmp_path: Path) -> Iterator[Start]:
    defaults: dict[str, Any] = {
        "metrics_port": 0,
        "metrics_host": "127.0.0.1",
        "leader_elect": False,
        "timeouts": Timeouts(connect=1.0, request=2.0, watch=30, watch_grace=2.0),
        "loop": LoopConfig(unschedulable_retry=0.5, idle_wait=0.05, event_repeat=0.0),
    }
    with schedulers() as run:
        yield lambda: run(fast_options(double, tmp_path, "s1", **defaults))


def _group(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": V1BETA1,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": gpus, "queue": "team-a", "minResources": {"nvidia.com/gpu": gpus}},
    }


def _phase(double: KubeDouble, name: str) -> str:
    obj = double.get("podgroups", name, "default", group="scheduling.volcano.sh") or {}
    return str((obj.get("status") or {}).get("phase") or "")


def test_kgpu_run_writes_a_podless_volcano_podgroup_inqueue(
    double: KubeDouble, start: Start
) -> None:
    double.put(node_obj("n1", gpus=8))
    double.put({"apiVersion": V1BETA1, "kind": "Queue", "metadata": {"name": "team-a"},
                "spec": {"capability": {"nvidia.com/gpu": 5}}})  # fmt: skip
    double.put(_group("first", 4))
    double.put(_group("second", 2))
    start()
    wait_until(lambda: _phase(double, "first") == "Inqueue", timeout=30.0)
    refused = ("second", "Warning", "InsufficientScalarQuota",
               "queue team-a: gpu requested 2, allocated 4, quota 5")  # fmt: skip
    wait_until(lambda: refused in _group_events(double), timeout=30.0)
    assert _phase(double, "second") == "Pending"
    assert double.bound() == {}
    # Only now, as Volcano's job controller does, the first Job's pods are created.
    for i in range(4):
        pod = pod_obj(f"first-w{i}", gpus=1)
        pod["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "first"}
        double.put(pod)
    wait_until(lambda: len(double.bound()) == 4, timeout=30.0)
    wait_until(lambda: _phase(double, "first") == "Running", timeout=30.0)
    assert _phase(double, "second") == "Pending"


def _group_events(double: KubeDouble) -> list[tuple[str, str, str, str]]:
    return [
        (e["involvedObject"]["name"], e["type"], e["reason"], e["message"])
        for e in double.objects("events")
        if e["involvedObject"]["kind"] == "PodGroup"
    ]

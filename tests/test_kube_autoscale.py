"""The live autoscaler over real HTTP against the API double, the test playing Karpenter:
a NodeClaim appears and turns Ready, a Node registers, the default scheduler binds the
trigger pod. The trigger pod is created once, deleted once its node is Ready, and kgpu's
own scheduler binds the original pods to the new node."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.autoscale.planner import PlannerConfig
from kgpu.autoscale.trigger_controller import ControllerConfig
from kgpu.kube.anchors.karpenter import NODECLAIMS
from kgpu.kube.api.client import Timeouts
from kgpu.kube.api.informer import Informer
from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler, RunOptions
from kgpu.kube.scaling.live_autoscaler import (
    AutoscaleMetrics,
    AutoscaleOptions,
    Autoscaler,
    AutoscaleRunner,
)
from kgpu.kube.scaling.trigger_pods import TriggerPodConfig
from kgpu.model.nodepool import CATALOGUE, NodePool
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, pod_obj, wait_until

POOL = NodePool("gpu", (CATALOGUE["p4de.24xlarge"],))
NAMESPACE = "kgpu-system"


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    with KubeDouble() as d:  # serves Karpenter's NodeClaims as well
        yield d


@pytest.fixture
def live(double: KubeDouble, tmp_path: Path) -> Iterator[tuple[RunningScheduler, Autoscaler]]:
    options = RunOptions(
        kubeconfig=double.kubeconfig(tmp_path),
        metrics_port=None,
        leader_elect=False,
        timeouts=Timeouts(connect=1.0, request=2.0, watch=30, watch_grace=2.0),
        loop=LoopConfig(unschedulable_retry=0.3, idle_wait=0.05),
    )
    scheduler = RunningScheduler(options).start()
    claims = Informer(scheduler.client, NODECLAIMS, optional=True).start()
    autoscaler = Autoscaler(
        scheduler.client,
        AutoscaleOptions(
            controller=ControllerConfig(
                planner=PlannerConfig(pools=(POOL,)),
                batch_idle_s=0.2,
                timeout_s=60,
                backoff_initial_s=0.5,
            ),
            pods=TriggerPodConfig(namespace=NAMESPACE),
            pending_after_s=0.3,
            interval_s=0.05,
        ),
        emit=scheduler.recorder.emit,
        metrics=AutoscaleMetrics(),
    )
    runner = AutoscaleRunner(
        autoscaler,
        scheduler.pods.items,
        claims.items,
        scheduler.nodes.items,
        assumed=lambda: scheduler.loop.assumed().keys(),
        ready=lambda: scheduler.synced() and claims.synced.is_set(),
    ).start()
    yield scheduler, autoscaler
    runner.stop()
    claims.stop()
    scheduler.stop()


def triggers(double: KubeDouble) -> list[dict[str, Any]]:
    return [p for p in double.objects("pods") if p["metadata"].get("namespace") == NAMESPACE]


def trigger_posts(double: KubeDouble) -> int:
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    return sum(r.method == "POST" and r.path == path and r.status == 201 for r in double.requests)


def nodeclaim(name: str, node: str, *ready: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "labels": {
                "karpenter.sh/nodepool": "gpu",
                "node.kubernetes.io/instance-type": "p4de.24xlarge",
            },
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"}
        },
        "status": {
            "nodeName": node if "Registered" in ready else "",
            "conditions": [{"type": c, "status": "True"} for c in ready],
        },
    }


def test_a_trigger_is_created_once_deleted_after_ready_and_the_pods_bind_to_the_new_node(
    double: KubeDouble, live: tuple[RunningScheduler, Autoscaler]
) -> None:
    _, autoscaler = live
    double.put(node_obj("old", gpus=1, product="NVIDIA-A100-SXM4-80GB"))
    double.put(pod_obj("resident", gpus=1, node="old", scheduler="default-scheduler"))
    for name, kwargs in [("half-a", {"fraction": "0.5"}), ("half-b", {"fraction": "0.5"}),
                         ("pair", {"gpus": 2})]:  # fmt: skip
        double.put(pod_obj(name, **kwargs))  # type: ignore[arg-type]
    wait_until(lambda: len(triggers(double)) == 1)
    [trigger] = triggers(double)
    requests = trigger["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"nvidia.com/gpu": "3", "cpu": "3", "memory": "3072Mi"}
    assert trigger["spec"]["nodeSelector"] == {"karpenter.sh/nodepool": "gpu"}
    assert trigger["spec"]["priorityClassName"] == "kgpu-autoscale-trigger"

    # Karpenter: a NodeClaim, launched; the trigger waits, and no second one is made.
    double.put(nodeclaim("gpu-x1", "gpu-node-1", "Launched"))
    wait_until(
        lambda: autoscaler.last is not None and "Launched" in autoscaler.last.phases.values()
    )
    assert trigger_posts(double) == 1 and len(triggers(double)) == 1
    assert not [r for r in double.requests if r.method == "DELETE"]  # not before Ready

    # The node registers and turns Ready; the default scheduler binds the trigger there.
    double.put(nodeclaim("gpu-x1", "gpu-node-1", "Launched", "Registered", "Initialized", "Ready"))
    node = node_obj("gpu-node-1", gpus=8, product="NVIDIA-A100-SXM4-80GB")
    node["metadata"]["labels"]["karpenter.sh/nodepool"] = "gpu"
    double.put(node)
    bound_trigger = copy.deepcopy(double.get("pods", trigger["metadata"]["name"], NAMESPACE))
    assert bound_trigger is not None
    bound_trigger["spec"]["nodeName"] = "gpu-node-1"
    double.put(bound_trigger)

    wait_until(lambda: triggers(double) == [])
    pods = {p["metadata"]["name"]: p for p in double.objects("pods")}
    wait_until(
        lambda: all(
            (double.get("pods", n, "default") or {}).get("spec", {}).get("nodeName") == "gpu-node-1"
            for n in ("half-a", "half-b", "pair")
        )
    )
    assert "resident" in pods and trigger_posts(double) == 1

    def reasons() -> list[tuple[str, str]]:
        return sorted(
            (e["involvedObject"]["name"], e["reason"])
            for e in double.objects("events")
            if e["reason"].endswith("ScaleUp")
        )

    wait_until(lambda: len(reasons()) == 3)
    assert reasons() == [
        ("half-a", "TriggeredScaleUp"),
        ("half-b", "TriggeredScaleUp"),
        ("pair", "TriggeredScaleUp"),
    ]
    metrics = autoscaler.metrics.registry
    # The round that emits the events records its metrics just after them.
    wait_until(
        lambda: (
            metrics.get_sample_value("kgpu_autoscale_scale_ups_total", {"outcome": "succeeded"})
            == 1
        )
    )
    assert (
        metrics.get_sample_value("kgpu_autoscale_trigger_pods_created_total", {"pool": "gpu"}) == 1
    )
    assert metrics.get_sample_value("kgpu_autoscale_scale_ups_total", {"outcome": "succeeded"}) == 1
    assert metrics.get_sample_value("kgpu_autoscale_trigger_pods_active") == 0
    assert metrics.get_sample_value("kgpu_autoscale_scale_up_success_ratio") == 1.0
    assert (
        metrics.get_sample_value(
            "kgpu_autoscale_provisioning_duration_seconds_count", {"pool": "gpu"}
        )
        == 1
    )


def test_a_nodeclaim_that_fails_to_launch_is_recorded_and_the_demand_retried(
    double: KubeDouble, live: tuple[RunningScheduler, Autoscaler]
) -> None:
    _, autoscaler = live
    double.put(pod_obj("pair", gpus=2))
    wait_until(lambda: len(triggers(double)) == 1)
    first = triggers(double)[0]["metadata"]["name"]
    failed = nodeclaim("gpu-x1", "")
    failed["status"]["conditions"] = [
        {
            "type": "Launched",
            "status": "False",
            "reason": "InsufficientCapacity",
            "message": "no p4de",
        }
    ]
    double.put(failed)
    wait_until(lambda: [t["metadata"]["name"] for t in triggers(double)] == [f"{first}-r1"])
    assert trigger_posts(double) == 2

    def warnings() -> list[str]:
        return [e["message"] for e in double.objects("events") if e["reason"] == "FailedScaleUp"]

    wait_until(lambda: bool(warnings()))
    assert warnings() == [
        f"scale-up by trigger pod {first} failed: NodeClaim gpu-x1: Launched=False: "
        "InsufficientCapacity: no p4de; retrying in 0.5s"
    ]
    metrics = autoscaler.metrics.registry
    assert metrics.get_sample_value("kgpu_autoscale_scale_ups_total", {"outcome": "failed"}) == 1
    assert metrics.get_sample_value("kgpu_autoscale_scale_up_success_ratio") == 0.0


def test_kgpu_run_with_autoscale_triggers_a_node_and_binds_the_pod_there(
    double: KubeDouble, tmp_path: Path
) -> None:
    """`kgpu run --autoscale`'s wiring (RunOptions.autoscale), the test playing Karpenter."""
    scaling = AutoscaleOptions(
        controller=ControllerConfig(
            planner=PlannerConfig(pools=(POOL,)), batch_idle_s=0.2, timeout_s=60
        ),
        pods=TriggerPodConfig(namespace=NAMESPACE),
        scheduler_name="ignored: the loop's name is used",
        pending_after_s=0.3,
        interval_s=0.05,
    )
    options = RunOptions(
        kubeconfig=double.kubeconfig(tmp_path),
        metrics_port=None,
        leader_elect=False,
        timeouts=Timeouts(connect=1.0, request=2.0, watch=30, watch_grace=2.0),
        loop=LoopConfig(unschedulable_retry=0.3, idle_wait=0.05),
        autoscale=scaling,
    )
    scheduler = RunningScheduler(options).start()
    try:
        double.put(pod_obj("pair", gpus=2))  # no node has a GPU
        wait_until(lambda: len(triggers(double)) == 1)
        [trigger] = triggers(double)
        assert trigger["spec"]["nodeSelector"] == {"karpenter.sh/nodepool": "gpu"}
        priority = double.get("priorityclasses", "kgpu-autoscale-trigger")
        assert priority is not None and priority["preemptionPolicy"] == "Never"

        double.put(nodeclaim("gpu-x1", "gpu-node-1", "Launched"))
        time.sleep(0.5)  # a few rounds: still one trigger, none deleted
        assert trigger_posts(double) == 1 and len(triggers(double)) == 1
        assert not [r for r in double.requests if r.method == "DELETE"]

        double.put(
            nodeclaim("gpu-x1", "gpu-node-1", "Launched", "Registered", "Initialized", "Ready")
        )
        node = node_obj("gpu-node-1", gpus=8, product="NVIDIA-A100-SXM4-80GB")
        node["metadata"]["labels"]["karpenter.sh/nodepool"] = "gpu"
        double.put(node)
        bound = copy.deepcopy(double.get("pods", trigger["metadata"]["name"], NAMESPACE))
        assert bound is not None
        bound["spec"]["nodeName"] = "gpu-node-1"
        double.put(bound)

        wait_until(lambda: triggers(double) == [])
        wait_until(
            lambda: (
                (double.get("pods", "pair", "default") or {}).get("spec", {}).get("nodeName")
                == "gpu-node-1"
            )
        )
        assert trigger_posts(double) == 1
        # The round that deleted the trigger records its outcome just after the delete.
        registry = scheduler.metrics.registry  # the autoscaler's metrics are on /metrics
        wait_until(
            lambda: (
                registry.get_sample_value(
                    "kgpu_autoscale_scale_ups_total", {"outcome": "succeeded"}
                )
                == 1
            )
        )
    finally:
        scheduler.stop()

"""``kgpu run``'s sessions with Dynamic Resource Allocation, over real HTTP against the API
double: a session holds the claims of the pods it places, a queue counts the DRA GPUs its
running pods hold, the autoscaler turns DRA GPU demand into trigger pods, and ``kgpu
explain`` against the cluster names the selector that failed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from kgpu.autoscale.planner import PlannerConfig
from kgpu.autoscale.trigger_controller import ControllerConfig
from kgpu.kube.api.client import Timeouts
from kgpu.kube.explain.explanation import explain_live
from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler, RunOptions
from kgpu.kube.scaling.live_autoscaler import AutoscaleOptions
from kgpu.kube.scaling.trigger_pods import TriggerPodConfig
from kgpu.model.nodepool import CATALOGUE, NodePool
from tests.dra_fixtures import claim, exactly, gpu, one_gpu_claim, slice_
from tests.kube_double import KubeDouble
from tests.kube_objects import SCHEDULER, node_obj, wait_until
from tests.test_kube_autoscale import nodeclaim
from tests.test_kube_dra_live import (  # noqa: F401  (fixtures)
    NS,
    Start,
    devices_of,
    double,
    dra_pod,
    events,
    request_order,
    scene,
    start,
    status_of,
)
from tests.test_kube_queues import queue_obj

Obj = dict[str, Any]


def in_queue(pod: Obj, queue: str) -> Obj:
    pod["metadata"]["labels"] = {"kgpu.io/queue": queue}
    return pod


# ---------------------------------------------------------------------------- a session


def test_a_session_holds_the_claims_of_the_pods_it_places(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    scene(double, gpus=1)
    double.put(one_gpu_claim("c-a"))
    double.put(one_gpu_claim("c-b"))
    double.put(dra_pod("a", ("gpu", "c-a")))
    double.put(dra_pod("b", ("gpu", "c-b")))
    start()
    wait_until(lambda: len(double.bound()) == 1)
    [placed] = double.bound()
    waiting = ({"a", "b"} - {placed}).pop()
    wait_until(
        lambda: any(e.startswith(f"{waiting}: ") for e in events(double, "FailedScheduling"))
    )
    assert {e for e in events(double, "FailedScheduling") if e.startswith(f"{waiting}: ")} == {
        f"{waiting}: 0/1 nodes are available: 1 node(s) cannot allocate the claims: claim "
        f'ml/c-{waiting} request "gpu": needs 1 device(s), 0 of 1 fit (1 allocated to another '
        "claim)."
    }
    # Decided in the session, not caught when its claims were recorded for the Binding: no
    # pod went back to the queue, and only the placed pod's claim was written.
    assert not [e for e in events(double, "FailedScheduling") if "Binding rejected" in e]
    assert request_order(double) == [f"status c-{placed}", f"bind {placed}"]
    assert devices_of(double, f"c-{placed}") == ["gpu-0"]
    assert "allocation" not in status_of(double, f"c-{waiting}")


# ---------------------------------------------------------------------------- queues


@pytest.mark.parametrize("double", [{"crds": True}], indirect=True)
def test_a_queue_counts_the_dra_gpus_its_running_pods_hold(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    scene(double, gpus=2)
    double.put(queue_obj("small", limit={"gpu": 1}))
    double.put(one_gpu_claim("c-first"))
    double.put(in_queue(dra_pod("first", ("gpu", "c-first")), "small"))
    start()
    wait_until(lambda: double.bound() == {"first": "n1"})
    wait_until(
        lambda: (
            (((double.get("queues", "small") or {}).get("status") or {}).get("allocated", {})).get(
                "gpu"
            )
            == "1"
        )
    )
    # A GPU is free on the node, but the queue's running pod holds its one GPU, by a claim.
    double.put(one_gpu_claim("c-second"))
    double.put(in_queue(dra_pod("second", ("gpu", "c-second")), "small"))
    # (The claim's cache may show it after the pod's: the pod then waits for it first.)
    said = "second: queue small: gpu requested 1, allocated 1, quota 1"
    wait_until(lambda: said in events(double, "FailedScheduling"))
    assert double.bound() == {"first": "n1"}
    assert "allocation" not in status_of(double, "c-second")


@pytest.mark.parametrize("double", [{"crds": True}], indirect=True)
def test_a_queue_counts_the_claims_of_pods_bound_before_kgpu_started(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    """The claims of bound pods are read from the cluster, not remembered from binding."""
    scene(double, gpus=2)
    double.put(queue_obj("small", limit={"gpu": 1}))
    running = in_queue(dra_pod("running", ("gpu", "c-run")), "small")
    running["spec"]["nodeName"] = "n1"
    running["status"] = {"phase": "Running"}
    stored = double.put(running)
    allocated = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "running", "uid": stored["metadata"]["uid"]}],
    }
    double.put(claim("c-run", [{"name": "gpu", "exactly": exactly()}], status=allocated))
    double.put(one_gpu_claim("c-new"))
    double.put(in_queue(dra_pod("new", ("gpu", "c-new")), "small"))
    start()
    wait_until(lambda: any(e.startswith("new: ") for e in events(double, "FailedScheduling")))
    assert [e for e in events(double, "FailedScheduling") if e.startswith("new: ")] == [
        "new: queue small: gpu requested 1, allocated 1, quota 1"
    ]
    wait_until(
        lambda: (
            (((double.get("queues", "small") or {}).get("status") or {}).get("allocated", {})).get(
                "gpu"
            )
            == "1"
        )
    )
    assert "new" not in double.bound()


# ---------------------------------------------------------------------------- autoscaling

POOL = NodePool("gpu", (CATALOGUE["p4de.24xlarge"],))
TRIGGERS = "kgpu-system"


def test_dra_gpu_demand_that_fits_nowhere_turns_into_a_trigger_pod(
    double: KubeDouble,  # noqa: F811
    tmp_path: Path,
) -> None:
    scene(double, gpus=1)
    double.put(claim("pair", [{"name": "gpus", "exactly": exactly(count=2)}]))
    double.put(dra_pod("trainer", ("gpus", "pair")))
    options = RunOptions(
        kubeconfig=double.kubeconfig(tmp_path),
        metrics_port=None,
        leader_elect=False,
        timeouts=Timeouts(connect=1.0, request=2.0, watch=30, watch_grace=2.0),
        loop=LoopConfig(unschedulable_retry=0.3, idle_wait=0.05),
        autoscale=AutoscaleOptions(
            controller=ControllerConfig(
                planner=PlannerConfig(pools=(POOL,)), batch_idle_s=0.2, timeout_s=60
            ),
            pods=TriggerPodConfig(namespace=TRIGGERS),
            pending_after_s=0.3,
            interval_s=0.05,
        ),
    )
    scheduler = RunningScheduler(options).start()
    try:
        # The pod asks for no nvidia.com/gpu: its claim's two GPUs are the demand.
        wait_until(lambda: len(triggers(double)) == 1)
        [trigger] = triggers(double)
        assert trigger["spec"]["nodeSelector"] == {"karpenter.sh/nodepool": "gpu"}
        limits = trigger["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "2"
        wait_until(
            lambda: any(e.startswith("trainer: ") for e in events(double, "TriggeredScaleUp"))
        )

        # The node comes (the test plays Karpenter and NVIDIA's DRA driver): the trigger
        # goes, and the pod is placed there with its claim.
        node = node_obj("gpu-node-1", gpus=0)
        node["metadata"]["labels"]["karpenter.sh/nodepool"] = "gpu"
        double.put(node)
        double.put(slice_("gpu-node-1", *(gpu(i) for i in range(8))))
        bound = copy.deepcopy(double.get("pods", trigger["metadata"]["name"], TRIGGERS))
        assert bound is not None
        bound["spec"]["nodeName"] = "gpu-node-1"
        double.put(bound)
        double.put(
            nodeclaim("gpu-x1", "gpu-node-1", "Launched", "Registered", "Initialized", "Ready")
        )
        wait_until(lambda: triggers(double) == [])
        wait_until(lambda: double.bound().get("trainer") == "gpu-node-1")
        assert status_of(double, "pair")["allocation"]["devices"]["results"][0]["pool"] == (
            "gpu-node-1"
        )
    finally:
        scheduler.stop()


def triggers(api: KubeDouble) -> list[Obj]:
    return [p for p in api.objects("pods") if p["metadata"].get("namespace") == TRIGGERS]


# ---------------------------------------------------------------------------- explain


def test_explain_against_the_cluster_names_the_selector_that_failed(
    double: KubeDouble,  # noqa: F811
    tmp_path: Path,
) -> None:
    scene(double, gpus=2)
    blackwell = "device.attributes['gpu.nvidia.com'].architecture == 'Blackwell'"
    double.put(claim("picky", [{"name": "gpu", "exactly": exactly("gpu.nvidia.com", blackwell)}]))
    pod = dra_pod("wants-blackwell", ("gpu", "picky"))
    double.put(pod)
    answer = explain_live("wants-blackwell", NS, double.kubeconfig(tmp_path), SCHEDULER)
    assert answer.summary == f"Pod {NS}/wants-blackwell is pending: no node can take it."
    assert answer.nodes == (
        "0/1 nodes are available: 1 node(s) cannot allocate the claims: claim ml/picky "
        'request "gpu": needs 1 device(s), 0 of 2 fit (2 request selector #0 false).'
    )
    listed = {r.path for r in double.requests if "resource.k8s.io" in r.path}
    assert {
        "/apis/resource.k8s.io/v1/deviceclasses",
        "/apis/resource.k8s.io/v1/resourceslices",
        "/apis/resource.k8s.io/v1/resourceclaims",
        "/apis/resource.k8s.io/v1/resourceclaimtemplates",
    } <= listed


def test_explain_against_the_cluster_reads_a_template_claim_by_its_made_name(
    double: KubeDouble,  # noqa: F811
    tmp_path: Path,
) -> None:
    """Live, a claim made from a template has the name the claim controller gave it."""
    scene(double, gpus=1)
    pod = dra_pod("made", ("gpu", "template:one-gpu"))
    stored = double.put(pod)
    blackwell = "device.attributes['gpu.nvidia.com'].architecture == 'Blackwell'"
    owned = claim(
        "made-gpu-k2x9q", [{"name": "gpu", "exactly": exactly("gpu.nvidia.com", blackwell)}]
    )
    owned["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "made", "uid": stored["metadata"]["uid"]}
    ]
    double.put(owned)
    stored["status"] = {
        "phase": "Pending",
        "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "made-gpu-k2x9q"}],
    }
    double.put(stored)
    answer = explain_live("made", NS, double.kubeconfig(tmp_path), SCHEDULER)
    assert answer.nodes == (
        "0/1 nodes are available: 1 node(s) cannot allocate the claims: claim "
        'ml/made-gpu-k2x9q request "gpu": needs 1 device(s), 0 of 1 fit (1 request selector '
        "#0 false)."
    )

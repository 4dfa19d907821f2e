"""Queues fenced by namespace, in the live scheduler over real HTTP against the API double
(no webhook: the scheduler is the fence on its own).

The attack of issue 18: team B labels its pods with team A's queue, and relabels or
unlabels its running pods to free its own quota. Asserted: B's pods naming A's queue are
refused with an event that says why, A's pods bind, relabelling changes no accounting, and
each Queue's status is what the pods recorded in it hold."""

from __future__ import annotations

import copy
from typing import Any

from kgpu.kube.objects.queue_tenancy import ADMITTED_QUEUE_ANNOTATION
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, pod_obj, wait_until
from tests.test_kube_queues import (  # noqa: F401
    Start,
    double,
    events,
    podgroup_obj,
    queue_obj,
    start,
    status,
)

REFUSED = (
    "namespace team-b may not use queue team-a: Queue team-a serves namespace team-a "
    "(spec.namespaces); the pod is not scheduled"
)


def labelled(name: str, namespace: str, queue: str | None, node: str = "") -> dict[str, Any]:
    pod = pod_obj(name, namespace, gpus=1, node=node)
    if queue is not None:
        pod["metadata"]["labels"] = {"kgpu.io/queue": queue}
    return pod


def fenced_teams(api: KubeDouble) -> None:
    api.put(node_obj("n1", gpus=8))
    api.put(node_obj("n2", gpus=8))
    for team in ("team-a", "team-b"):
        api.put(queue_obj(team, limit={"gpu": 4}, namespaces=[team]))


def held_by_queue(api: KubeDouble) -> dict[str, int]:
    """GPUs the bound pods hold, by the queue each was admitted to."""
    held: dict[str, int] = {}
    for pod in api.objects("pods"):
        if pod["spec"].get("nodeName"):
            queue = pod["metadata"]["annotations"].get(ADMITTED_QUEUE_ANNOTATION, "(none)")
            gpus = int(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
            held[queue] = held.get(queue, 0) + gpus
    return held


def gpus_allocated(api: KubeDouble, queue: str) -> str | None:
    allocated = status(api, "queues", queue).get("allocated") or {}
    return allocated.get("gpu")


def test_pods_naming_another_teams_queue_are_refused_and_relabelling_frees_nothing(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    fenced_teams(double)
    for i in range(4):
        double.put(labelled(f"b-own-{i}", "team-b", "team-b"))
    start()
    wait_until(lambda: len(double.bound()) == 4)
    # Team B, at its limit, names team A's queue for four more.
    for i in range(4):
        double.put(labelled(f"b-steal-{i}", "team-b", "team-a"))
    wait_until(
        lambda: all(
            any(e == f"Pod b-steal-{i}: {REFUSED}" for e in events(double, "FailedScheduling"))
            for i in range(4)
        )
    )
    # Team A's own pods bind: B took none of A's quota.
    for i in range(4):
        double.put(labelled(f"a-{i}", "team-a", "team-a"))
    wait_until(lambda: len(double.bound()) == 8)
    assert not any(name.startswith("b-steal") for name in double.bound())
    # B relabels two running pods to A's queue and unlabels two: its quota stays spent.
    for i in range(4):
        pod = copy.deepcopy(double.get("pods", f"b-own-{i}", "team-b"))
        assert pod is not None
        assert pod["metadata"]["annotations"][ADMITTED_QUEUE_ANNOTATION] == "team-b"
        pod["metadata"]["labels"] = {"kgpu.io/queue": "team-a"} if i < 2 else {}
        double.put(pod)
    double.put(labelled("b-more", "team-b", "team-b"))
    wait_until(
        lambda: (
            "Pod b-more: queue team-b: gpu requested 1, allocated 4, quota 4"
            in events(double, "FailedScheduling")
        )
    )
    double.put(labelled("a-more", "team-a", "team-a"))
    wait_until(
        lambda: (
            "Pod a-more: queue team-a: gpu requested 1, allocated 4, quota 4"
            in events(double, "FailedScheduling")
        )
    )
    assert len(double.bound()) == 8
    # Each queue's status is what the pods admitted to it hold.
    assert held_by_queue(double) == {"team-a": 4, "team-b": 4}
    wait_until(lambda: gpus_allocated(double, "team-a") == "4")
    wait_until(lambda: gpus_allocated(double, "team-b") == "4")


def test_a_podgroup_naming_another_teams_queue_is_refused(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    fenced_teams(double)
    group = podgroup_obj("steal", "team-a", 2)
    group["metadata"]["namespace"] = "team-b"
    double.put(group)
    for i in range(2):
        member = labelled(f"g-{i}", "team-b", None)
        member["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = "steal"
        double.put(member)
    double.put(labelled("a-0", "team-a", "team-a"))
    start()
    wait_until(lambda: double.bound() == {"a-0": "n1"} or double.bound() == {"a-0": "n2"})
    wait_until(
        lambda: all(f"Pod g-{i}: {REFUSED}" in events(double, "FailedScheduling") for i in range(2))
    )
    assert set(double.bound()) == {"a-0"}


def test_a_pod_bound_without_kgpu_in_another_teams_queue_is_not_charged_to_it(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    fenced_teams(double)
    # Created with spec.nodeName, past the scheduler: it holds GPUs, but not A's quota.
    for i in range(3):
        double.put(labelled(f"b-placed-{i}", "team-b", "team-a", node="n2"))
    for i in range(4):
        double.put(labelled(f"a-{i}", "team-a", "team-a"))
    start()
    wait_until(lambda: len(double.bound()) == 7)
    wait_until(lambda: gpus_allocated(double, "team-a") == "4")
    assert held_by_queue(double) == {"team-a": 4, "(none)": 3}


def test_without_namespaces_a_queue_serves_every_namespace(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    double.put(node_obj("n1", gpus=8))
    double.put(queue_obj("shared", limit={"gpu": 4}))
    double.put(labelled("x-0", "team-x", "shared"))
    double.put(labelled("y-0", "team-y", "shared"))
    start()
    wait_until(lambda: double.bound() == {"x-0": "n1", "y-0": "n1"})
    assert held_by_queue(double) == {"shared": 2}


def test_a_forged_admitted_queue_is_not_believed(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    """A pod created bound with its own kgpu.io/admitted-queue: kgpu did not sign it, so its
    label names its queue, as for any pod (docs/SECURITY.md, "Reserved annotations")."""
    fenced_teams(double)
    double.put(queue_obj("spare", limit={"gpu": 8}, namespaces=["team-b"]))
    forged = labelled("b-forged", "team-b", "team-b", node="n2")
    forged["metadata"]["annotations"][ADMITTED_QUEUE_ANNOTATION] = "spare"
    double.put(forged)
    start()
    wait_until(lambda: gpus_allocated(double, "team-b") == "1")
    assert gpus_allocated(double, "spare") in (None, "0")

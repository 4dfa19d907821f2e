"""Who may use a queue, at admission, over real HTTPS: the webhook lists the Queues from the
API double and denies a pod or PodGroup naming a queue its namespace may not use, and a
bound pod's change of queue label (issue 18, failure 2)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import KubeClient, Timeouts
from kgpu.kube.api.listed import Listed
from kgpu.kube.api.resource_types import QUEUES
from tests.kube_double import KubeDouble
from tests.test_webhook import Obj, admit, pod, review, serve

QUEUE_PATH = "/apis/kgpu.io/v1alpha1/queues"
STEAL = (
    'Pod team-b/p: label kgpu.io/queue is "team-a", expected a queue that serves namespace '
    "team-b; namespace team-b may not use queue team-a: Queue team-a serves namespace "
    "team-a (spec.namespaces)"
)


def fenced(name: str, namespaces: list[str] | None, parent: str = "") -> Obj:
    spec: Obj = {} if namespaces is None else {"namespaces": namespaces}
    if parent:
        spec["parent"] = parent
    return {"apiVersion": "kgpu.io/v1alpha1", "kind": "Queue", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def in_namespace(namespace: str, queue: str | None = None, **extra: Any) -> Obj:
    obj = pod(**extra)
    obj["metadata"]["namespace"] = namespace
    if queue is not None:
        obj["metadata"]["labels"] = {"kgpu.io/queue": queue}
    return obj


def relabelled(obj: Obj, labels: dict[str, str]) -> Obj:
    changed = copy.deepcopy(obj)
    changed["metadata"]["labels"] = labels
    return changed


def bound(obj: Obj) -> Obj:
    placed = copy.deepcopy(obj)
    placed["spec"]["nodeName"] = "n1"
    placed["metadata"]["annotations"]["kgpu.io/admitted-queue"] = "team-b"
    return placed


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    with KubeDouble(crds=True) as d:
        d.put(fenced("org", ["team-a", "team-b"]))
        d.put(fenced("team-a", ["team-a"], parent="org"))
        d.put(fenced("team-b", ["team-b"], parent="org"))
        d.put(fenced("open", None, parent="org"))
        yield d


@pytest.fixture
def server(double: KubeDouble, tmp_path: Path) -> Iterator[Any]:
    """A webhook that lists the double's Queues afresh for every review (ttl 0)."""
    client = KubeClient.from_kubeconfig(
        double.kubeconfig(tmp_path), timeouts=Timeouts(connect=1.0, request=1.0)
    )
    try:
        with serve(tmp_path, queues=Listed(client, QUEUES, ttl=0.0)) as served:
            yield served
    finally:
        client.close()


def test_a_pod_naming_a_queue_its_namespace_may_not_use_is_denied(server: Any) -> None:
    response = admit(server, review(in_namespace("team-b", "team-a")))
    assert response["allowed"] is False
    assert response["status"]["message"] == STEAL
    for namespace, queue in [("team-a", "team-a"), ("team-b", "team-b"), ("team-b", "open")]:
        assert admit(server, review(in_namespace(namespace, queue)))["allowed"] is True


def test_a_parents_namespaces_bound_its_subtree(server: Any) -> None:
    response = admit(server, review(in_namespace("team-c", "open")))
    assert response["status"]["message"] == (
        'Pod team-c/p: label kgpu.io/queue is "open", expected a queue that serves namespace '
        "team-c; namespace team-c may not use queue open: Queue org (a parent of open) serves "
        "namespaces team-a, team-b (spec.namespaces)"
    )


def test_the_default_queue_is_fenced_too(double: KubeDouble, server: Any) -> None:
    assert admit(server, review(in_namespace("team-b")))["allowed"] is True  # no Queue default
    double.put(fenced("default", ["team-a"]))
    response = admit(server, review(in_namespace("team-b")))
    assert response["status"]["message"] == (
        "Pod team-b/p: label kgpu.io/queue is missing, expected a queue that serves namespace "
        "team-b; namespace team-b may not use queue default: Queue default serves namespace "
        "team-a (spec.namespaces)"
    )
    # A pod of a PodGroup takes its queue from the PodGroup, which is checked itself.
    member = in_namespace("team-b", annotations={"scheduling.k8s.io/group-name": "g"})
    assert admit(server, review(member))["allowed"] is True


def test_a_podgroup_naming_a_queue_its_namespace_may_not_use_is_denied(server: Any) -> None:
    group: Obj = {"apiVersion": "kgpu.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "g", "namespace": "team-b"},
             "spec": {"minMember": 2, "queue": "team-a"}}  # fmt: skip
    for operation in ("CREATE", "UPDATE"):
        response = admit(server, review(group, operation, old=group))
        assert response["status"]["message"] == (
            'PodGroup team-b/g: spec.queue is "team-a", expected a queue that serves namespace '
            "team-b; namespace team-b may not use queue team-a: Queue team-a serves namespace "
            "team-a (spec.namespaces)"
        )
    group["spec"]["queue"] = "team-b"
    assert admit(server, review(group))["allowed"] is True


def test_a_pending_pod_may_not_be_relabelled_into_another_teams_queue(server: Any) -> None:
    own = in_namespace("team-b", "team-b")
    response = admit(server, review(relabelled(own, {"kgpu.io/queue": "team-a"}), "UPDATE", own))
    assert response["status"]["message"] == STEAL
    moved = relabelled(own, {"kgpu.io/queue": "open"})
    assert admit(server, review(moved, "UPDATE", own))["allowed"] is True


def test_a_bound_pods_queue_label_may_not_change(server: Any) -> None:
    own = bound(in_namespace("team-b", "team-b"))
    fixed = (
        'Pod team-b/p: label kgpu.io/queue is {}, expected "team-b", as when the pod was '
        "bound: a running pod's queue is fixed (kgpu.io/admitted-queue); create a new pod to "
        "use another queue"
    )
    for labels, value in [({"kgpu.io/queue": "team-a"}, '"team-a"'), ({}, "missing")]:
        response = admit(server, review(relabelled(own, labels), "UPDATE", own))
        assert response["status"]["message"] == fixed.format(value)
    # The same queue under KAI's label, and other labels, may change.
    for labels in [{"kai.scheduler/queue": "team-b"}, {"kgpu.io/queue": "team-b", "x": "y"}]:
        assert admit(server, review(relabelled(own, labels), "UPDATE", own))["allowed"] is True


def test_pods_of_other_schedulers_are_not_fenced(server: Any) -> None:
    theirs = in_namespace("team-b", "team-a")
    theirs["spec"]["schedulerName"] = "default-scheduler"
    assert admit(server, review(theirs))["allowed"] is True


def test_unreadable_queues_admit_with_a_warning(double: KubeDouble, server: Any) -> None:
    double.fail("GET", f"^{QUEUE_PATH}$", 500)
    response = admit(server, review(in_namespace("team-b", "team-a")))
    assert response["allowed"] is True
    [warning] = response["warnings"]
    assert warning.startswith("Pod team-b/p: its queue was not checked (cannot list Queues: ")
    assert warning.endswith("the scheduler checks it before placing the pod")


def test_a_queue_with_a_malformed_namespace_list_is_denied(server: Any) -> None:
    for namespaces, message in [
        (
            ["Team_A"],
            'spec.namespaces[0] is "Team_A", expected a namespace name (a DNS-1123 label)',
        ),
        ("team-a", 'spec.namespaces is "team-a", expected a list of namespace names'),
    ]:
        obj = fenced("q", None)
        obj["spec"]["namespaces"] = namespaces
        response = admit(server, review(obj))
        assert response["status"]["message"] == f"Queue q: {message}"

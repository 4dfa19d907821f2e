"""Delete protection of the ResourceClaims ``kgpu run`` allocates, over real HTTP against the
API double: the ``resource.kubernetes.io/delete-protection`` finalizer added in an update
of the claim before its allocation is written (as kube-scheduler's PreBind), removed after
the allocation is cleared (as the resource claim controller), conflicts on either, and a
claim deleted while it holds devices or before it is allocated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import KubeClient, load_configuration
from kgpu.kube.api.errors import Conflict, Invalid
from kgpu.kube.live.dra_claims_writer import FINALIZER
from kgpu.kube.snapshot.dra_inventory import RESOURCE_CLAIMS
from tests.dra_fixtures import one_gpu_claim
from tests.kube_double import KubeDouble
from tests.kube_objects import wait_until
from tests.test_kube_dra_live import (  # noqa: F401  (fixtures)
    NS,
    Start,
    devices_of,
    double,
    dra_pod,
    events,
    scene,
    start,
    status_of,
)

Obj = dict[str, Any]


def finalizers(api: KubeDouble, name: str) -> list[str]:
    found = api.get("resourceclaims", name, NS)
    assert found is not None
    return list(found["metadata"].get("finalizers") or [])


def claim_writes(api: KubeDouble, name: str) -> list[str]:
    """The writes to the claim the double answered, in order: "update" (the claim itself,
    its finalizers), "status"; with the status code when it is not 200."""
    out = []
    for r in api.requests:
        if r.method != "PUT":
            continue
        if r.path.endswith(f"/resourceclaims/{name}"):
            what = "update"
        elif r.path.endswith(f"/resourceclaims/{name}/status"):
            what = "status"
        else:
            continue
        out.append(what if r.status == 200 else f"{what} {r.status}")
    return out


def client_of(api: KubeDouble, tmp_path: Path) -> KubeClient:
    return KubeClient(load_configuration(api.kubeconfig(tmp_path)))


def test_the_finalizer_comes_before_the_allocation_and_goes_after_it(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    scene(double)
    double.put(one_gpu_claim("c1", finalizers=["example.com/keep"]))
    double.put(dra_pod("p1", ("gpu", "c1")))
    start()
    wait_until(lambda: double.bound() == {"p1": "n1"})
    assert finalizers(double, "c1") == ["example.com/keep", FINALIZER]  # others' kept
    assert claim_writes(double, "c1") == ["update", "status"]
    binding = next(i for i, r in enumerate(double.requests) if r.path.endswith("/p1/binding"))
    last_write = max(i for i, r in enumerate(double.requests) if "/resourceclaims/c1" in r.path)
    assert last_write < binding

    double.remove("pods", "p1", NS)  # the pod goes: the claim is released, then unprotected
    wait_until(lambda: finalizers(double, "c1") == ["example.com/keep"])
    assert "allocation" not in status_of(double, "c1")
    assert claim_writes(double, "c1") == ["update", "status", "status", "update"]


def test_a_claim_already_protected_is_not_updated_again(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    """An earlier attempt added the finalizer and was interrupted: it is kept as it is."""
    scene(double)
    double.put(one_gpu_claim("c1", finalizers=[FINALIZER]))
    double.put(dra_pod("p1", ("gpu", "c1")))
    start()
    wait_until(lambda: double.bound() == {"p1": "n1"})
    assert claim_writes(double, "c1") == ["status"]
    assert finalizers(double, "c1") == [FINALIZER]


def test_a_conflict_on_the_finalizer_is_read_again_and_retried(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    scene(double)
    double.put(one_gpu_claim("c1"))
    double.put(dra_pod("p1", ("gpu", "c1")))
    double.fail("PUT", r"/resourceclaims/c1$", 409)
    start()
    wait_until(lambda: double.bound() == {"p1": "n1"})
    assert claim_writes(double, "c1") == ["update 409", "update", "status"]
    assert finalizers(double, "c1") == [FINALIZER]
    assert devices_of(double, "c1") == ["gpu-0"]


def test_a_claim_deleted_while_its_pod_runs_goes_once_released(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    tmp_path: Path,
) -> None:
    scene(double)
    double.put(one_gpu_claim("c1"))
    double.put(dra_pod("p1", ("gpu", "c1")))
    start()
    wait_until(lambda: double.bound() == {"p1": "n1"})
    client = client_of(double, tmp_path)
    try:
        client.delete(RESOURCE_CLAIMS, "c1", NS)  # kubectl delete: only marked
        marked = double.get("resourceclaims", "c1", NS)
        assert marked is not None and marked["metadata"].get("deletionTimestamp")
        assert devices_of(double, "c1") == ["gpu-0"]  # the running pod keeps its GPU
    finally:
        client.close()
    double.remove("pods", "p1", NS)
    wait_until(lambda: double.get("resourceclaims", "c1", NS) is None)


def test_a_pod_whose_claim_is_being_deleted_waits_and_says_so(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    scene(double)
    dying = one_gpu_claim("c1", finalizers=["example.com/keep"])
    dying["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    double.put(dying)
    double.put(dra_pod("p1", ("gpu", "c1")))
    start()
    wait_until(lambda: any("is being deleted" in e for e in events(double, "FailedScheduling")))
    [said] = events(double, "FailedScheduling")
    assert said == (
        "p1: 0/1 nodes are available: 1 node(s) cannot allocate the claims: resource claim "
        "ml/c1 is being deleted."
    )
    assert double.bound() == {}
    assert claim_writes(double, "c1") == []


@pytest.mark.parametrize("stale", [True, False])
def test_the_double_keeps_finalizers_as_the_api_server_does(
    double: KubeDouble,  # noqa: F811
    tmp_path: Path,
    stale: bool,
) -> None:
    """What kgpu relies on: an update from a stale version conflicts; no finalizer may be
    added to a claim being deleted; it goes when its last finalizer is removed."""
    double.put(one_gpu_claim("c1", finalizers=["example.com/keep"]))
    client = client_of(double, tmp_path)
    try:
        first = client.get(RESOURCE_CLAIMS, "c1", NS)
        client.delete(RESOURCE_CLAIMS, "c1", NS)
        current = client.get(RESOURCE_CLAIMS, "c1", NS)
        added = {**current, "metadata": {**current["metadata"], "finalizers": ["a", "b"]}}
        with pytest.raises(Invalid, match="no new finalizers can be added"):
            client.replace(RESOURCE_CLAIMS, "c1", added, NS)
        emptied = first if stale else current
        emptied = {**emptied, "metadata": {**emptied["metadata"], "finalizers": []}}
        if stale:
            with pytest.raises(Conflict):
                client.replace(RESOURCE_CLAIMS, "c1", emptied, NS)
            assert double.get("resourceclaims", "c1", NS) is not None
        else:
            client.replace(RESOURCE_CLAIMS, "c1", emptied, NS)
            assert double.get("resourceclaims", "c1", NS) is None
    finally:
        client.close()


def test_a_failed_binding_takes_the_finalizer_off_with_the_allocation(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    scene(double)
    double.put(one_gpu_claim("c1"))
    double.put(dra_pod("p1", ("gpu", "c1")))
    double.fail("POST", r"/pods/p1/binding$", 500)
    start()
    wait_until(lambda: double.bound() == {"p1": "n1"})
    # Protected and allocated, undone after the 500 (deallocated, then unprotected), and
    # the same again for the Binding that succeeds.
    assert claim_writes(double, "c1") == [
        "update",
        "status",
        "status",
        "update",
        "update",
        "status",
    ]
    assert finalizers(double, "c1") == [FINALIZER]

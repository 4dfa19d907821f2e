"""``kgpu run`` with Dynamic Resource Allocation, over real HTTP against the API double
serving ``resource.k8s.io/v1``: claims allocated, written before the Binding, released when
their pod goes; conflicts, a server without DRA, and claims that cannot be read."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import Timeouts
from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.live.scheduler_process import RunningScheduler
from tests.dra_fixtures import GPU_CLASS, claim, exactly, gpu, slice_, template
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, pod_obj, wait_until
from tests.schedulers import fast_options, schedulers

Obj = dict[str, Any]
Start = Callable[..., RunningScheduler]
NS = "ml"


@pytest.fixture
def double(request: pytest.FixtureRequest) -> Iterator[KubeDouble]:
    with KubeDouble(**getattr(request, "param", {})) as d:
        yield d


@pytest.fixture
def start(double: KubeDouble, tmp_path: Path) -> Iterator[Start]:
    defaults: dict[str, Any] = {
        "timeouts": Timeouts(connect=1.0, request=1.0, watch=30, watch_grace=2.0),
        "loop": LoopConfig(
            backoff_initial=0.2,
            backoff_max=1.0,
            unschedulable_retry=0.5,
            uncertain_grace=10.0,
            idle_wait=0.05,
        ),
        "workspaces": None,
    }
    with schedulers() as run:
        yield lambda identity="s1", **o: run(
            fast_options(double, tmp_path, identity, **{**defaults, **o})
        )


def dra_pod(name: str, *claims: tuple[str, str]) -> Obj:
    """A pod of ``NS`` whose container uses the claims (entry name, claim name); a claim
    name "template:T" makes the entry name the template T instead."""
    pod = pod_obj(name, NS)
    entries = []
    for entry, ref in claims:
        if ref.startswith("template:"):
            entries.append({"name": entry, "resourceClaimTemplateName": ref.split(":", 1)[1]})
        else:
            entries.append({"name": entry, "resourceClaimName": ref})
    pod["spec"]["resourceClaims"] = entries
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": e} for e, _ in claims]
    return pod


def scene(double: KubeDouble, gpus: int = 2) -> None:
    double.put(node_obj("n1", gpus=0))
    double.put(GPU_CLASS)
    double.put(slice_("n1", *(gpu(i) for i in range(gpus))))


def status_of(double: KubeDouble, name: str) -> Obj:
    found = double.get("resourceclaims", name, NS)
    assert found is not None
    return dict(found.get("status") or {})


def devices_of(double: KubeDouble, name: str) -> list[str]:
    allocation = status_of(double, name).get("allocation") or {}
    return [r["device"] for r in allocation.get("devices", {}).get("results", [])]


def events(double: KubeDouble, reason: str) -> list[str]:
    return [
        f"{e['involvedObject']['name']}: {e['message']}"
        for e in double.objects("events")
        if e["reason"] == reason
    ]


def request_order(double: KubeDouble) -> list[str]:
    """The claim status writes and Bindings the double answered with success, in order."""
    out = []
    for r in double.requests:
        if r.status >= 300 or "dryRun" in r.query:
            continue
        if r.method == "PUT" and r.path.endswith("/status") and "/resourceclaims/" in r.path:
            out.append("status " + r.path.split("/")[-2])
        elif r.method == "POST" and r.path.endswith("/binding"):
            out.append("bind " + r.path.split("/")[-2])
    return out


# ---------------------------------------------------------------------------- allocate, bind, release


def test_allocates_writes_the_claims_before_binding_and_releases(
    double: KubeDouble, start: Start
) -> None:
    scene(double)
    for name in ("c1", "c2", "c3"):
        double.put(claim(name, [{"name": "gpu", "exactly": exactly()}]))
    for pod, name in (("p1", "c1"), ("p2", "c2"), ("p3", "c3")):
        double.put(dra_pod(pod, ("gpu", name)))
    start()
    wait_until(lambda: len(double.bound()) == 2)
    bound = set(double.bound())
    waiting = ({"p1", "p2", "p3"} - bound).pop()
    held = {f"c{p[1]}" for p in bound}
    assert sorted(d for c in held for d in devices_of(double, c)) == ["gpu-0", "gpu-1"]
    for pod in bound:
        name = f"c{pod[1]}"
        status = status_of(double, name)
        obj = double.get("pods", pod, NS)
        assert obj is not None
        assert status["reservedFor"] == [
            {"resource": "pods", "name": pod, "uid": obj["metadata"]["uid"]}
        ]
        result = status["allocation"]["devices"]["results"][0]
        assert {k: result[k] for k in ("request", "driver", "pool")} == {
            "request": "gpu",
            "driver": "gpu.nvidia.com",
            "pool": "n1",
        }
        term = status["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]
        assert term == {
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]
        }
        order = request_order(double)
        assert order.index(f"status {name}") < order.index(f"bind {pod}")
    # The session holds the claims of the pods it places: the third finds their devices
    # taken, and says why no node fits.
    wait_until(
        lambda: any(
            e.startswith(f"{waiting}: ") and "cannot allocate the claims" in e
            for e in events(double, "FailedScheduling")
        )
    )
    assert "reservedFor" not in status_of(double, f"c{waiting[1]}")

    gone = sorted(bound)[0]
    double.remove("pods", gone, NS)  # the pod goes: its claim is released, its GPU free
    released = f"c{gone[1]}"
    wait_until(lambda: "allocation" not in status_of(double, released))
    assert "reservedFor" not in status_of(double, released)
    wait_until(lambda: waiting in double.bound())  # the waiting pod gets the freed GPU
    assert devices_of(double, f"c{waiting[1]}")


def test_a_claim_shared_by_two_pods_is_allocated_once(double: KubeDouble, start: Start) -> None:
    scene(double, gpus=1)
    double.put(claim("shared", [{"name": "gpu", "exactly": exactly()}]))
    double.put(dra_pod("a", ("gpu", "shared")))
    double.put(dra_pod("b", ("gpu", "shared")))
    start()
    wait_until(lambda: set(double.bound()) == {"a", "b"})
    wait_until(lambda: len(status_of(double, "shared").get("reservedFor", [])) == 2)
    assert devices_of(double, "shared") == ["gpu-0"]
    double.remove("pods", "a", NS)
    wait_until(lambda: len(status_of(double, "shared").get("reservedFor", [])) == 1)
    assert devices_of(double, "shared") == ["gpu-0"]  # b still holds it


# ---------------------------------------------------------------------------- conflicts


def test_a_conflict_on_the_status_write_is_read_again_and_retried(
    double: KubeDouble, start: Start
) -> None:
    scene(double)
    double.put(claim("c1", [{"name": "gpu", "exactly": exactly()}]))
    double.put(dra_pod("p1", ("gpu", "c1")))
    double.fail("PUT", r"/resourceclaims/c1/status$", 409)
    start()
    wait_until(lambda: double.bound() == {"p1": "n1"})
    puts = [
        r.status
        for r in double.requests
        if r.method == "PUT" and r.path.endswith("/resourceclaims/c1/status")
    ]
    assert puts == [409, 200]
    assert any(r.method == "GET" and r.path.endswith("/resourceclaims/c1") for r in double.requests)
    assert devices_of(double, "c1")


def test_a_claim_allocated_elsewhere_meanwhile_gives_the_pod_back(
    double: KubeDouble, start: Start
) -> None:
    scene(double)
    double.put(claim("c1", [{"name": "gpu", "exactly": exactly()}]))
    double.put(dra_pod("p1", ("gpu", "c1")))
    theirs = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-1"}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "other", "uid": "other-uid"}],
    }

    def allocate_elsewhere() -> None:  # another scheduler wins the race for the claim
        current = double.get("resourceclaims", "c1", NS)
        assert current is not None
        double.put({**current, "status": theirs})

    double.before("PUT", r"/resourceclaims/c1/status$", allocate_elsewhere)
    start()
    wait_until(lambda: any("allocated meanwhile" in e for e in events(double, "FailedScheduling")))
    # Retried on the claim as it is now: the devices it has, the pod added beside the other.
    wait_until(lambda: double.bound() == {"p1": "n1"})
    assert devices_of(double, "c1") == ["gpu-1"]
    assert [c["name"] for c in status_of(double, "c1")["reservedFor"]] == ["other", "p1"]


def test_a_failed_binding_undoes_the_claims(double: KubeDouble, start: Start) -> None:
    scene(double)
    double.put(claim("c1", [{"name": "gpu", "exactly": exactly()}]))
    double.put(dra_pod("p1", ("gpu", "c1")))
    double.fail("POST", r"/pods/p1/binding$", 500)
    start()
    wait_until(lambda: double.bound() == {"p1": "n1"})
    statuses = [
        r.status
        for r in double.requests
        if r.method == "PUT" and r.path.endswith("/resourceclaims/c1/status")
    ]
    assert statuses == [200, 200, 200]  # written, undone after the 500, written again
    assert len(status_of(double, "c1")["reservedFor"]) == 1


# ---------------------------------------------------------------------------- other servers, bad input


@pytest.mark.parametrize("double", [{"dra": False}], indirect=True)
def test_a_server_without_dra_is_scheduled_as_before(
    double: KubeDouble, start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    double.put(node_obj("n1", gpus=1))
    double.put(pod_obj("a", gpus=1))
    with caplog.at_level(logging.INFO, logger="kgpu.kube.live.scheduler_process"):
        start()
    wait_until(lambda: double.bound() == {"a": "n1"})
    assert "does not serve resource.k8s.io/v1" in caplog.text
    dra = [r.path for r in double.requests if "resource.k8s.io" in r.path]
    assert dra == ["/apis/resource.k8s.io/v1"]  # asked once, nothing watched


def test_a_claim_that_cannot_be_read_is_refused_alone(double: KubeDouble, start: Start) -> None:
    scene(double)
    double.put(claim("good", [{"name": "gpu", "exactly": exactly()}]))
    bad = claim("bad", [{"name": "gpu", "exactly": exactly("gpu.nvidia.com", "device.driver ==")}])
    double.put(bad)
    double.put(dra_pod("p-good", ("gpu", "good")))
    double.put(dra_pod("p-bad", ("gpu", "bad")))
    broken = dra_pod("p-broken", ("gpu", "good"))
    broken["spec"]["containers"][0]["resources"]["claims"] = [{"name": "nope"}]
    double.put(broken)
    start()
    wait_until(lambda: double.bound() == {"p-good": "n1"})
    wait_until(lambda: len(events(double, "DRAObjectUnreadable")) == 2)
    said = events(double, "DRAObjectUnreadable")
    assert any(e.startswith("bad: ") and "spec.devices.requests[0]" in e for e in said), said
    assert any(e.startswith("p-broken: ") and "resources.claims[0].name" in e for e in said)
    wait_until(lambda: len(events(double, "FailedScheduling")) >= 2)
    failed = " ".join(events(double, "FailedScheduling"))
    assert "resource claim ml/bad cannot be read" in failed
    assert "p-broken" in failed
    assert "bad" not in double.bound() and "p-broken" not in double.bound()


def test_a_template_claim_waits_for_the_claim_controller(double: KubeDouble, start: Start) -> None:
    scene(double)
    double.put(template("one-gpu", [{"name": "gpu", "exactly": exactly()}]))
    double.put(dra_pod("p1", ("gpu", "template:one-gpu")))
    start()
    wait_until(
        lambda: any("waits for its ResourceClaim" in e for e in events(double, "FailedScheduling"))
    )
    assert double.bound() == {}
    # What kube-controller-manager's resource claim controller does on a 1.34 cluster.
    pod = double.get("pods", "p1", NS)
    assert pod is not None
    made = claim("p1-gpu-x7k2p", [{"name": "gpu", "exactly": exactly()}])
    made["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "p1", "uid": pod["metadata"]["uid"]}
    ]
    double.put(made)
    pod.setdefault("status", {})["resourceClaimStatuses"] = [
        {"name": "gpu", "resourceClaimName": "p1-gpu-x7k2p"}
    ]
    double.put(pod)
    wait_until(lambda: double.bound() == {"p1": "n1"})
    assert devices_of(double, "p1-gpu-x7k2p") == ["gpu-0"]

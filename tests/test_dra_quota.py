"""DRA GPUs in queues: quotas, limits and fair shares count a pod's GPU claims as other GPUs
(:mod:`kgpu.dra.gpu_count`), and a session records the claims of the pods it places, so two
pods of one session never get the same device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kgpu.dra.gpu_count import (
    DraGpus,
    class_kind,
    gfd_product,
    pinned_products,
    request_milli,
    spec_milli,
)
from kgpu.kube.objects.dra_claim_objects import resource_claim_from_k8s
from kgpu.model.dra import AllocationMode, ExactRequest
from kgpu.sim.manifest_results import PodStatus
from kgpu.sim.manifests import simulate_manifests
from tests.dra_fixtures import (
    GPU_CLASS,
    H100,
    MIG_CLASS,
    claim,
    exactly,
    gpu,
    inventory,
    mig,
    slice_,
    template,
    wants,
)

Obj = dict[str, Any]


def node(name: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}},
    }


def pod(name: str, template_name: str, queue: str = "team", bound: str = "") -> Obj:
    spec: Obj = {
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": template_name}],
        "containers": [
            {
                "name": "main",
                "image": "trainer:1",
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi"},
                    "claims": [{"name": "gpus"}],
                },
            }
        ],
    }
    if bound:
        spec["nodeName"] = bound
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": {"kgpu.io/queue": queue}},
        "spec": spec,
    }


def queue(name: str, deserved: int, limit: int | None = None) -> Obj:
    spec: Obj = {"deserved": {"gpu": deserved}}
    if limit is not None:
        spec["limit"] = {"gpu": limit}
    return {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def write(directory: Path, *docs: Obj) -> Path:
    (directory / "all.yaml").write_text(yaml.safe_dump_all(docs))
    return directory


def one_gpu(name: str = "one-gpu") -> Obj:
    return template(name, [{"name": "gpu", "exactly": exactly("gpu.nvidia.com")}])


def cluster(gpus: int = 4) -> list[Obj]:
    return [
        GPU_CLASS,
        MIG_CLASS,
        node("n0"),
        slice_("n0", *[gpu(i) for i in range(gpus)]),
    ]


# ------------------------------------------------------------------ what counts


def test_gpu_classes_follow_kai_and_mig_classes_count_their_profile() -> None:
    assert class_kind("gpu.nvidia.com") == "gpu"
    assert class_kind("GPU.example.com") == "gpu"
    assert class_kind("mig.nvidia.com") == "mig"
    assert class_kind("rdma.example.com") == ""
    assert request_milli(ExactRequest("gpu.nvidia.com", count=3)) == 3000
    # All: one device before allocation, as KAI counts it.
    assert request_milli(ExactRequest("gpu.nvidia.com", mode=AllocationMode.ALL)) == 1000
    pinned = ExactRequest(
        "mig.nvidia.com", ("device.attributes['gpu.nvidia.com'].profile == '3g.20gb'",)
    )
    assert request_milli(pinned) == 429  # 3 of 7 compute slices
    assert request_milli(ExactRequest("mig.nvidia.com")) == 1000  # never under-counted
    assert request_milli(ExactRequest("nic.example.com", count=4)) == 0


def test_first_available_counts_its_largest_alternative() -> None:
    obj = claim(
        "c",
        [
            {
                "name": "r",
                "firstAvailable": [
                    {
                        "name": "small",
                        **exactly(
                            "mig.nvidia.com",
                            "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
                        ),
                    },
                    {"name": "whole", **exactly("gpu.nvidia.com")},
                ],
            }
        ],
    )
    assert spec_milli(resource_claim_from_k8s(obj).spec) == 1000


def test_allocated_claims_count_the_devices_they_got() -> None:
    inv = inventory(
        [slice_("n0", gpu(0), mig(1, 0, "3g.20gb"))],
        [
            claim("whole", [{"name": "g", "exactly": exactly("gpu.nvidia.com")}]),
            claim("part", [{"name": "m", "exactly": exactly("mig.nvidia.com")}]),
        ],
    )
    wants(inv, "a", "whole", "part")
    counter = DraGpus(inv)
    assert counter.pod_milli("ml/a") == 2000  # before: a GPU, and a MIG device of no profile
    assert counter.capacity({"n0"}) == 1000 + 429
    inv.record("ml/a", "n0", {})
    assert counter.pod_milli("ml/a") == 1000 + 429  # after: what it got


def test_products_pinned_by_selectors_are_read_as_gfd_labels() -> None:
    assert gfd_product(H100) == "NVIDIA-H100-80GB-HBM3"
    assert pinned_products([f"device.attributes['gpu.nvidia.com'].productName == '{H100}'"]) == (
        "NVIDIA-H100-80GB-HBM3",
    )
    assert pinned_products(
        ["device.attributes[\"gpu.nvidia.com\"].productName in ['NVIDIA L4', 'NVIDIA A10G']"]
    ) == ("NVIDIA-L4", "NVIDIA-A10G")
    assert pinned_products(["device.capacity['gpu.nvidia.com'].memory >= quantity('40Gi')"]) == ()


# ------------------------------------------------------------------ sessions


def test_a_queue_at_its_gpu_limit_refuses_a_dra_pod(tmp_path: Path) -> None:
    two = template("two-gpus", [{"name": "g", "exactly": exactly("gpu.nvidia.com", count=2)}])
    directory = write(
        tmp_path,
        *cluster(),
        queue("team", 2, limit=2),
        two,
        one_gpu(),
        pod("first", "two-gpus", bound="n0"),
        pod("second", "one-gpu"),
    )
    run = simulate_manifests(directory)
    by_pod = {r.pod: r for r in run.results}
    assert by_pod["ml/first"].status == PodStatus.RUNNING
    second = by_pod["ml/second"]
    assert second.status == PodStatus.PENDING
    assert second.message == "queue team: gpu requested 1, allocated 2, quota 2"


def test_dra_and_other_gpu_pods_share_one_limit(tmp_path: Path) -> None:
    plain_node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "p0", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "4"}
        },
    }
    plain_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain", "namespace": "ml", "labels": {"kgpu.io/queue": "team"}},
        "spec": {
            "nodeName": "p0",
            "containers": [
                {"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 2}}}
            ],
        },
    }
    directory = write(
        tmp_path,
        *cluster(),
        plain_node,
        queue("team", 2, limit=3),
        template("two-gpus", [{"name": "g", "exactly": exactly("gpu.nvidia.com", count=2)}]),
        one_gpu(),
        plain_pod,
        pod("dra-two", "two-gpus"),
        pod("dra-one", "one-gpu"),
    )
    run = simulate_manifests(directory)
    by_pod = {r.pod: r for r in run.results}
    assert by_pod["ml/plain"].status == PodStatus.RUNNING
    # 2 plain GPUs held; the 1-GPU DRA pod (first by name) takes the queue to its limit of 3,
    # the 1-GPU one fits within it.
    assert by_pod["ml/dra-two"].status == PodStatus.PENDING
    assert by_pod["ml/dra-two"].message == "queue team: gpu requested 2, allocated 3, quota 3"
    assert by_pod["ml/dra-one"].status == PodStatus.SCHEDULED


def test_two_dra_pods_of_one_session_get_different_devices(tmp_path: Path) -> None:
    directory = write(
        tmp_path,
        *cluster(gpus=3),
        queue("team", 3),
        one_gpu(),
        pod("a", "one-gpu"),
        pod("b", "one-gpu"),
        pod("c", "one-gpu"),
        pod("d", "one-gpu"),
    )
    run = simulate_manifests(directory)
    assert run.session
    by_pod = {r.pod: r for r in run.results}
    placed = [r for r in run.results if r.status == PodStatus.SCHEDULED]
    assert len(placed) == 3
    devices = [line.split("=", 1)[1].split(" ")[0] for r in placed for line in r.resource_claims]
    assert sorted(devices) == [f"gpu.nvidia.com/n0/gpu-{i}" for i in range(3)]
    # The fourth is pending, and its reason names the request and what turned devices away.
    (waiting,) = [r for r in by_pod.values() if r.status == PodStatus.PENDING]
    assert 'request "gpu": needs 1 device(s), 0 of 3 fit (3 allocated to another claim)' in (
        waiting.message
    )
    assert not any("not recorded" in n for n in run.notes)


def test_pending_reasons_name_the_selector_that_failed(tmp_path: Path) -> None:
    picky = template(
        "big-gpu",
        [
            {
                "name": "gpu",
                "exactly": exactly(
                    "gpu.nvidia.com",
                    "device.capacity['gpu.nvidia.com'].memory >= quantity('141Gi')",
                ),
            }
        ],
    )
    directory = write(tmp_path, *cluster(), queue("team", 4), picky, pod("p", "big-gpu"))
    (result,) = simulate_manifests(directory).results
    assert result.status == PodStatus.PENDING
    assert (
        'claim ml/p-gpus request "gpu": needs 1 device(s), 0 of 4 fit (4 request selector #0 false)'
        in (result.message)
    )


def _session_of(tmp_path: Path, *docs: Obj) -> Any:
    from kgpu.actions.session_runner import run_session, session_config
    from kgpu.config import load_profile
    from kgpu.dra.allocator import Refused
    from kgpu.kube.objects.dra_claim_objects import pod_claims_from_k8s
    from kgpu.kube.objects.dra_objects import is_dra
    from kgpu.kube.objects.node_pod import node_from_k8s, pod_from_k8s
    from kgpu.kube.snapshot.cache_snapshot import CacheSnapshot, PendingPod
    from kgpu.kube.snapshot.session_input import QueueReader, assemble
    from kgpu.plugins.registry import PluginContext
    from kgpu.sim.manifest_dra import dra_inventory, dra_scheduler
    from kgpu.state.cluster import ClusterState

    nodes = [node_from_k8s(d) for d in docs if d["kind"] == "Node"]
    pods = [d for d in docs if d["kind"] == "Pod"]
    claims = {f"ml/{p['metadata']['name']}": pod_claims_from_k8s(p) for p in pods}
    notes: list[str] = []
    dra = dra_inventory([("t", d) for d in docs if is_dra(d)], claims, notes)
    state = ClusterState(nodes)
    bound, pending = [], []
    for p in pods:
        spec = pod_from_k8s(p)
        node_name = p["spec"].get("nodeName")
        if node_name:  # running: its claims allocated on its node
            index = state.index[node_name]
            assert dra is not None and not isinstance(
                dra.record(spec.key, node_name, state.nodes[index].labels), Refused
            )
            state.allocate(spec, index, ())
            bound.append(PendingPod(p, spec))
        else:
            pending.append(PendingPod(p, spec))
    profile = load_profile("kgpu")
    scheduler = dra_scheduler(profile, PluginContext(dra=dra))
    objects = QueueReader().read([d for d in docs if d["kind"] == "Queue"], [], [])
    made = assemble(CacheSnapshot(state, bound=bound), pending, {}, objects)
    made.snapshot.dra = dra
    return run_session(made.snapshot, scheduler, session_config(profile)), dra


def test_fair_shares_count_dra_gpus(tmp_path: Path) -> None:
    docs = [
        *cluster(gpus=4),
        queue("a", 1),
        queue("b", 1),
        one_gpu(),
        template("two-gpus", [{"name": "g", "exactly": exactly("gpu.nvidia.com", count=2)}]),
        *[pod(f"a{i}", "two-gpus", queue="a") for i in range(2)],
        *[pod(f"b{i}", "two-gpus", queue="b") for i in range(2)],
    ]
    result, _ = _session_of(tmp_path, *docs)
    # 4 DRA GPUs, two queues of equal weight asking 4 each: 2 each.
    assert result.fair["a"]["gpu"] == 2000
    assert result.fair["b"]["gpu"] == 2000
    assert result.allocated["a"]["gpu"] == 2000
    assert result.allocated["b"]["gpu"] == 2000
    assert len(result.binds) == 2
    # The result says which devices each bound pod got.
    got = sorted(
        r.id for claims in result.claims.values() for a in claims.values() for r in a.results
    )
    assert got == [f"gpu.nvidia.com/n0/gpu-{i}" for i in range(4)]


def test_no_dra_means_no_dra_in_the_result(tmp_path: Path) -> None:
    docs = [node("n0"), queue("team", 1)]
    result, dra = _session_of(tmp_path, *docs)
    assert result.claims == {}
    assert dra is None


def test_preemption_frees_the_victims_devices_and_close_puts_them_back(tmp_path: Path) -> None:
    low = pod("low", "four-gpus", bound="n0")
    high = pod("high", "four-gpus")
    high["spec"]["priority"] = 100
    docs = [
        *cluster(gpus=4),
        queue("team", 4),
        template("four-gpus", [{"name": "g", "exactly": exactly("gpu.nvidia.com", count=4)}]),
        low,
        high,
    ]
    result, dra = _session_of(tmp_path, *docs)
    assert [str(e.pod) for e in result.evictions] == ["ml/low"]
    assert [(str(n.pod), str(n.node)) for n in result.nominations] == [("ml/high", "n0")]
    # Evictions and nominations are the edge's to carry out: the claims are as they were.
    assert dra.claims["ml/low-gpus"].allocation is not None
    assert dra.claims["ml/low-gpus"].reserved_for == ("low",)
    assert "ml/high-gpus" not in dra.claims
    assert len(dra.in_use.exclusive) == 4
    # The victim's 4 DRA GPUs left the queue's account, the nominated pod's 4 came in.
    assert result.allocated["team"]["gpu"] == 4000


# ------------------------------------------------------------------ kgpu explain


def _claiming_pod(name: str, claim_name: str) -> Obj:
    from tests.kube_objects import pod_obj

    obj = pod_obj(name, "ml")
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return obj


def test_live_explain_names_the_selector_and_the_capacity_that_failed() -> None:
    from kgpu.kube.explain.explanation import explain_from_objects
    from tests.kube_objects import SCHEDULER, node_obj

    big = claim(
        "big",
        [
            {
                "name": "gpu",
                "exactly": exactly(
                    "gpu.nvidia.com", capacity={"requests": {"gpu.nvidia.com/memory": "100Gi"}}
                ),
            }
        ],
    )
    picky = claim(
        "picky",
        [
            {
                "name": "gpu",
                "exactly": exactly(
                    "gpu.nvidia.com",
                    "device.attributes['gpu.nvidia.com'].architecture == 'Blackwell'",
                ),
            }
        ],
    )
    inv = inventory([slice_("n0", gpu(0), gpu(1))], [big, picky])
    nodes = [node_obj("n0", gpus=0)]
    pods = [_claiming_pod("wants-big", "big"), _claiming_pod("wants-blackwell", "picky")]
    answer = explain_from_objects(pods[0], nodes, pods, SCHEDULER, dra=inv)
    assert answer.summary == "Pod ml/wants-big is pending: no node can take it."
    assert answer.nodes == (
        "0/1 nodes are available: 1 node(s) cannot allocate the claims: claim ml/big request "
        '"gpu": needs 1 device(s), 0 of 2 fit (2 capacity gpu.nvidia.com/memory below '
        "107374182400)."
    )
    answer = explain_from_objects(pods[1], nodes, pods, SCHEDULER, dra=inv)
    assert "2 request selector #0 false" in answer.nodes

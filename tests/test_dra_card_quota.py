"""DRA GPUs in card quotas and in a queue's limit on each node.

Card quotas (``volcano.sh/card.quota``) count a pod's DRA GPU claims by the product of the
devices they get, or the one product their selectors pin while pending; an ``All`` claim is
checked against its queue for what it would take on each node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from kgpu.cli import main
from kgpu.sim.manifest_results import PodStatus
from kgpu.sim.manifests import simulate_manifests
from tests.dra_fixtures import A100, GPU_CLASS, H100, MIG_CLASS, exactly, gpu, slice_, template
from tests.test_dra_quota import node, pod, write

Obj = dict[str, Any]
H100_CARD = "NVIDIA-H100-80GB-HBM3"
A100_CARD = "NVIDIA-A100-SXM4-40GB"


def _pinned(name: str, product: str, count: int = 1) -> Obj:
    selector = f"device.attributes['gpu.nvidia.com'].productName == '{product}'"
    return template(
        name, [{"name": "g", "exactly": exactly("gpu.nvidia.com", selector, count=count)}]
    )


def _queue(name: str, card_quota: dict[str, int] | None = None, **spec: Any) -> Obj:
    obj: Obj = {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec or {"deserved": {"gpu": 8}},
    }
    if card_quota is not None:
        obj["metadata"]["annotations"] = {"volcano.sh/card.quota": json.dumps(card_quota)}
    return obj


def _two_products() -> list[Obj]:
    return [
        GPU_CLASS,
        MIG_CLASS,
        node("h0"),
        slice_("h0", *[gpu(i, product=H100) for i in range(4)]),
        node("a0"),
        slice_("a0", *[gpu(i, product=A100) for i in range(4)]),
        _pinned("h100", H100),
        _pinned("a100", A100),
        template("any", [{"name": "g", "exactly": exactly("gpu.nvidia.com")}]),
    ]


def _card_quota_run(tmp_path: Path) -> Any:
    docs = [
        *_two_products(),
        _queue("team", {H100_CARD: 2}),
        pod("h-0", "h100", bound="h0"),
        pod("h-1", "h100", bound="h0"),
        pod("h-2", "h100"),
        pod("a-0", "a100"),
        pod("a-1", "a100"),
        pod("any-0", "any"),
    ]
    return write(tmp_path, *docs)


def test_a_card_quota_holds_dra_gpus_of_its_model_and_not_of_another(tmp_path: Path) -> None:
    run = simulate_manifests(_card_quota_run(tmp_path))
    by_pod = {r.pod: r for r in run.results}
    # The two H100s held count against the H100 quota of 2: a third waits, named.
    assert by_pod["ml/h-0"].status == PodStatus.RUNNING
    assert by_pod["ml/h-2"].status == PodStatus.PENDING
    assert by_pod["ml/h-2"].message == (
        f"queue team: {H100_CARD} requested 1, allocated 2, quota 2"
    )
    # The A100 pods are not held by it (no quota names their card).
    assert by_pod["ml/a-0"].status == PodStatus.SCHEDULED
    assert by_pod["ml/a-1"].status == PodStatus.SCHEDULED
    # A claim of any GPU goes where its queue's card quota lets it: the A100 node, though
    # the H100 node has two free devices.
    assert (by_pod["ml/any-0"].status, by_pod["ml/any-0"].node) == (PodStatus.SCHEDULED, "a0")
    assert by_pod["ml/any-0"].resource_claims[0].startswith("ml/any-0-gpus: g=gpu.nvidia.com/a0/")


def test_the_session_charges_the_cards_the_claims_got(tmp_path: Path) -> None:
    from kgpu.kube.objects.dra_claim_objects import pod_claims_from_k8s
    from tests.test_dra_quota import _session_of

    docs = [
        *_two_products(),
        _queue("team", {H100_CARD: 3}),
        pod("h-0", "h100", bound="h0"),
        pod("a-0", "a100"),
        pod("any-0", "any"),
        pod("any-1", "any"),
    ]
    assert pod_claims_from_k8s(docs[-1])  # pods name their claims: the session counts them
    result, _ = _session_of(tmp_path, *docs)
    team = result.allocated["team"]
    assert team["gpu"] == 4000
    # One H100 held, the two "any" pods placed on H100 (within the quota of 3) or A100: the
    # cards add up to the GPUs, and the H100 card stays within its quota.
    assert team.get(H100_CARD, 0) + team.get(A100_CARD, 0) == 4000
    assert team.get(A100_CARD, 0) >= 1000
    assert team[H100_CARD] <= 3000


def test_explain_names_the_card_quota_that_holds_a_dra_pod(tmp_path: Path) -> None:
    directory = _card_quota_run(tmp_path)
    result = CliRunner().invoke(
        main,
        ["simulate", "manifests", str(directory), "--explain", "ml/h-2"],
        env={"COLUMNS": "300"},
    )
    assert result.exit_code == 0, result.output
    assert f"Pod ml/h-2 waits: queue team: {H100_CARD} requested 1, allocated 2, quota 2" in (
        result.output
    )


# ------------------------------------------------------------------ All, node by node


def _all_docs(limit: int, *more: Obj) -> list[Obj]:
    return [
        GPU_CLASS,
        MIG_CLASS,
        node("big"),
        slice_("big", *[gpu(i) for i in range(8)]),
        node("small"),
        slice_("small", *[gpu(i) for i in range(4)]),
        template(
            "every-gpu",
            [{"name": "g", "exactly": exactly("gpu.nvidia.com", allocationMode="All")}],
        ),
        _queue("team", None, deserved={"gpu": limit}, limit={"gpu": limit}),
        *more,
    ]


def test_an_all_claim_goes_where_what_it_takes_fits_the_queue(tmp_path: Path) -> None:
    run = simulate_manifests(write(tmp_path, *_all_docs(4, pod("greedy", "every-gpu"))))
    (result,) = run.results
    # On "big" All would take 8 GPUs, past the queue's 4: it goes to "small", and takes 4.
    assert (result.status, result.node) == (PodStatus.SCHEDULED, "small")
    assert len(result.resource_claims) == 1
    assert result.resource_claims[0].count("gpu.nvidia.com/small/") == 4


def test_an_all_claim_no_node_can_take_within_the_limit_waits_naming_it(
    tmp_path: Path,
) -> None:
    run = simulate_manifests(write(tmp_path, *_all_docs(3, pod("greedy", "every-gpu"))))
    (result,) = run.results
    assert result.status == PodStatus.PENDING
    assert result.message == (
        "0/2 nodes are available: "
        "1 node(s) where the claims would pass the quota: "
        "queue team: gpu requested 4, allocated 0, quota 3, "
        "1 node(s) where the claims would pass the quota: "
        "queue team: gpu requested 8, allocated 0, quota 3."
    )


def test_an_all_claim_is_charged_what_it_took_and_holds_the_next_pod(tmp_path: Path) -> None:
    from tests.test_dra_quota import _session_of

    one = template("one", [{"name": "g", "exactly": exactly("gpu.nvidia.com")}])
    docs = _all_docs(6, one, pod("a-greedy", "every-gpu"), pod("b-one", "one"), pod("c-one", "one"))
    result, _ = _session_of(tmp_path, *docs)
    placed = {str(b.pod): str(b.node) for b in result.binds}
    # 4 on "small" for the All claim; 2 single GPUs within the limit of 6; no more.
    assert placed["ml/a-greedy"] == "small"
    assert result.allocated["team"]["gpu"] == 6000
    assert len(placed) == 3


def _held_status(node_name: str, device: str, pod_name: str) -> Obj:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
    result = {"request": "g", "driver": "gpu.nvidia.com", "pool": node_name, "device": device}
    return {
        "allocation": {
            "devices": {"results": [result]},
            "nodeSelector": {"nodeSelectorTerms": [term]},
        },
        "reservedFor": [{"resource": "pods", "name": pod_name, "uid": f"uid-{pod_name}"}],
    }


def test_kgpu_explain_names_the_card_quota_that_holds_a_dra_pod() -> None:
    from kgpu.kube.explain.explanation import explain_from_objects
    from tests.dra_fixtures import claim, inventory
    from tests.kube_objects import SCHEDULER, node_obj, pod_obj

    selector = f"device.attributes['gpu.nvidia.com'].productName == '{H100}'"
    h100 = [{"name": "g", "exactly": exactly("gpu.nvidia.com", selector)}]
    inv = inventory(
        [slice_("h0", *[gpu(i, product=H100) for i in range(4)])],
        [
            claim("held-0", h100, status=_held_status("h0", "gpu-0", "old-0")),
            claim("held-1", h100, status=_held_status("h0", "gpu-1", "old-1")),
            claim("wanted", h100),
        ],
    )

    def claiming(name: str, claim_name: str, node_name: str = "") -> Obj:
        obj = pod_obj(name, "ml", node=node_name)
        obj["metadata"]["labels"] = {"kgpu.io/queue": "team"}
        obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
        obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
        return obj

    pods = [
        claiming("old-0", "held-0", "h0"),
        claiming("old-1", "held-1", "h0"),
        claiming("new", "wanted"),
    ]
    nodes = [node_obj("h0", gpus=0)]
    queue = _queue("team", {H100_CARD: 2})
    answer = explain_from_objects(pods[2], nodes, pods, SCHEDULER, queues=[queue], dra=inv)
    assert answer.summary == (
        f"Pod ml/new is pending: queue team: {H100_CARD} requested 1, allocated 2, quota 2"
    )

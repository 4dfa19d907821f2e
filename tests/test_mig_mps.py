"""MIG instances and MPS replicas as their own card kinds: Volcano's card names, placement
on the nodes that offer them, and ``volcano.sh/card.name: "A|B"`` tried in the written order."""

from __future__ import annotations

from kgpu.kube.objects.node_pod import node_from_k8s, pod_from_k8s
from kgpu.model.card import node_cards
from kgpu.model.gpu import mig_instances, mps_replicas
from kgpu.model.node import NodeInfo
from kgpu.model.queue import QueueSpec, queue_from_annotation
from tests.builders import make_node, make_pod
from tests.session_harness import Snap, binds, card, pending
from tests.test_convert import annotate, edited, k8s_node, k8s_pod, labels

A100 = "NVIDIA-A100-80GB"
H100 = "NVIDIA-H100-80GB"
A100_MIG = f"{A100}/mig-1g.10gb-mixed"
H100_MIG = f"{H100}/mig-1g.10gb-mixed"
A100_MPS = f"{A100}/mps-80g*1/8"
GI = 1024


def test_card_names_follow_volcanos_rules_from_kubernetes_nodes() -> None:
    gfd = {"nvidia.com/gpu.product": A100, "nvidia.com/gpu.memory": "81920"}
    whole = node_from_k8s(edited(k8s_node(**{"nvidia.com/gpu": "8"}), labels(**gfd)))
    mps = node_from_k8s(
        edited(
            k8s_node(**{"nvidia.com/gpu.shared": "64"}),
            labels(**gfd, **{"nvidia.com/gpu.replicas": "8", "nvidia.com/gpu.count": "8"}),
        )
    )
    mig = node_from_k8s(
        edited(
            k8s_node(**{"nvidia.com/gpu": "0", "nvidia.com/mig-1g.5gb": "7"}),
            labels(**gfd, **{"nvidia.com/mig-1g.5gb.count": "7"}),
        )
    )
    names = [[c.name for c in node_cards(n.labels, n.gpu_count)] for n in (whole, mps, mig)]
    assert names == [[A100], [A100_MPS.replace("1g.10gb", "")], [f"{A100}/mig-1g.5gb-mixed"]]
    assert (mps.gpu_count, mps.gpu_replicas, mig.mig) == (8, 8, (("1g.5gb", 7),))


def _mig_node(name: str, product: str, slices: int = 7) -> NodeInfo:
    return (
        make_node(name)
        .gpus(0, product, 0)
        .mig_slices("1g.10gb", slices)
        .label("nvidia.com/gpu.product", product)
        .label("nvidia.com/mig-1g.10gb.count", str(slices))
        .build()
    )


def _mps_node(name: str) -> NodeInfo:
    return (
        make_node(name)
        .gpus(2, A100, 81_920)
        .replicas(8)
        .label("nvidia.com/gpu.product", A100)
        .label("nvidia.com/gpu.memory", "81920")
        .label("nvidia.com/gpu.replicas", "8")
        .build()
    )


def _queue(quota: str) -> QueueSpec:
    return queue_from_annotation(QueueSpec("team-a", limit={"cpu": 100_000}), quota)


def test_mig_cards_are_tried_in_the_written_order() -> None:
    """H100's MIG card first, while it has instances left, then A100's."""
    snap = Snap(
        [_mig_node("a100", A100), _mig_node("h100", H100, slices=2)],
        queues=[_queue(f'{{"{A100_MIG}": 7, "{H100_MIG}": 7}}')],
    )
    for i in range(4):
        pod = make_pod(f"infer-{i}").cpu(500).memory(GI).request(mig_instances("1g.10gb"))
        snap.pending(card(pod, f"{H100_MIG}|{A100_MIG}"), queue="team-a")
    result = snap.run()
    assert binds(result) == [
        ("infer-0", "h100"),
        ("infer-1", "h100"),
        ("infer-2", "a100"),
        ("infer-3", "a100"),
    ]
    assert snap.state.mig_free.tolist() == [[5], [0]]
    assert result.allocated["team-a"] == {
        **result.allocated["team-a"],
        H100_MIG: 2000,
        A100_MIG: 2000,
    }


def test_mps_replicas_share_gpus_split_eight_ways() -> None:
    snap = Snap([_mps_node("mps")], queues=[_queue(f'{{"{A100_MPS}": 32}}')])
    for i in range(17):
        pod = make_pod(f"infer-{i:02}").cpu(500).memory(GI).request(mps_replicas(1))
        snap.pending(card(pod, A100_MPS), queue="team-a")
    result = snap.run()
    assert len(result.binds) == 16  # 2 GPUs × 8 replicas
    assert snap.state.node_gpus_free(0) == [0, 0]
    assert snap.state.node_gpus_memory_free(0) == [0, 0]  # 8 × 10240 MiB of 81920
    assert pending(result) == {
        "infer-16": "0/1 nodes are available: 1 node(s) had no single GPU with enough free share."
    }


def test_mig_and_mps_requests_only_fit_nodes_that_offer_them() -> None:
    whole = make_node("whole").gpus(8, A100, 81_920).build()
    snap = Snap([whole, _mig_node("mig", A100), _mps_node("mps")])
    snap.pending(make_pod("slice").request(mig_instances("1g.10gb", 3)))
    snap.pending(make_pod("replica").request(mps_replicas(2)))
    snap.pending(make_pod("too-many").request(mig_instances("1g.10gb", 8)))
    result = snap.run(plugins=("priority", "gang"))
    assert sorted(binds(result)) == [("replica", "mps"), ("slice", "mig")]
    assert pending(result)["too-many"] == (
        "0/3 nodes are available: 2 node(s) had no MIG instances of the profile, "
        "1 insufficient MIG instances."
    )
    assert snap.state.node_gpus_free(2) == [750, 1000]  # 2 replicas of 8 = 250 milli


def test_pods_read_from_kubernetes_objects_place_the_same() -> None:
    pod = pod_from_k8s(
        edited(
            k8s_pod(**{"nvidia.com/mig-1g.10gb": "1"}),
            annotate(**{"volcano.sh/card.name": f"{H100_MIG}|{A100_MIG}"}),
        )
    )
    assert pod.gpu == mig_instances("1g.10gb", 1, (H100, A100))
    snap = Snap([_mig_node("a100", A100)])
    snap.pending(pod)
    result = snap.run(plugins=("priority", "gang"))
    assert binds(result) == [("p", "a100")]  # no quota plugin: any allowed product

"""The autoscale planner: pending GPU pods in, whole-GPU trigger specs out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kgpu.autoscale.demand import ActiveTrigger, UnplacedPod
from kgpu.autoscale.planner import Plan, PlannerConfig, plan
from kgpu.model.nodepool import CATALOGUE, NodePool, NodeRequirement
from kgpu.model.taints import Effect, Taint
from tests.builders import PodBuilder, make_pod

A100 = "NVIDIA-A100-SXM4-80GB"
L4 = "NVIDIA-L4"
GPU_TAINT = Taint("nvidia.com/gpu", "true", Effect.NO_SCHEDULE)

A100_POOL = NodePool(
    "gpu-a100", (CATALOGUE["p4de.24xlarge"],), labels=(("team", "ml"),), taints=(GPU_TAINT,)
)
L4_POOL = NodePool(
    "gpu-l4",
    (CATALOGUE["g6.xlarge"], CATALOGUE["g6.12xlarge"], CATALOGUE["g6.48xlarge"]),
    taints=(GPU_TAINT,),
)
POOLS = PlannerConfig(pools=(A100_POOL, L4_POOL))


def gpu_pod(name: str) -> PodBuilder:
    return make_pod(name).tolerate("nvidia.com/gpu", operator="Exists")


def pending(*builders: PodBuilder, gang: str = "") -> list[UnplacedPod]:
    return [UnplacedPod(b.build(), gang=gang) for b in builders]


def shapes(result: Plan) -> list[tuple[str, int, list[str]]]:
    """(pool, GPUs, pod names) of each trigger, in plan order."""
    return [
        (t.group.target.pool, t.gpus, [k.split("/")[1] for k in t.pod_keys])
        for t in result.triggers
    ]


# (case, pods, expected triggers as (pool, GPUs, pods))
PACKING_CASES = [
    (
        "two halves make one GPU",
        pending(gpu_pod("a").share(500, A100), gpu_pod("b").share(500, A100)),
        [("gpu-a100", 1, ["a", "b"])],
    ),
    (
        "0.7 and 0.5 make two GPUs on one node",
        pending(gpu_pod("a").share(700, A100), gpu_pod("b").share(500, A100)),
        [("gpu-a100", 2, ["a", "b"])],
    ),
    (
        "largest shares first: 0.3, 0.7, 0.6, 0.4 make two GPUs",
        pending(
            *(gpu_pod(n).share(m, A100) for n, m in zip("abcd", (300, 700, 600, 400), strict=True))
        ),
        [("gpu-a100", 2, ["b", "a", "c", "d"])],
    ),
    (
        "a multi-GPU pod is planned as it is",
        pending(gpu_pod("big").gpus(4, A100)),
        [("gpu-a100", 4, ["big"])],
    ),
    (
        "three 4-GPU pods need a second 8-GPU node",
        pending(*(gpu_pod(f"p{i}").gpus(4, A100) for i in range(3))),
        [("gpu-a100", 8, ["p0", "p1"]), ("gpu-a100", 4, ["p2"])],
    ),
    (
        "20 single GPUs split per 8-GPU node",
        pending(*(gpu_pod(f"p{i:02}").gpus(1, A100) for i in range(20))),
        [
            ("gpu-a100", 8, [f"p{i:02}" for i in range(8)]),
            ("gpu-a100", 8, [f"p{i:02}" for i in range(8, 16)]),
            ("gpu-a100", 4, [f"p{i:02}" for i in range(16, 20)]),
        ],
    ),
    (
        "a 4-GPU pod and ten halves: 4 + 4 GPUs on one node, 1 on the next",
        pending(
            gpu_pod("four").gpus(4, A100),
            *(gpu_pod(f"h{i}").share(500, A100) for i in range(10)),
        ),
        [
            ("gpu-a100", 8, ["four", "h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7"]),
            ("gpu-a100", 1, ["h8", "h9"]),
        ],
    ),
    (
        "card names pick the pool; alternatives in the user's order",
        pending(gpu_pod("l4").gpus(1, L4), gpu_pod("either").gpus(1, "NVIDIA-H100", L4, A100)),
        [("gpu-l4", 2, ["either", "l4"])],
    ),
    (
        "a gpu.product node selector picks the pool like a card name",
        pending(gpu_pod("sel").gpus(2).selector("nvidia.com/gpu.product", L4)),
        [("gpu-l4", 2, ["sel"])],
    ),
]


@pytest.mark.parametrize(
    ("pods", "expected"), [c[1:] for c in PACKING_CASES], ids=[c[0] for c in PACKING_CASES]
)
def test_demand_is_packed_into_whole_gpus_and_nodes(
    pods: list[UnplacedPod], expected: list[tuple[str, int, list[str]]]
) -> None:
    result = plan(pods, POOLS)
    assert shapes(result) == expected
    assert result.unplannable == []


def test_a_pool_target_names_its_instance_types_largest_first() -> None:
    [trigger] = plan(pending(gpu_pod("a").gpus(1, L4)), POOLS).triggers
    target = trigger.group.target
    assert target.instance_types == ("g6.48xlarge", "g6.12xlarge", "g6.xlarge")
    assert (target.node_gpus, target.model, target.gpu_memory_mib) == (8, L4, 24576)


def test_without_pools_each_unit_is_its_own_trigger() -> None:
    result = plan(
        pending(gpu_pod("a").share(700, A100), gpu_pod("b").share(500, A100)), PlannerConfig()
    )
    assert shapes(result) == [("", 1, ["a"]), ("", 1, ["b"])]
    assert result.triggers[0].group.target.models == (A100,)


def test_memory_only_pods_take_their_share_of_the_target_gpu_memory() -> None:
    # 20 GiB of an 80 GiB A100 is a quarter: four make one GPU, a fifth a second one.
    pods = [
        UnplacedPod(gpu_pod(f"m{i}").selector("nvidia.com/gpu.product", A100).build(), 20480)
        for i in range(5)
    ]
    result = plan(pods, POOLS)
    assert [(d.milli, d.gpu_memory_mib) for d in result.triggers[0].pods][:1] == [(250, 20480)]
    assert shapes(result) == [("gpu-a100", 2, ["m0", "m1", "m2", "m3", "m4"])]


@pytest.mark.parametrize(("ratio", "pods", "gpus"), [(0.1, 10, 1), (0.1, 11, 2), (0.25, 5, 2)])
def test_memory_only_pods_of_unknown_model_take_the_configured_ratio(
    ratio: float, pods: int, gpus: int
) -> None:
    many = [UnplacedPod(make_pod(f"m{i}").build(), gpu_memory_mib=1000) for i in range(pods)]
    result = plan(many, PlannerConfig(gpu_memory_to_fraction_ratio=ratio))
    assert sum(t.gpus for t in result.triggers) == gpus
    assert {d.milli for t in result.triggers for d in t.pods} == {round(ratio * 1000)}


def test_a_memory_request_larger_than_the_gpu_cannot_be_planned() -> None:
    pod = UnplacedPod(gpu_pod("m").selector("nvidia.com/gpu.product", L4).build(), 40000)
    result = plan([pod], POOLS)
    assert result.triggers == []
    assert result.unplannable[0].reason == (
        "no NodePool can launch a node for it (gpu-a100: no instance type with NVIDIA-L4 GPUs; "
        "gpu-l4: its largest NVIDIA-L4 instance type g6.48xlarge has 24576 MiB per GPU, "
        "the pod asks 40000 MiB)"
    )


def test_demand_is_grouped_by_selector_and_tolerations() -> None:
    pods = pending(
        gpu_pod("a").share(500, A100),
        gpu_pod("b").share(500, A100).selector("team", "ml"),
        gpu_pod("c").share(500, A100).tolerate("spot", operator="Exists"),
        gpu_pod("d").share(500, A100),
    )
    result = plan(pods, POOLS)
    assert shapes(result) == [
        ("gpu-a100", 1, ["a", "d"]),
        ("gpu-a100", 1, ["b"]),
        ("gpu-a100", 1, ["c"]),
    ]
    assert result.triggers[1].group.node_selector == (("team", "ml"),)


UNPLANNABLE_CASES = [
    (
        "no pool has the model",
        gpu_pod("h").gpus(1, "NVIDIA-H100"),
        "no NodePool can launch a node for it (gpu-a100: no instance type with NVIDIA-H100 "
        "GPUs; gpu-l4: no instance type with NVIDIA-H100 GPUs)",
    ),
    (
        "more GPUs than any node has",
        gpu_pod("nine").gpus(9, A100),
        "no NodePool can launch a node for it (gpu-a100: its largest NVIDIA-A100-SXM4-80GB "
        "instance type p4de.24xlarge has 8 GPUs, the pod asks 9; gpu-l4: no instance type "
        "with NVIDIA-A100-SXM4-80GB GPUs)",
    ),
    (
        "the pools' taint is not tolerated",
        make_pod("t").gpus(1, A100),
        "no NodePool can launch a node for it (gpu-a100: untolerated taint "
        "nvidia.com/gpu=true:NoSchedule; gpu-l4: untolerated taint nvidia.com/gpu=true:NoSchedule)",
    ),
    (
        "a label no pool sets",
        gpu_pod("s").gpus(1, A100).selector("rack", "r1"),
        "no NodePool can launch a node for it (gpu-a100: its nodes are not labelled rack=r1; "
        "gpu-l4: its nodes are not labelled rack=r1)",
    ),
    (
        "a selector that contradicts the card names",
        gpu_pod("c").gpus(1, A100).selector("nvidia.com/gpu.product", L4),
        "its nvidia.com/gpu.product node selector or affinity allows none of its card names "
        "NVIDIA-A100-SXM4-80GB",
    ),
]


@pytest.mark.parametrize(
    ("pod", "reason"), [c[1:] for c in UNPLANNABLE_CASES], ids=[c[0] for c in UNPLANNABLE_CASES]
)
def test_pods_no_pool_can_hold_say_why(pod: PodBuilder, reason: str) -> None:
    result = plan(pending(pod), POOLS)
    assert result.triggers == []
    assert [(u.pod, u.reason) for u in result.unplannable] == [(pod.build().key, reason)]


def test_a_gang_counts_as_a_whole() -> None:
    members = pending(
        gpu_pod("w0").gpus(8, A100), gpu_pod("w1").gpus(8, A100), gang="default/train"
    )
    assert shapes(plan(members, POOLS)) == [("gpu-a100", 8, ["w0"]), ("gpu-a100", 8, ["w1"])]
    broken = [*members, *pending(gpu_pod("w2").gpus(9, A100), gang="default/train")]
    result = plan(broken, POOLS)
    assert result.triggers == []
    assert [u.pod for u in result.unplannable] == ["default/w0", "default/w1", "default/w2"]
    assert result.unplannable[0].reason.startswith(
        "gang default/train: member default/w2 cannot be planned: no NodePool can launch"
    )


def test_pods_without_gpus_are_left_to_the_autoscaler() -> None:
    result = plan(pending(make_pod("cpu")), POOLS)
    assert (result.triggers, result.unplannable, result.covered) == ([], [], {})


def test_demand_covered_by_an_active_trigger_gets_no_second_one() -> None:
    first = pending(gpu_pod("a").share(500, A100), gpu_pod("b").share(500, A100))
    [trigger] = plan(first, POOLS).triggers
    active = [ActiveTrigger(trigger.name, trigger.group.id, trigger.pod_keys, trigger.gpus)]
    again = plan(first, POOLS, active)
    assert again.triggers == []
    assert again.covered == {"default/a": trigger.name, "default/b": trigger.name}
    more = plan([*first, *pending(gpu_pod("c").share(500, A100))], POOLS, active)
    assert shapes(more) == [("gpu-a100", 1, ["c"])]


def test_the_same_demand_gets_the_same_names() -> None:
    pods = pending(*(gpu_pod(f"p{i}").gpus(4, A100) for i in range(3)))
    names = [t.name for t in plan(pods, POOLS).triggers]
    assert names == [t.name for t in plan(list(reversed(pods)), POOLS).triggers]
    assert len(set(names)) == 2
    assert all(n.startswith("kgpu-trigger-nvidia-a100-sxm4-80gb-") for n in names)


def test_pool_weight_and_affinity_narrow_the_target() -> None:
    heavy = NodePool("l4-heavy", (CATALOGUE["g6.12xlarge"],), taints=(GPU_TAINT,), weight=10)
    config = PlannerConfig(pools=(L4_POOL, heavy))
    [trigger] = plan(pending(gpu_pod("a").gpus(1, L4)), config).triggers
    assert trigger.group.target.pool == "l4-heavy"
    only_xl = (NodeRequirement("node.kubernetes.io/instance-type", "In", ("g6.xlarge",)),)
    pod = UnplacedPod(gpu_pod("b").gpus(1, L4).build(), affinity=(only_xl,))
    [trigger] = plan([pod], config).triggers
    assert (trigger.group.target.pool, trigger.group.target.instance_types) == (
        "gpu-l4",
        ("g6.xlarge",),
    )


def test_room_left_in_an_active_trigger_by_pods_placed_elsewhere_is_used_first() -> None:
    first = pending(gpu_pod("a").gpus(4, A100), gpu_pod("b").gpus(4, A100))
    [trigger] = plan(first, POOLS).triggers
    active = [
        ActiveTrigger(
            trigger.name,
            trigger.group.id,
            trigger.pod_keys,
            trigger.gpus,
            trigger.cpu_milli,
            trigger.memory_mib,
        )
    ]
    # "a" was placed elsewhere: its 4 GPUs in the trigger take "c", then two halves.
    later = [
        first[1],
        *pending(gpu_pod("c").gpus(4, A100), gpu_pod("h1").share(500, A100)),
        *pending(gpu_pod("h2").share(500, A100)),
    ]
    result = plan(later, POOLS, active)
    assert result.covered == {"default/b": trigger.name, "default/c": trigger.name}
    assert shapes(result) == [("gpu-a100", 1, ["h1", "h2"])]
    # Without "b" either, a half fits as well; the room's CPU (1000m a pod) ends there.
    assert shapes(plan(later[1:], POOLS, active)) == [("gpu-a100", 1, ["h2"])]
    # A trigger of unknown requests lends nothing.
    blind = [replace(active[0], cpu_milli=None)]
    assert shapes(plan(later[1:], POOLS, blind)) == [("gpu-a100", 5, ["c", "h1", "h2"])]

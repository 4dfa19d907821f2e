"""The DRA allocator: ExactCount and All, matchAttribute, firstAvailable, devices already
taken, consumable capacity, where slices reach, and the reasons it gives."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from kgpu.dra.allocator import MAX_STEPS, Allocated, Refused
from kgpu.dra.inventory import DraInventory
from kgpu.kube.objects.dra_objects import resource_slice_from_k8s
from kgpu.model.dra import PodClaim, device_id
from tests.dra_fixtures import A100, claim, exactly, gpu, inventory, mig, slice_, template, wants

MEM40 = "device.capacity['gpu.nvidia.com'].memory >= quantity('40Gi')"


def devices(outcome: Allocated | Refused, key: str = "ml/c") -> list[str]:
    assert isinstance(outcome, Allocated), outcome
    return [f"{r.request}={r.device}" for r in outcome.allocations[key].results]


def refused(outcome: Allocated | Refused) -> str:
    assert isinstance(outcome, Refused), outcome
    return outcome.reason


def one(
    requests: list[dict[str, Any]],
    constraints: list[dict[str, Any]] | None = None,
    *slices: dict[str, Any],
) -> DraInventory:
    inv = inventory(
        list(slices) or [slice_("n1", gpu(0), gpu(1), gpu(2, A100, "40Gi", "Ampere"))],
        [claim("c", requests, constraints)],
    )
    wants(inv, "p", "c")
    return inv


def test_exact_count_takes_the_first_fitting_devices_in_order() -> None:
    inv = one([{"name": "g", "exactly": exactly(count=2)}])
    assert devices(inv.try_allocate("ml/p", "n1", {})) == ["g=gpu-0", "g=gpu-1"]


def test_request_selectors_and_class_selectors_both_apply() -> None:
    inv = one(
        [
            {
                "name": "g",
                "exactly": exactly(
                    "gpu.nvidia.com", "device.attributes['gpu.nvidia.com'].architecture == 'Ampere'"
                ),
            }
        ]
    )
    assert devices(inv.try_allocate("ml/p", "n1", {})) == ["g=gpu-2"]
    inv = one([{"name": "g", "exactly": exactly("mig.nvidia.com")}])
    assert refused(inv.try_allocate("ml/p", "n1", {})) == (
        'claim ml/c request "g": needs 1 device(s), 0 of 3 fit (3 class "mig.nvidia.com" selector #0 false)'
    )


def test_too_few_devices_says_how_many_fit_and_why_the_others_do_not() -> None:
    inv = one(
        [
            {
                "name": "g",
                "exactly": exactly(
                    "gpu.nvidia.com",
                    "device.capacity['gpu.nvidia.com'].memory > quantity('40Gi')",
                    count=3,
                ),
            }
        ]
    )
    assert refused(inv.try_allocate("ml/p", "n1", {})) == (
        'claim ml/c request "g": needs 3 device(s), 2 of 3 fit (1 request selector #0 false)'
    )
    inv = one([{"name": "g", "exactly": exactly(count=4)}])
    assert refused(inv.try_allocate("ml/p", "n1", {})) == (
        'claim ml/c request "g": needs 4 device(s), 3 of 3 fit (too few on the node)'
    )


def test_a_selector_error_on_a_device_is_no_match_and_is_named() -> None:
    inv = one(
        [
            {
                "name": "g",
                "exactly": exactly(
                    "gpu.nvidia.com", "device.attributes['gpu.nvidia.com'].parentUUID != ''"
                ),
            }
        ]
    )
    reason = refused(inv.try_allocate("ml/p", "n1", {}))
    assert reason.startswith(
        'claim ml/c request "g": needs 1 device(s), 0 of 3 fit (3 request selector #0 failed); '
    )
    assert (
        "request selector #0 on device gpu.nvidia.com/n1/gpu-0: CEL runtime error: no such key"
        in reason
    )


def test_all_takes_every_fitting_device_and_fails_if_one_is_taken() -> None:
    inv = inventory(
        [slice_("n1", gpu(0), gpu(1), gpu(2, A100, "40Gi", "Ampere"))],
        [
            claim(
                "c",
                [
                    {
                        "name": "g",
                        "exactly": exactly(
                            "gpu.nvidia.com",
                            MEM40
                            + " && device.attributes['gpu.nvidia.com'].architecture == 'Hopper'",
                            allocationMode="All",
                        ),
                    }
                ],
            ),
            claim("one", [{"name": "g", "exactly": exactly()}]),
        ],
    )
    wants(inv, "p", "c")
    wants(inv, "q", "one")
    assert devices(inv.try_allocate("ml/p", "n1", {})) == ["g=gpu-0", "g=gpu-1"]
    assert isinstance(inv.record("ml/q", "n1", {}), Allocated)  # takes gpu-0
    assert refused(inv.try_allocate("ml/p", "n1", {})) == (
        'claim ml/c request "g": allocationMode All, and 1 matching device(s) are allocated to another claim'
    )


def test_all_over_a_pool_not_fully_published_is_refused() -> None:
    inv = one(
        [{"name": "g", "exactly": exactly(allocationMode="All")}],
        None,
        slice_("n1", gpu(0), count=2),
    )
    assert refused(inv.try_allocate("ml/p", "n1", {})) == (
        'claim ml/c request "g": allocationMode All over a pool whose slices are not all published'
    )
    # ExactCount uses what is published.
    inv = one([{"name": "g", "exactly": exactly()}], None, slice_("n1", gpu(0), count=2))
    assert devices(inv.try_allocate("ml/p", "n1", {})) == ["g=gpu-0"]


def test_match_attribute_keeps_mig_devices_on_one_parent_gpu() -> None:
    migs = slice_("n1", mig(0, 0), mig(1, 0), mig(1, 1), mig(2, 0))
    requests = [
        {"name": "a", "exactly": exactly("mig.nvidia.com")},
        {"name": "b", "exactly": exactly("mig.nvidia.com")},
    ]
    same_parent = [{"requests": ["a", "b"], "matchAttribute": "gpu.nvidia.com/parentUUID"}]
    inv = one(requests, same_parent, migs)
    # gpu-0's only MIG device has no sibling: the search backtracks to gpu-1's two.
    assert devices(inv.try_allocate("ml/p", "n1", {})) == [
        "a=gpu-1-mig-3g20gb-0",
        "b=gpu-1-mig-3g20gb-1",
    ]
    inv = one(requests, same_parent, slice_("n1", mig(0, 0), mig(1, 0)))
    assert refused(inv.try_allocate("ml/p", "n1", {})) == (
        'claim ml/c: no choice of devices gives a, b the same "gpu.nvidia.com/parentUUID"'
    )


def test_match_attribute_over_all_requests_when_none_is_named() -> None:
    inv = one(
        [{"name": "g", "exactly": exactly(count=2)}],
        [{"matchAttribute": "gpu.nvidia.com/architecture"}],
        slice_("n1", gpu(0, A100, "40Gi", "Ampere"), gpu(1), gpu(2)),
    )
    assert devices(inv.try_allocate("ml/p", "n1", {})) == ["g=gpu-1", "g=gpu-2"]


def test_a_device_without_the_attribute_breaks_the_constraint() -> None:
    inv = one(
        [{"name": "g", "exactly": exactly(count=2)}],
        [{"matchAttribute": "gpu.nvidia.com/parentUUID"}],
    )
    assert 'the same "gpu.nvidia.com/parentUUID"' in refused(inv.try_allocate("ml/p", "n1", {}))


def test_first_available_takes_the_first_alternative_that_works() -> None:
    requests = [
        {
            "name": "m",
            "firstAvailable": [
                {
                    "name": "small",
                    **exactly(
                        "mig.nvidia.com", "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'"
                    ),
                },
                {
                    "name": "medium",
                    **exactly(
                        "mig.nvidia.com", "device.attributes['gpu.nvidia.com'].profile == '3g.20gb'"
                    ),
                },
                {"name": "whole", **exactly()},
            ],
        }
    ]
    inv = one(
        requests, None, slice_("n1", gpu(0), mig(1, 0, "3g.20gb"), mig(1, 1, "1g.5gb", "5Gi"))
    )
    assert devices(inv.try_allocate("ml/p", "n1", {})) == ["m/small=gpu-1-mig-1g5gb-1"]
    inv = one(requests, None, slice_("n1", gpu(0), mig(1, 0, "3g.20gb")))
    assert devices(inv.try_allocate("ml/p", "n1", {})) == ["m/medium=gpu-1-mig-3g20gb-0"]
    inv = one(requests, None, slice_("n1", gpu(0)))
    assert devices(inv.try_allocate("ml/p", "n1", {})) == ["m/whole=gpu-0"]
    inv = one(requests, None, slice_("n1"))
    reason = refused(inv.try_allocate("ml/p", "n1", {}))
    assert reason.count("claim ml/c request") == 3 and '"m/whole"' in reason


def test_first_available_backtracks_when_a_later_request_needs_the_device() -> None:
    requests: list[dict[str, Any]] = [
        {
            "name": "any",
            "firstAvailable": [
                {"name": "h", **exactly()},
                {"name": "m", **exactly("mig.nvidia.com")},
            ],
        },
        {"name": "whole", "exactly": exactly()},
    ]
    inv = one(requests, None, slice_("n1", gpu(0), mig(1, 0)))
    assert devices(inv.try_allocate("ml/p", "n1", {})) == [
        "any/m=gpu-1-mig-3g20gb-0",
        "whole=gpu-0",
    ]


def test_a_device_allocated_to_one_claim_is_refused_to_another() -> None:
    inv = inventory(
        [slice_("n1", gpu(0))],
        [
            claim("a", [{"name": "g", "exactly": exactly()}]),
            claim("b", [{"name": "g", "exactly": exactly()}]),
        ],
    )
    wants(inv, "p", "a")
    wants(inv, "q", "b")
    assert devices(inv.record("ml/p", "n1", {}), "ml/a") == ["g=gpu-0"]
    assert refused(inv.try_allocate("ml/q", "n1", {})) == (
        'claim ml/b request "g": needs 1 device(s), 0 of 1 fit (1 allocated to another claim)'
    )
    # Released when its pod goes, the device serves the other claim.
    assert inv.release("ml/p") == ["ml/a"]
    assert devices(inv.record("ml/q", "n1", {}), "ml/b") == ["g=gpu-0"]


def test_allocations_read_from_claims_count_as_taken() -> None:
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "g", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "old", "uid": "u"}],
    }
    inv = inventory(
        [slice_("n1", gpu(0), gpu(1))],
        [
            claim("held", [{"name": "g", "exactly": exactly()}], status=status),
            claim("c", [{"name": "g", "exactly": exactly()}]),
        ],
    )
    wants(inv, "p", "c")
    assert devices(inv.try_allocate("ml/p", "n1", {})) == ["g=gpu-1"]
    # A pod sharing the allocated claim goes where it is allocated, and nowhere else.
    wants(inv, "s", "held")
    assert devices(inv.try_allocate("ml/s", "n1", {}), "ml/held") == ["g=gpu-0"]
    assert refused(inv.try_allocate("ml/s", "n2", {})) == "claim ml/held is allocated on node n1"


def test_two_claims_of_one_pod_get_distinct_devices() -> None:
    inv = inventory(
        [slice_("n1", gpu(0), gpu(1))],
        [
            claim("a", [{"name": "g", "exactly": exactly()}]),
            claim("b", [{"name": "g", "exactly": exactly()}]),
        ],
    )
    wants(inv, "p", "a", "b")
    outcome = inv.try_allocate("ml/p", "n1", {})
    assert devices(outcome, "ml/a") == ["g=gpu-0"] and devices(outcome, "ml/b") == ["g=gpu-1"]
    inv = inventory(
        [slice_("n1", gpu(0))],
        [
            claim("a", [{"name": "g", "exactly": exactly()}]),
            claim("b", [{"name": "g", "exactly": exactly()}]),
        ],
    )
    wants(inv, "p", "a", "b")
    assert refused(inv.try_allocate("ml/p", "n1", {})) == (
        "the claims' requests cannot all have distinct devices on this node"
    )


def test_where_slices_reach() -> None:
    net = slice_("fabric", gpu(0), where={"allNodes": True}, pool="fabric", name="fabric")
    zone = slice_(
        "z",
        gpu(1),
        pool="zone-a",
        name="zone-a",
        where={
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        },
    )
    local = slice_("n1", gpu(2))
    inv = one([{"name": "g", "exactly": exactly(allocationMode="All")}], None, net, zone, local)
    outcome = inv.try_allocate("ml/p", "n1", {"zone": "a"})
    assert devices(outcome) == ["g=gpu-0", "g=gpu-2", "g=gpu-1"]  # pools in name order
    assert isinstance(outcome, Allocated) and outcome.allocations["ml/c"].node_name == "n1"
    assert devices(inv.try_allocate("ml/p", "n2", {"zone": "b"})) == ["g=gpu-0"]
    # Devices every node reaches tie the claim to no node.
    only_net = inv.try_allocate("ml/p", "n2", {})
    assert isinstance(only_net, Allocated) and only_net.allocations["ml/c"].node_name == ""


def test_only_a_pools_newest_generation_counts_and_a_device_named_twice_leaves_it_out() -> None:
    inv = one(
        [{"name": "g", "exactly": exactly(allocationMode="All")}],
        None,
        slice_("n1", gpu(0), gpu(1), generation=1, name="old"),
        slice_("n1", gpu(5), generation=2, name="new"),
    )
    assert devices(inv.try_allocate("ml/p", "n1", {})) == ["g=gpu-5"]
    inv = one(
        [{"name": "g", "exactly": exactly()}],
        None,
        slice_("n1", gpu(0), name="a", count=2),
        slice_("n1", gpu(0), name="b", count=2),
    )
    assert inv.notes == [
        "ResourceSlice pool gpu.nvidia.com/n1 left out: device 'gpu-0' is published twice"
    ]
    assert "0 of 0 fit" in refused(inv.try_allocate("ml/p", "n1", {}))


def test_a_device_published_again_is_judged_by_what_it_now_says() -> None:
    # Verdicts are kept per selector and device: a new generation of the pool (the driver
    # publishing gpu-0 as an A100 now) must be judged afresh, not by the H100's verdict.
    ampere = "device.attributes['gpu.nvidia.com'].architecture == 'Ampere'"
    inv = one(
        [{"name": "g", "exactly": exactly("gpu.nvidia.com", ampere)}], None, slice_("n1", gpu(0))
    )
    assert "0 of 1 fit (1 request selector #0 false)" in refused(inv.try_allocate("ml/p", "n1", {}))
    inv.add_slices(
        [
            resource_slice_from_k8s(
                slice_("n1", gpu(0, A100, "40Gi", "Ampere"), name="n", generation=2)
            )
        ]
    )
    assert devices(inv.try_allocate("ml/p", "n1", {})) == ["g=gpu-0"]


def test_capacity_requests_filter_and_consumable_capacity_shares_a_device() -> None:
    shared = gpu(0)
    shared["allowMultipleAllocations"] = True
    inv = inventory(
        [slice_("n1", shared, gpu(1, A100, "40Gi"))],
        [
            claim(
                n,
                [
                    {
                        "name": "g",
                        "exactly": exactly(
                            capacity={"requests": {"gpu.nvidia.com/memory": "30Gi"}}
                        ),
                    }
                ],
            )
            for n in ("a", "b", "c")
        ],
    )
    for pod, name in (("p", "a"), ("q", "b"), ("r", "c")):
        wants(inv, pod, name)
    first = inv.record("ml/p", "n1", {})
    assert devices(first, "ml/a") == ["g=gpu-0"]
    assert isinstance(first, Allocated)
    assert first.allocations["ml/a"].results[0].consumed == {
        "gpu.nvidia.com/memory": Fraction(30 * 2**30)
    }
    assert devices(inv.record("ml/q", "n1", {}), "ml/b") == ["g=gpu-0"]  # 60 of 80Gi
    # 90Gi would not fit in gpu-0; gpu-1 is not shareable but has 40Gi for one request.
    assert devices(inv.record("ml/r", "n1", {}), "ml/c") == ["g=gpu-1"]
    inv.release("ml/p")
    assert inv.in_use.consumed[device_id("gpu.nvidia.com", "n1", "gpu-0")] == {
        "gpu.nvidia.com/memory": Fraction(30 * 2**30)
    }


def test_templates_make_one_claim_per_pod() -> None:
    inv = inventory(
        [slice_("n1", gpu(0), gpu(1))],
        templates=[template("t", [{"name": "g", "exactly": exactly()}])],
    )
    for pod in ("p", "q", "r"):
        inv.set_pod_claims(f"ml/{pod}", [PodClaim("gpu", template_name="t")])
    assert devices(inv.record("ml/p", "n1", {}), "ml/p-gpu") == ["g=gpu-0"]
    assert devices(inv.record("ml/q", "n1", {}), "ml/q-gpu") == ["g=gpu-1"]
    assert "0 of 2 fit (2 allocated to another claim)" in refused(
        inv.try_allocate("ml/r", "n1", {})
    )
    inv.set_pod_claims("ml/s", [PodClaim("gpu", template_name="missing")])
    assert refused(inv.try_allocate("ml/s", "n1", {})) == (
        'resource claim template ml/missing (pod claim "gpu") does not exist'
    )
    inv.set_pod_claims("ml/u", [PodClaim("gpu", claim_name="nope")])
    assert (
        refused(inv.try_allocate("ml/u", "n1", {}))
        == 'resource claim ml/nope (pod claim "gpu") does not exist'
    )


def test_an_unknown_device_class_is_named() -> None:
    inv = one([{"name": "g", "exactly": exactly("tpu.example.com")}])
    assert refused(inv.try_allocate("ml/p", "n1", {})) == (
        'claim ml/c request "g": device class "tpu.example.com" does not exist'
    )


def test_the_search_is_bounded() -> None:
    # 15 devices, then 16 more, out of 30: no choice works, and without the cap the search
    # would try every one of the C(30, 15) choices of the first request.
    requests = [
        {"name": "a", "exactly": exactly(count=15)},
        {"name": "b", "exactly": exactly(count=16)},
    ]
    inv = one(requests, None, slice_("n1", *[gpu(i) for i in range(30)]))
    assert refused(inv.try_allocate("ml/p", "n1", {})) == (
        f"gave up after trying {MAX_STEPS} devices (the search is bounded)"
    )


@pytest.mark.parametrize("pod", ["p", "q"])
def test_deterministic(pod: str) -> None:
    inv = one([{"name": "g", "exactly": exactly(count=2)}])
    wants(inv, pod, "c")
    assert devices(inv.try_allocate(f"ml/{pod}", "n1", {})) == ["g=gpu-0", "g=gpu-1"]

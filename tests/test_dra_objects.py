"""Reading DRA objects: what the v1 API allows is read, anything else is refused alone with
a message naming the object, the field, the value and what was expected; the examples and
fixtures are valid against Kubernetes 1.34's own schemas."""

from __future__ import annotations

import copy
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kgpu.kube.objects.dra_claim_objects import (
    pod_claims_from_k8s,
    resource_claim_from_k8s,
    resource_claim_template_from_k8s,
)
from kgpu.kube.objects.dra_objects import device_class_from_k8s, resource_slice_from_k8s
from kgpu.kube.objects.fields import ConversionError
from kgpu.model.dra import AllocationMode, PodClaim, parse_semver
from tests.dra_fixtures import GPU_CLASS, MIG_CLASS, claim, exactly, gpu, mig, slice_, template

K8S_VERSION = "1.34.0"
EXAMPLES = Path(__file__).parent.parent / "examples" / "dra"
Obj = dict[str, Any]


def test_kubernetes_validate_knows_resource_k8s_io_v1_in_1_34() -> None:
    assert K8S_VERSION in kubernetes_validate.utils.all_versions()
    # A v1 object is checked against its schema: a typo'd field is refused.
    wrong = copy.deepcopy(GPU_CLASS)
    wrong["spec"]["selector"] = wrong["spec"].pop("selectors")
    with pytest.raises(kubernetes_validate.ValidationError, match="selector"):
        kubernetes_validate.validate(wrong, K8S_VERSION, strict=True)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_the_examples_are_valid_v1_34_objects(path: Path) -> None:
    for obj in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_fixtures_are_valid_v1_34_objects() -> None:
    fixtures = [
        GPU_CLASS,
        MIG_CLASS,
        slice_("n1", gpu(0), gpu(1), mig(2, 0)),
        slice_("net", gpu(0), where={"allNodes": True}),
        claim(
            "c",
            [
                {"name": "a", "exactly": exactly(count=2)},
                {"name": "b", "firstAvailable": [{"name": "x", **exactly("mig.nvidia.com")}]},
            ],
            [{"requests": ["a"], "matchAttribute": "gpu.nvidia.com/productName"}],
        ),
        template("t", [{"name": "a", "exactly": exactly(allocationMode="All")}]),
    ]
    for obj in fixtures:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_a_slice_of_gpus_and_mig_devices_is_read() -> None:
    s = resource_slice_from_k8s(slice_("n1", gpu(0), mig(1, 0)))
    assert (s.driver, s.pool, s.generation, s.slice_count, s.node_name) == (
        "gpu.nvidia.com",
        "n1",
        1,
        1,
        "n1",
    )
    whole, part = s.devices
    # Unqualified names take the driver's domain, as the API defines.
    assert whole.attributes["gpu.nvidia.com/productName"] == "NVIDIA H100 80GB HBM3"
    assert whole.attributes["gpu.nvidia.com/index"] == 0
    assert whole.attributes["gpu.nvidia.com/migEnabled"] is False
    assert whole.attributes["gpu.nvidia.com/driverVersion"] == parse_semver("550.54.15")
    assert whole.capacity == {"gpu.nvidia.com/memory": Fraction(80 * 2**30)}
    assert part.attributes["gpu.nvidia.com/type"] == "mig"
    assert (
        part.attributes["gpu.nvidia.com/parentUUID"] == "GPU-00000001-0000-4000-8000-000000000000"
    )


def test_a_claim_with_every_request_form_is_read() -> None:
    c = resource_claim_from_k8s(
        claim(
            "c",
            [
                {
                    "name": "a",
                    "exactly": exactly(
                        count=2, capacity={"requests": {"gpu.nvidia.com/memory": "10Gi"}}
                    ),
                },
                {"name": "b", "exactly": exactly(allocationMode="All")},
                {
                    "name": "m",
                    "firstAvailable": [
                        {"name": "x", **exactly("mig.nvidia.com")},
                        {"name": "y", **exactly()},
                    ],
                },
            ],
            [{"requests": ["a", "m/x"], "matchAttribute": "gpu.nvidia.com/productName"}],
            status={
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "a",
                                "driver": "gpu.nvidia.com",
                                "pool": "n1",
                                "device": "gpu-0",
                            }
                        ]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                                ]
                            }
                        ]
                    },
                },
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
            },
        )
    )
    a, b, m = c.spec.requests
    assert a.exactly is not None and (a.exactly.count, a.exactly.capacity) == (
        2,
        {"gpu.nvidia.com/memory": Fraction(10 * 2**30)},
    )
    assert b.exactly is not None and b.exactly.mode == AllocationMode.ALL
    assert [s.name for s in m.first_available] == ["x", "y"]
    assert c.spec.constraints[0].requests == ("a", "m/x")
    assert c.allocation is not None and c.allocation.node_name == "n1"
    assert c.reserved_for == ("p",)
    t = resource_claim_template_from_k8s(template("t", [{"name": "a", "exactly": exactly()}]))
    assert t.key == "ml/t" and t.spec.requests[0].name == "a"


def test_a_pods_claims_are_read() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {
            "resourceClaims": [
                {"name": "a", "resourceClaimName": "shared"},
                {"name": "b", "resourceClaimTemplateName": "tmpl"},
            ],
            "containers": [{"name": "c", "resources": {"claims": [{"name": "a"}, {"name": "b"}]}}],
        },
    }
    assert pod_claims_from_k8s(pod) == (
        PodClaim("a", claim_name="shared"),
        PodClaim("b", template_name="tmpl"),
    )


def _set(path: str, value: object) -> Callable[[Obj], None]:
    def change(obj: Obj) -> None:
        *parents, last = path.split(".")
        node: Any = obj
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is _DELETE:
            del node[last]
        elif last.isdigit():
            node[int(last)] = value
        else:
            node[last] = value

    return change


_DELETE = object()
SLICE = slice_("n1", gpu(0), gpu(1))
CLAIM = claim("c", [{"name": "a", "exactly": exactly()}])
POD = {
    "metadata": {"name": "p", "namespace": "ml"},
    "spec": {
        "resourceClaims": [{"name": "a", "resourceClaimName": "c"}],
        "containers": [{"name": "c"}],
    },
}
MALFORMED: list[tuple[str, Obj, Callable[[Obj], Any], Callable[[Obj], None], str]] = [
    (
        "class selector not CEL",
        GPU_CLASS,
        device_class_from_k8s,
        _set("spec.selectors.0.cel.expression", "device.driver =="),
        'DeviceClass gpu.nvidia.com: spec.selectors[0].cel.expression is "device.driver ==", expected a CEL expression kgpu can evaluate; it is not CEL',
    ),
    (
        "class name",
        GPU_CLASS,
        device_class_from_k8s,
        _set("metadata.name", "GPU_Class"),
        'DeviceClass GPU_Class: metadata.name is "GPU_Class", expected a DNS subdomain of at most 253 characters',
    ),
    (
        "too many devices",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.devices", [gpu(i) for i in range(129)]),
        'ResourceSlice n1-gpu.nvidia.com: spec.devices is "129 entries", expected at most 128',
    ),
    (
        "too many attributes",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.devices.0.attributes", {f"a{i}": {"int": i} for i in range(33)}),
        'ResourceSlice n1-gpu.nvidia.com: spec.devices[0].attributes is "34 attributes and capacities", expected at most 32 together',
    ),
    (
        "attribute of two types",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.devices.0.attributes.index", {"int": 0, "string": "0"}),
        'spec.devices[0].attributes[index] is {"int": 0, "string": "0"}, expected exactly one of int, bool, string and version',
    ),
    (
        "string too long",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.devices.0.attributes.productName", {"string": "x" * 65}),
        'spec.devices[0].attributes[productName].string is "'
        + "x" * 65
        + '", expected a string of at most 64 characters',
    ),
    (
        "bad version",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.devices.0.attributes.driverVersion", {"version": "550.54"}),
        'spec.devices[0].attributes[driverVersion].version is "550.54", expected a semantic version (1.2.3) of at most 64 characters',
    ),
    (
        "int as text",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.devices.0.attributes.index", {"int": "0"}),
        'spec.devices[0].attributes[index].int is "0", expected a 64-bit integer',
    ),
    (
        "bad capacity",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.devices.0.capacity.memory", {"value": "lots"}),
        'spec.devices[0].capacity[memory].value is "lots", expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3',
    ),
    (
        "bad attribute name",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.devices.0.attributes", {"gpu.nvidia.com/product-name": {"string": "x"}}),
        "spec.devices[0].attributes is \"gpu.nvidia.com/product-name\", expected a name of at most 32 letters, digits and '_' after the domain",
    ),
    (
        "duplicate device",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.devices.1.name", "gpu-0"),
        'spec.devices[1].name is "gpu-0", expected a name no other device of the slice has',
    ),
    (
        "no node",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.nodeName", _DELETE),
        'ResourceSlice n1-gpu.nvidia.com: spec is "none of nodeName, allNodes, nodeSelector", expected exactly one of nodeName, allNodes (true) and nodeSelector',
    ),
    (
        "two places",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.allNodes", True),
        'spec is "nodeName, allNodes", expected exactly one of nodeName, allNodes (true) and nodeSelector',
    ),
    (
        "negative generation",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.pool.generation", -1),
        "spec.pool.generation is -1, expected an integer from 0 to 9223372036854775807",
    ),
    (
        "partitionable",
        SLICE,
        resource_slice_from_k8s,
        _set("spec.devices.0.consumesCounters", [{"counterSet": "s", "counters": {}}]),
        'spec.devices[0].consumesCounters is [{"counterSet": "s", "counters": {}}], expected unset (an alpha feature of 1.34 kgpu does not read)',
    ),
    (
        "selector operator",
        slice_(
            "net",
            gpu(0),
            where={
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}
                    ]
                }
            },
        ),
        resource_slice_from_k8s,
        lambda o: None,
        'spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].operator is "Near", expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt',
    ),
    (
        "request without class",
        CLAIM,
        resource_claim_from_k8s,
        _set("spec.devices.requests.0.exactly.deviceClassName", _DELETE),
        "ResourceClaim ml/c: spec.devices.requests[0].exactly.deviceClassName is missing, expected a DNS subdomain of at most 253 characters",
    ),
    (
        "both forms",
        CLAIM,
        resource_claim_from_k8s,
        _set("spec.devices.requests.0.firstAvailable", [{"name": "x", **exactly()}]),
        'spec.devices.requests[0] is "both exactly and firstAvailable", expected exactly one of exactly and firstAvailable',
    ),
    (
        "neither form",
        CLAIM,
        resource_claim_from_k8s,
        _set("spec.devices.requests.0.exactly", _DELETE),
        'spec.devices.requests[0] is "neither exactly nor firstAvailable", expected exactly one of exactly and firstAvailable',
    ),
    (
        "count zero",
        CLAIM,
        resource_claim_from_k8s,
        _set("spec.devices.requests.0.exactly.count", 0),
        "spec.devices.requests[0].exactly.count is 0, expected an integer from 1 to 32",
    ),
    (
        "count with All",
        CLAIM,
        resource_claim_from_k8s,
        _set("spec.devices.requests.0.exactly", exactly(allocationMode="All", count=2)),
        "spec.devices.requests[0].exactly.count is 2, expected unset with allocationMode All",
    ),
    (
        "bad mode",
        CLAIM,
        resource_claim_from_k8s,
        _set("spec.devices.requests.0.exactly.allocationMode", "Some"),
        'spec.devices.requests[0].exactly.allocationMode is "Some", expected ExactCount or All',
    ),
    (
        "too many requests",
        CLAIM,
        resource_claim_from_k8s,
        _set("spec.devices.requests", [{"name": f"r{i}", "exactly": exactly()} for i in range(33)]),
        'spec.devices.requests is "33 entries", expected at most 32',
    ),
    (
        "duplicate request",
        CLAIM,
        resource_claim_from_k8s,
        _set("spec.devices.requests", [{"name": "a", "exactly": exactly()}] * 2),
        'spec.devices.requests[1].name is "a", expected a name no other request of the claim has',
    ),
    (
        "too many alternatives",
        CLAIM,
        resource_claim_from_k8s,
        _set(
            "spec.devices.requests.0",
            {"name": "a", "firstAvailable": [{"name": f"s{i}", **exactly()} for i in range(9)]},
        ),
        'spec.devices.requests[0].firstAvailable is "9 entries", expected at most 8',
    ),
    (
        "expression too long",
        CLAIM,
        resource_claim_from_k8s,
        _set("spec.devices.requests.0.exactly", exactly("gpu.nvidia.com", "true" + " " * 10240)),
        "spec.devices.requests[0].exactly.selectors[0].cel.expression is",
    ),
    (
        "constraint on unknown request",
        CLAIM,
        resource_claim_from_k8s,
        _set(
            "spec.devices.constraints",
            [{"requests": ["b"], "matchAttribute": "gpu.nvidia.com/uuid"}],
        ),
        'spec.devices.constraints[0].requests is ["b"], expected names of the claim\'s requests (or request/alternative)',
    ),
    (
        "unqualified matchAttribute",
        CLAIM,
        resource_claim_from_k8s,
        _set("spec.devices.constraints", [{"matchAttribute": "uuid"}]),
        "spec.devices.constraints[0].matchAttribute is \"uuid\", expected a domain (a DNS subdomain of at most 63) before '/'",
    ),
    (
        "admin access",
        CLAIM,
        resource_claim_from_k8s,
        _set("spec.devices.requests.0.exactly.adminAccess", True),
        "spec.devices.requests[0].exactly.adminAccess is true, expected unset (kgpu does not allocate admin access)",
    ),
    (
        "allocation on many nodes",
        CLAIM,
        resource_claim_from_k8s,
        _set(
            "status",
            {
                "allocation": {
                    "devices": {"results": []},
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["a"]}
                                ]
                            }
                        ]
                    },
                }
            },
        ),
        "status.allocation.nodeSelector is",
    ),
    (
        "result without device",
        CLAIM,
        resource_claim_from_k8s,
        _set(
            "status",
            {
                "allocation": {
                    "devices": {"results": [{"request": "a", "driver": "d", "pool": "p"}]}
                }
            },
        ),
        "status.allocation.devices.results[0].device is missing, expected a name of at most 253 characters",
    ),
    (
        "pod claim of both kinds",
        POD,
        pod_claims_from_k8s,
        _set("spec.resourceClaims.0.resourceClaimTemplateName", "t"),
        'Pod ml/p: spec.resourceClaims[0] is {"name": "a", "resourceClaimName": "c", "resourceClaimTemplateName": "t"}, expected exactly one of resourceClaimName and resourceClaimTemplateName',
    ),
    (
        "container claims an unknown entry",
        POD,
        pod_claims_from_k8s,
        _set("spec.containers.0.resources", {"claims": [{"name": "b"}]}),
        'Pod ml/p: spec.containers[0].resources.claims[0].name is "b", expected the name of an entry of spec.resourceClaims',
    ),
    (
        "pod claims not a list",
        POD,
        pod_claims_from_k8s,
        _set("spec.resourceClaims", {"a": "c"}),
        'Pod ml/p: spec.resourceClaims is {"a": "c"}, expected a list',
    ),
]


@pytest.mark.parametrize(
    ("base", "read", "change", "message"),
    [m[1:] for m in MALFORMED],
    ids=[m[0] for m in MALFORMED],
)
def test_malformed_objects_are_refused_with_their_message(
    base: Obj, read: Callable[[Obj], Any], change: Callable[[Obj], None], message: str
) -> None:
    obj = copy.deepcopy(base)
    change(obj)
    with pytest.raises(ConversionError) as caught:
        read(obj)
    assert message in str(caught.value)

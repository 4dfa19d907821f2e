"""DRA objects (resource.k8s.io/v1) for the tests, shaped as NVIDIA's DRA driver publishes
GPUs and MIG devices (examples/dra holds the same shapes as manifests)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kgpu.dra.inventory import DraInventory
from kgpu.kube.objects.dra_claim_objects import (
    resource_claim_from_k8s,
    resource_claim_template_from_k8s,
)
from kgpu.kube.objects.dra_objects import device_class_from_k8s, resource_slice_from_k8s
from kgpu.model.dra import PodClaim

Obj = dict[str, Any]
API = "resource.k8s.io/v1"
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"


def device_class(name: str, *expressions: str) -> Obj:
    return {
        "apiVersion": API,
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


GPU_CLASS = device_class(
    "gpu.nvidia.com",
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
)
MIG_CLASS = device_class(
    "mig.nvidia.com",
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
)


def gpu(index: int, product: str = H100, memory: str = "80Gi", arch: str = "Hopper") -> Obj:
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": f"GPU-{index:08d}-0000-4000-8000-000000000000"},
            "minor": {"int": index},
            "index": {"int": index},
            "productName": {"string": product},
            "architecture": {"string": arch},
            "driverVersion": {"version": "550.54.15"},
            "migEnabled": {"bool": False},
        },
        "capacity": {"memory": {"value": memory}},
    }


def mig(parent: int, j: int, profile: str = "3g.20gb", memory: str = "20Gi") -> Obj:
    return {
        "name": f"gpu-{parent}-mig-{profile.replace('.', '')}-{j}",
        "attributes": {
            "type": {"string": "mig"},
            "uuid": {"string": f"MIG-{parent:04d}{j:04d}-0000-4000-8000-000000000000"},
            "parentUUID": {"string": f"GPU-{parent:08d}-0000-4000-8000-000000000000"},
            "profile": {"string": profile},
            "productName": {"string": A100},
        },
        "capacity": {"memory": {"value": memory}},
    }


def slice_(
    node: str,
    *devices: Obj,
    name: str = "",
    pool: str = "",
    generation: int = 1,
    count: int = 1,
    driver: str = "gpu.nvidia.com",
    where: Obj | None = None,
) -> Obj:
    spec: Obj = {
        "driver": driver,
        "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
        "devices": list(devices),
    }
    spec.update(where if where is not None else {"nodeName": node})
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{driver}"},
        "spec": spec,
    }


def exactly(cls: str = "gpu.nvidia.com", *selectors: str, **more: Any) -> Obj:
    out: Obj = {"deviceClassName": cls, **more}
    if selectors:
        out["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return out


def claim(
    name: str,
    requests: list[Obj],
    constraints: list[Obj] | None = None,
    namespace: str = "ml",
    status: Obj | None = None,
) -> Obj:
    obj: Obj = {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": requests}},
    }
    if constraints:
        obj["spec"]["devices"]["constraints"] = constraints
    if status is not None:
        obj["status"] = status
    return obj


def one_gpu_claim(name: str, finalizers: list[str] | None = None) -> Obj:
    """A claim in ``ml`` for one GPU of any product (with ``finalizers`` when given)."""
    obj = claim(name, [{"name": "gpu", "exactly": exactly()}])
    if finalizers is not None:
        obj["metadata"]["finalizers"] = finalizers
    return obj


def template(name: str, requests: list[Obj], namespace: str = "ml") -> Obj:
    return {
        "apiVersion": API,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


def inventory(
    slices: list[Obj],
    claims: Sequence[Obj] = (),
    classes: list[Obj] | None = None,
    templates: Sequence[Obj] = (),
) -> DraInventory:
    return DraInventory.build(
        [
            device_class_from_k8s(c)
            for c in (classes if classes is not None else [GPU_CLASS, MIG_CLASS])
        ],
        [resource_slice_from_k8s(s) for s in slices],
        [resource_claim_from_k8s(c) for c in claims],
        [resource_claim_template_from_k8s(t) for t in templates],
    )


def wants(inv: DraInventory, pod: str, *claim_names: str) -> None:
    """Pod ``ml/<pod>`` names the claims ``ml/<claim>``."""
    inv.set_pod_claims(f"ml/{pod}", [PodClaim(n, claim_name=n) for n in claim_names])

"""What one Node or Pod may claim: the limits of :mod:`kgpu.model.limits` applied to the
fields :mod:`kgpu.kube.objects.node_pod` reads, each refusal a :class:`ConversionError`
naming the field, the value and the bound (docs/SECURITY.md lists them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Final

from kgpu.kube.objects.fields import Fields
from kgpu.kube.objects.gpu_dialects import GPU_RESOURCE, MIG_PREFIX, MPS_RESOURCE
from kgpu.model.devices import NodeDevices
from kgpu.model.json_text import OutOfBounds, check_bounds
from kgpu.model.limits import (
    MAX_GPU_MEMORY_MIB,
    MAX_GPU_REPLICAS,
    MAX_MIG_INSTANCES,
    MAX_NODE_CPU,
    MAX_NODE_DEVICES,
    MAX_NODE_GPUS,
    MAX_NODE_MEMORY_MIB,
)
from kgpu.model.units import MIB

_DIGITS: Final = re.compile(r"[0-9]+")


def label_number_within(fields: Fields, label: str, text: str, limit: int, unit: str = "") -> int:
    """A GFD label's whole number, at most ``limit``. GFD writes plain decimal integers:
    "80GB" or "8.0" means the label was hand-edited."""
    if not _DIGITS.fullmatch(text):
        raise fields.fail(f"label {label}", text, f"a whole number{unit}")
    # The length first: Python will not turn 4,300 digits or more into an integer.
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(limit)) or int(digits) > limit:
        raise fields.fail(f"label {label}", text, f"a whole number{unit}, at most {limit}")
    return int(digits)


def at_most(fields: Fields, field: str, value: object, limit: int, what: str) -> int:
    count = fields.whole(value, field, f"a whole number of {what}")
    if count > limit:
        raise fields.fail(field, value, f"at most {limit} {what}")
    return count


def check_devices(fields: Fields, devices: NodeDevices) -> None:
    """The node's Device, within what one node holds: its GPU rows are kgpu's rows."""
    for kind, found, limit in (
        ("GPUs", devices.gpus, MAX_NODE_GPUS),
        ("RDMA devices", devices.rdma, MAX_NODE_DEVICES),
        ("FPGAs", devices.fpga, MAX_NODE_DEVICES),
    ):
        if len(found) > limit:
            raise fields.fail(f"Device {kind}", f"{len(found)} {kind}", f"at most {limit}")
    for gpu in devices.gpus:
        if gpu.memory_mib > MAX_GPU_MEMORY_MIB:
            raise fields.fail(
                f"Device GPU {gpu.minor} memory",
                gpu.memory_mib,
                f"at most {MAX_GPU_MEMORY_MIB} MiB",
            )


# What one pod may ask, by resource (koordinator.sh/ names as kubernetes.io/): no more than
# the largest node holds, so that sums over pods stay far inside the core's integers.
_POD_LIMITS: Final = {
    "cpu": (MAX_NODE_CPU, "CPUs"),
    "memory": (MAX_NODE_MEMORY_MIB * MIB, "bytes"),
    GPU_RESOURCE: (MAX_NODE_GPUS, "GPUs"),
    MPS_RESOURCE: (MAX_GPU_REPLICAS, "replicas"),
    "kubernetes.io/gpu": (MAX_NODE_GPUS * 100, "(100 = one GPU)"),
    "kubernetes.io/gpu-core": (MAX_NODE_GPUS * 100, "(100 = one GPU)"),
    "kubernetes.io/gpu-memory-ratio": (MAX_NODE_GPUS * 100, "(100 = one GPU)"),
    "kubernetes.io/gpu-memory": (MAX_NODE_GPUS * MAX_GPU_MEMORY_MIB * MIB, "bytes"),
    "kubernetes.io/rdma": (MAX_NODE_DEVICES * 100, "(100 = one device)"),
    "kubernetes.io/fpga": (MAX_NODE_DEVICES * 100, "(100 = one device)"),
}


def check_requests(fields: Fields, requests: Mapping[str, Fraction]) -> None:
    """Refuse a request larger than any node: it is a mistake or an attack, and the numbers
    of thousands of such pods would overflow the core's arithmetic."""
    for name, amount in requests.items():
        key = name.replace("koordinator.sh/", "kubernetes.io/", 1)
        limit, unit = (
            (MAX_MIG_INSTANCES, "instances")
            if name.startswith(MIG_PREFIX)
            else _POD_LIMITS.get(key, (0, ""))
        )
        if limit and amount > limit:
            shown = int(amount) if amount.denominator == 1 else float(amount)
            raise fields.fail(
                f"resource {name}", shown, f"at most {limit} {unit}, more than any node holds"
            )


def bounded_json(fields: Fields, text: str, field: str = "") -> str:
    """``text``, an annotation's JSON, if it is within the size and depth bounds (for a
    reader that decodes it itself: Python's decoder recurses, once per level)."""
    try:
        check_bounds(text)
    except OutOfBounds as exc:
        raise fields.fail(field, text, f"JSON within kgpu's bounds ({exc})") from None
    return text

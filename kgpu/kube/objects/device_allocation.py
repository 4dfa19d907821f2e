"""The device-allocation annotations that kgpu writes on a pod as it binds it, and reads back.

They travel in the Binding itself (:mod:`kgpu.kube.live.binder`): the API server copies a
Binding's annotations onto the pod in the write that sets its node, so a bound pod never
lacks them and an unbound one never has them.

``kgpu.io/device-allocation`` (the contract in DESIGN.md, Koordinator's shape)::

    {"gpu": [{"minor": 0, "resources": {"kubernetes.io/gpu-core": 50,
                                         "kubernetes.io/gpu-memory-ratio": 50,
                                         "kubernetes.io/gpu-memory": "40960Mi",
                                         "kgpu.io/gpu-milli": 500}}]}

``kgpu.io/visible-devices`` is what NVIDIA_VISIBLE_DEVICES should be: "0,1".

Beside ``gpu``, a pod's other devices: ``"rdma": [{"minor": 0, "uuid": "mlx5_0",
"resources": {"kubernetes.io/rdma": 100}}]``, ``"fpga"`` alike, and ``"mig": [{"profile":
"1g.5gb", "count": 2}]`` (which instances is the device plugin's choice).
:func:`render_allocation` writes all of it from a ClusterState's allocation; each GPU's
``kubernetes.io/gpu-memory`` is then the MiB the pod holds there and
``kubernetes.io/gpu-memory-ratio`` that as a percent of the GPU (rounded down), so a share
asking 4Gi of an 80Gi GPU reads ``"gpu-memory": "4096Mi", "gpu-memory-ratio": 5``.

``kubernetes.io/gpu-core`` is in percent of one GPU, as Koordinator counts it; kgpu accounts
in thousandths, so it also writes ``kgpu.io/gpu-milli``, which reads back exactly (three
pods of a third each hold 333 milli, not 33% or 34%). Reading accepts either, preferring
the exact one. The annotations are the record a restarted scheduler rebuilds its
allocations from, so reading is strict: anything malformed is a :class:`ConversionError`
naming the value and what was expected, and the caller accounts the pod conservatively.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from kgpu.kube.objects.node_pod import ConversionError
from kgpu.model.devices import Device
from kgpu.model.json_text import JsonTextError, read_json
from kgpu.model.quantity import QuantityError, non_negative
from kgpu.model.units import GPU_CORE_PER_GPU, MIB, MILLI_PER_GPU
from kgpu.state.cluster import Allocation, ClusterState

ALLOCATION_ANNOTATION: Final = "kgpu.io/device-allocation"
VISIBLE_DEVICES_ANNOTATION: Final = "kgpu.io/visible-devices"
GPU_CORE: Final = "kubernetes.io/gpu-core"
GPU_MEMORY_RATIO: Final = "kubernetes.io/gpu-memory-ratio"
GPU_MEMORY: Final = "kubernetes.io/gpu-memory"
GPU_MILLI: Final = "kgpu.io/gpu-milli"
RDMA: Final = "kubernetes.io/rdma"
FPGA: Final = "kubernetes.io/fpga"

_MILLI_PER_CORE: Final = MILLI_PER_GPU // GPU_CORE_PER_GPU
_EXAMPLE: Final = '{"gpu": [{"minor": 0, "resources": {"kubernetes.io/gpu-core": 100}}]}'


@dataclass(frozen=True, slots=True)
class DeviceAllocation:
    """The GPU minors a pod holds and the thousandths of each it takes; the MiB of each
    (by minor, as in ``minors``; empty when not written), its RDMA and FPGA minors and its
    MIG instances per profile."""

    minors: tuple[int, ...]
    milli: int
    memory_mib: tuple[int, ...] = ()
    rdma: tuple[int, ...] = ()
    fpga: tuple[int, ...] = ()
    mig: tuple[tuple[str, int], ...] = ()


def render(
    minors: Sequence[int],
    milli: int,
    gpu_memory_mib: int = 0,
    uuids: Mapping[int, str] | None = None,
    *,
    held_mib: Mapping[int, int] | None = None,
    others: Mapping[str, list[dict[str, Any]]] | None = None,
) -> dict[str, str]:
    """Both annotations for a pod given ``milli`` of each GPU in ``minors``.

    ``gpu_memory_mib`` is the memory of one GPU of the node (0 when unknown: the memory
    figure is then left out); ``uuids`` maps minors to GPU UUIDs where a Device says them.
    ``held_mib`` gives, by minor, the MiB the pod holds when that is not its compute share
    of ``gpu_memory_mib``; ``others`` the entries of its other devices by kind.
    """
    core = milli // _MILLI_PER_CORE
    entries: list[dict[str, Any]] = []
    for minor in sorted(minors):
        ratio = core
        resources: dict[str, Any] = {GPU_CORE: core, GPU_MEMORY_RATIO: ratio}
        held = (held_mib or {}).get(minor)
        if held is not None and gpu_memory_mib:
            resources[GPU_MEMORY_RATIO] = held * GPU_CORE_PER_GPU // gpu_memory_mib
            resources[GPU_MEMORY] = f"{held}Mi"
        elif gpu_memory_mib:
            resources[GPU_MEMORY] = f"{gpu_memory_mib * milli // MILLI_PER_GPU}Mi"
        resources[GPU_MILLI] = milli
        entry: dict[str, Any] = {"minor": minor}
        if uuids and minor in uuids:
            entry["uuid"] = uuids[minor]
        entry["resources"] = resources
        entries.append(entry)
    body: dict[str, Any] = {"gpu": entries, **(others or {})}
    return {
        ALLOCATION_ANNOTATION: json.dumps(body, separators=(",", ":")),
        VISIBLE_DEVICES_ANNOTATION: ",".join(str(m) for m in sorted(minors)),
    }


def render_allocation(state: ClusterState, alloc: Allocation) -> dict[str, str]:
    """The annotations for what ``alloc`` holds on its node of ``state`` (sent with the Binding).

    Slots become the minors and UUIDs of the node's devices; each GPU's memory is the MiB
    held there (which for a memory-sized or ratio request is not its compute share).
    """
    devices = state.devices[alloc.node]
    gpus = [devices.gpus[g] for g in alloc.gpus]
    memory = int(state.gpu_mem_cap[alloc.node, alloc.gpus[0]]) if alloc.gpus else 0
    held = {d.minor: mib for d, mib in zip(gpus, alloc.gpu_memory, strict=False)}
    others: dict[str, list[dict[str, Any]]] = {}
    for kind, slots, pool, resource in (
        ("rdma", alloc.rdma, devices.rdma, RDMA),
        ("fpga", alloc.fpga, devices.fpga, FPGA),
    ):
        if slots:
            others[kind] = [_device_entry(pool[i], resource) for i in slots]
    if alloc.mig_count:
        profile = state.mig_profiles[alloc.mig_profile]
        others["mig"] = [{"profile": profile, "count": alloc.mig_count}]
    notes = render(
        [d.minor for d in gpus],
        alloc.gpu_milli,
        memory,
        {d.minor: d.uuid for d in gpus if d.uuid},
        held_mib=held if alloc.odd else None,
        others=others,
    )
    if not gpus:
        del notes[VISIBLE_DEVICES_ANNOTATION]  # MIG instances: the device plugin picks them
    return notes


def _device_entry(device: Device, resource: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"minor": device.minor}
    if device.uuid:
        entry["uuid"] = device.uuid
    entry["resources"] = {resource: GPU_CORE_PER_GPU}
    return entry


def parse(ref: str, text: str) -> DeviceAllocation:
    """The allocation written in ``text``; ``ref`` ("Pod ns/name") names the pod in errors.

    GPUs of one pod given different shares are read as all taking the largest: a pod's
    request has one share per GPU, and reading more than was written is the safe error.
    """
    field = f"annotation {ALLOCATION_ANNOTATION}"

    def fail(value: object, expected: str, where: str = "") -> ConversionError:
        return ConversionError(ref, field + where, value, expected)

    try:
        data = read_json(text)
    except JsonTextError as exc:
        raise fail(text, f"JSON such as {_EXAMPLE} ({exc})") from None
    if not isinstance(data, dict):
        raise fail(text, f"a JSON object such as {_EXAMPLE}")
    gpus = data.get("gpu", [])
    if not isinstance(gpus, list):
        raise fail(gpus, "a list of GPUs", ".gpu")
    minors: list[int] = []
    shares: list[int] = []
    memory: list[int | None] = []
    for i, entry in enumerate(gpus):
        where = f".gpu[{i}]"
        if not isinstance(entry, dict):
            raise fail(entry, 'an object with "minor" and "resources"', where)
        minor = entry.get("minor")
        if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0:
            raise fail(minor, "a GPU minor number (0, 1, ...)", where + ".minor")
        if minor in minors:
            raise fail(minor, "each minor once", where + ".minor")
        resources = entry.get("resources")
        if not isinstance(resources, dict):
            raise fail(resources, f'an object with "{GPU_CORE}"', where + ".resources")
        minors.append(minor)
        shares.append(_milli(resources, fail, where))
        memory.append(_mib(resources, fail, where))
    order = sorted(range(len(minors)), key=minors.__getitem__)
    held = [memory[i] for i in order]
    return DeviceAllocation(
        tuple(minors[i] for i in order),
        max(shares, default=0),
        tuple(m for m in held if m is not None) if None not in held else (),
        _minors(data, "rdma", fail),
        _minors(data, "fpga", fail),
        _mig(data, fail),
    )


def _mib(resources: Mapping[str, Any], fail: Any, where: str) -> int | None:
    """The GPU memory an entry records, in MiB rounded up; None when it records none."""
    value = resources.get(GPU_MEMORY)
    if value is None:
        return None
    try:
        amount = non_negative(value)
    except QuantityError:
        raise fail(value, "a quantity such as 8Gi", f"{where}.resources[{GPU_MEMORY}]") from None
    return math.ceil(amount / MIB)


def _minors(data: Mapping[str, Any], kind: str, fail: Any) -> tuple[int, ...]:
    entries = data.get(kind, [])
    if not isinstance(entries, list):
        raise fail(entries, f"a list of {kind} devices", f".{kind}")
    out: list[int] = []
    for i, entry in enumerate(entries):
        minor = entry.get("minor") if isinstance(entry, dict) else None
        if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0 or minor in out:
            raise fail(minor, "a device minor number, each once", f".{kind}[{i}].minor")
        out.append(minor)
    return tuple(sorted(out))


def _mig(data: Mapping[str, Any], fail: Any) -> tuple[tuple[str, int], ...]:
    entries = data.get("mig", [])
    if not isinstance(entries, list):
        raise fail(entries, "a list of MIG profiles", ".mig")
    out: dict[str, int] = {}
    for i, entry in enumerate(entries):
        profile = entry.get("profile") if isinstance(entry, dict) else None
        count = entry.get("count") if isinstance(entry, dict) else None
        if not isinstance(profile, str) or not profile:
            raise fail(entry, 'an object with "profile" and "count"', f".mig[{i}]")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise fail(count, "a whole number above 0", f".mig[{i}].count")
        out[profile] = out.get(profile, 0) + count
    return tuple(sorted(out.items()))


def _milli(resources: Mapping[str, Any], fail: Any, where: str) -> int:
    exact = resources.get(GPU_MILLI)
    if exact is not None:
        if isinstance(exact, bool) or not isinstance(exact, int) or not 0 < exact <= MILLI_PER_GPU:
            raise fail(
                exact,
                f"a whole number from 1 to {MILLI_PER_GPU}",
                f"{where}.resources[{GPU_MILLI}]",
            )
        return exact
    core = resources.get(GPU_CORE)
    if (
        isinstance(core, bool)
        or not isinstance(core, int | float)
        or not 0 < core <= GPU_CORE_PER_GPU
    ):
        raise fail(
            core, f"a number above 0, at most {GPU_CORE_PER_GPU}", f"{where}.resources[{GPU_CORE}]"
        )
    # Percent to thousandths, rounded up: reading a little more than was held is safe.
    share = Fraction(str(core)) * _MILLI_PER_CORE
    return min(MILLI_PER_GPU, -(-share.numerator // share.denominator))

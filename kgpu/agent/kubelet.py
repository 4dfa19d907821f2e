"""Which devices the kubelet gave which pods: its device manager's checkpoint file.

The kubelet writes ``/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint`` after
every allocation::

    {"Data": {"PodDeviceEntries": [{"PodUID": "…", "ContainerName": "main",
      "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": ["GPU-…"]}, "AllocResp": "…"}],
      "RegisteredDevices": {...}}, "Checksum": …}

(``DeviceIDs`` is a plain list before Kubernetes 1.20, a map by NUMA node since.) The agent
turns the NVIDIA entries into the Device's checkpoint annotation, one entry per pod and
resource, which is how kgpu learns which GPUs a pod placed by another scheduler holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from kgpu.model.json_text import read_json

DEFAULT_CHECKPOINT: Final = Path("/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")
# Where the kubelet serves its pod-resources API (kgpu.agent.pod_resources_client), which
# says the same as the file, and is preferred to it where it is there.
DEFAULT_SOCKET: Final = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
_PREFIX: Final = "nvidia.com/"
# The file carries each container's Allocate answer: a few KiB per pod, on a node that runs
# at most a few hundred.
MAX_FILE_CHARS: Final = 64 * 1024 * 1024
MAX_REGISTERED: Final = 4096  # devices of one resource: far more than a node holds


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read as the kubelet writes it."""


def _load(path: Path) -> dict[str, Any] | None:
    """The file's ``Data``; None when there is no file (no device plugin ever registered)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"kubelet checkpoint {path}: cannot be read: {exc}") from exc
    try:
        data = read_json(text, max_chars=MAX_FILE_CHARS)
    except ValueError as exc:
        raise CheckpointError(f"kubelet checkpoint {path}: is not JSON ({exc})") from exc
    found = data.get("Data") if isinstance(data, dict) else None
    return found if isinstance(found, dict) else {}


def read_registered(path: Path, resource: str) -> list[str] | None:
    """The ids of ``resource``'s devices the kubelet has from its device plugin
    (``Data.RegisteredDevices``: the healthy ones), in the file's order; None when there is
    no file."""
    found = read_registered_of(path, (resource,))
    return None if found is None else found[resource]


def read_registered_of(path: Path, resources: tuple[str, ...]) -> dict[str, list[str]] | None:
    """:func:`read_registered` for each of ``resources``, from one read of the file."""
    data = _load(path)
    if data is None:
        return None
    registered = data.get("RegisteredDevices") or {}
    return {r: _registered(path, registered, r) for r in resources}


def _registered(path: Path, registered: object, resource: str) -> list[str]:
    ids = registered.get(resource, []) if isinstance(registered, dict) else None
    if ids is None:
        ids = []
    where = f"kubelet checkpoint {path}: Data.RegisteredDevices[{json.dumps(resource)}]"
    if not isinstance(ids, list) or not all(isinstance(d, str) for d in ids):
        raise CheckpointError(f"{where} is {json.dumps(ids)[:200]}, expected a list of device ids")
    if len(ids) > MAX_REGISTERED:
        raise CheckpointError(f"{where} has {len(ids)} ids, more than {MAX_REGISTERED}; refused")
    return list(dict.fromkeys(ids))


def read_checkpoint(path: Path) -> list[dict[str, Any]] | None:
    """The annotation's entries, ``[{"podUID", "resourceName", "deviceIDs"}]``, in the
    file's order; None when there is no file (no device was ever allocated on the node)."""
    data = _load(path)
    if data is None:
        return None
    entries = data.get("PodDeviceEntries")
    if entries is None:
        entries = []  # a kubelet that has allocated nothing writes null
    if not isinstance(entries, list):
        raise CheckpointError(
            f"kubelet checkpoint {path}: Data.PodDeviceEntries is {type(entries).__name__}, "
            "expected a list of {PodUID, ResourceName, DeviceIDs}"
        )
    merged: dict[tuple[str, str], dict[str, None]] = {}  # ids as keys: in order, once
    for i, entry in enumerate(entries):
        where = f"kubelet checkpoint {path}: Data.PodDeviceEntries[{i}]"
        if not isinstance(entry, dict):
            raise CheckpointError(f"{where} is {json.dumps(entry)}, expected an object")
        uid, resource = entry.get("PodUID"), entry.get("ResourceName")
        if not isinstance(uid, str) or not isinstance(resource, str):
            raise CheckpointError(f"{where} has no PodUID or ResourceName string")
        if not resource.startswith(_PREFIX):
            continue
        ids = _device_ids(entry.get("DeviceIDs"), where)
        merged.setdefault((uid, resource), {}).update(dict.fromkeys(ids))
    return [
        {"podUID": uid, "resourceName": resource, "deviceIDs": list(ids)}
        for (uid, resource), ids in merged.items()
    ]


def _device_ids(value: object, where: str) -> list[str]:
    if isinstance(value, dict):  # by NUMA node: keep the node order the kubelet wrote
        found = [d for ids in value.values() if isinstance(ids, list) for d in ids]
        lists_only = all(isinstance(ids, list) for ids in value.values())
    else:
        found = value if isinstance(value, list) else []
        lists_only = isinstance(value, list)
    if not lists_only or not all(isinstance(d, str) for d in found):
        raise CheckpointError(
            f"{where}.DeviceIDs is {json.dumps(value)}, expected a list of device ids or a "
            'map of NUMA node to such lists, such as {"0": ["GPU-…"]}'
        )
    return [str(d) for d in found]

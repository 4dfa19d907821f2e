"""Pods that ask alike read once, and allocation records written alike parsed once.

What a workload's pods ask is the same but for their names.

:func:`kgpu.kube.objects.node_pod.pod_from_k8s` parses requests (quantities as fractions),
GPU dialects, tolerations and selectors: about 70 of the 100 CPU µs a new pod's reading takes
(:mod:`kgpu.kube.snapshot.conversion_cache`). The pods of one Job, Deployment or bench differ
in their names only, so the PodSpec of the first is kept by the text of everything that read
depends on except the name (:func:`request_text`), and a pod alike gets a copy under its own
key: a few µs instead of the parse.

The text holds every input of ``pod_from_k8s`` but ``metadata.name``: the namespace, labels,
annotations, each container's resources (and an init container's ``restartPolicy``), the
overhead, node selector, priority and tolerations, as ``repr`` writes them. For values as a
JSON decoder gives them (dicts with string keys, lists, strings, numbers, booleans, None)
equal text means equal values, so the parse would give the same PodSpec but for its key. A
pod with anything else in those parts (a Mapping that is not a dict, say, whose ``repr`` may
not show its content) is read in full, as is a pod whose text is long (a hostile one): kept
texts stay bounded. Only pods that read without error are kept:
a ConversionError names the pod, so each bad pod is parsed, and refused, on its own.

Likewise the ``kgpu.io/device-allocation`` records of bound pods
(:func:`kgpu.kube.objects.device_allocation.parse`, about half of a bound version's reading):
a node's GPUs are numbered alike, so the texts repeat, and one that parsed is kept by its text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from kgpu.kube.objects.device_allocation import DeviceAllocation, parse
from kgpu.kube.objects.node_pod import object_ref, pod_from_k8s
from kgpu.model.pod import PodKey, PodSpec

# Distinct requests kept; past this the table starts afresh (a cluster of ever-new requests
# pays one dict lookup a pod for nothing, and memory stays bounded).
KEPT: Final = 1024
# Longer texts are not kept: a pod's text is a few hundred characters.
TEXT_MAX: Final = 4096


def request_text(obj: Mapping[str, Any]) -> str | None:
    """What ``pod_from_k8s`` reads of ``obj`` besides its name, as text; None where ``obj``
    is not as a JSON decoder gives it, or its text is longer than ``TEXT_MAX``."""
    m = obj.get("metadata")
    spec = obj.get("spec")
    if type(m) is not dict or type(spec) is not dict:
        return None
    groups: list[list[tuple[object, object]] | None] = []
    for group in ("containers", "initContainers"):
        items = spec.get(group)
        if items is None:
            groups.append(None)
            continue
        if type(items) is not list:
            return None
        kept: list[tuple[object, object]] = []
        for container in items:
            if type(container) is not dict:
                return None
            kept.append((container.get("resources"), container.get("restartPolicy")))
        groups.append(kept)
    read = (
        m.get("namespace"),
        m.get("labels"),
        m.get("annotations"),
        groups,
        spec.get("overhead"),
        spec.get("nodeSelector"),
        spec.get("priority"),
        spec.get("tolerations"),
    )
    if not _plain(read):
        return None
    text = repr(read)
    return text if len(text) <= TEXT_MAX else None


def _plain(value: object) -> bool:
    """Is ``value`` made of what a JSON decoder gives (and the tuples and lists built above)?
    Their ``repr`` shows their content; another object's may not (``<X object at 0x...>``)."""
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return True
    if isinstance(value, dict):
        return kind is dict and all(type(k) is str and _plain(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return (kind is list or kind is tuple) and all(_plain(v) for v in value)
    return False


class AlikePods:
    """``pod_from_k8s`` and ``parse``, with what each request and record read as kept by its
    text."""

    def __init__(self) -> None:
        self._specs: dict[str, PodSpec] = {}
        self._allocations: dict[str, DeviceAllocation] = {}

    def read(self, obj: Mapping[str, Any]) -> PodSpec:
        """``pod_from_k8s(obj)``: the same PodSpec, or the same ConversionError raised."""
        text = request_text(obj)
        if text is None:
            return pod_from_k8s(obj)
        m = obj["metadata"]
        name = m.get("name")
        like = self._specs.get(text)
        if like is not None and isinstance(name, str) and name:
            # The namespace is in the text, and it read once: a string, or unset.
            namespace = m.get("namespace") or "default"
            return replace(
                like, key=PodKey(f"{namespace}/{name}"), annotations=dict(like.annotations)
            )
        spec = pod_from_k8s(obj)
        if len(self._specs) >= KEPT:
            self._specs.clear()
        self._specs[text] = spec
        return spec

    def allocation(self, obj: Mapping[str, Any], text: str) -> DeviceAllocation:
        """``parse`` of the record ``text`` of pod ``obj``: the same DeviceAllocation
        (immutable, so shared), or the same ConversionError raised."""
        known = self._allocations.get(text)
        if known is not None:
            return known
        found = parse(object_ref("Pod", obj), text)
        if len(text) <= TEXT_MAX:
            if len(self._allocations) >= KEPT:
                self._allocations.clear()
            self._allocations[text] = found
        return found

    def __len__(self) -> int:
        return len(self._specs) + len(self._allocations)

"""Queue and PodGroup custom resources (``kgpu.io/v1alpha1``) into the model's QueueSpec and
JobSpec, and the job a pod belongs to.

A Queue's amounts are read into the core's units (:mod:`kgpu.model.resources`):

- ``spec.deserved`` / ``spec.limit``: quantities per resource, ``cpu`` (cores: ``"500m"``,
  ``4``), ``memory`` (bytes: ``"64Gi"``) and ``gpu`` (GPUs: ``2``, ``"1.5"``; also spelled
  ``nvidia.com/gpu``). Capacities round down, as the node's do.
- ``spec.cards``: card name to whole ``deserved`` / ``limit`` cards; the annotation
  ``volcano.sh/card.quota`` sets both for each card it names, and ``spec.cards`` wins.
- ``spec.overQuotaWeight``: one weight for every resource of the queue.
- ``spec.parent`` and ``spec.priority`` as they are.
- ``spec.namespaces``: who may use the queue (:mod:`kgpu.kube.objects.queue_tenancy`); read
  here only so that a malformed list makes the Queue unreadable.

A PodGroup gives ``minMember`` (the gang), ``maxMember`` (an elastic job's bound), the queue,
its creation time (job order among equals), its ``volcano.sh/card.request`` and its
``minResources`` (what enqueue holds it to at least). Its priority
is the value of the PriorityClass its ``spec.priorityClassName`` names, as in Volcano; without
one, its pods' highest (the API server resolves their PriorityClass into ``spec.priority``).

A pod belongs to the PodGroup its annotation names (``kgpu.io/pod-group``, Volcano's
``scheduling.k8s.io/group-name`` or KAI's ``pod-group-name``, in its namespace), else it is a
job of its own. Every malformed field raises :class:`ConversionError` naming the object, the
field, the value and what was expected; the caller reports it and schedules the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final

from kgpu.kube.api.resource_types import meta, parse_time
from kgpu.kube.objects.fields import MISSING, ConversionError, Fields, show
from kgpu.kube.objects.queue_tenancy import served_namespaces
from kgpu.model.card import (
    QUOTA_ANNOTATION,
    REQUEST_ANNOTATION,
    CardError,
    parse_card_quota,
    parse_card_request,
)
from kgpu.model.job import JobKey, JobSpec
from kgpu.model.pod import PodSpec
from kgpu.model.queue import QueueSpec, with_card_quota
from kgpu.model.resources import CPU, GPU, MEMORY, MILLI
from kgpu.model.units import MIB, MILLI_PER_CPU, MILLI_PER_GPU

# Names a Queue may give its amounts under, and the model resource each one is.
# The pod group a pod belongs to: kgpu's own, Volcano's and KAI's annotations.
GANG_ANNOTATIONS: Final = ("kgpu.io/pod-group", "scheduling.k8s.io/group-name", "pod-group-name")

RESOURCE_NAMES: Final = {
    "cpu": CPU,
    "memory": MEMORY,
    "gpu": GPU,
    "nvidia.com/gpu": GPU,
}
_EXPECTED_RESOURCE: Final = "one of " + ", ".join(RESOURCE_NAMES) + " (cards go in spec.cards)"


def queue_ref(obj: Mapping[str, Any]) -> str:
    return f"Queue {meta(obj).get('name') or '(no name)'}"


def podgroup_ref(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    return f"PodGroup {m.get('namespace') or 'default'}/{m.get('name') or '(no name)'}"


def _amount(fields: Fields, resource: str, value: object, field: str) -> int:
    quantity = fields.quantity(value, field)
    if resource == CPU:
        return math.floor(quantity * MILLI_PER_CPU)
    if resource == MEMORY:
        return math.floor(quantity / MIB)
    return math.floor(quantity * MILLI_PER_GPU)


def _amounts(fields: Fields, spec: Mapping[str, Any], key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in fields.mapping(spec, key, f"spec.{key}").items():
        resource = RESOURCE_NAMES.get(str(name))
        if resource is None:
            raise fields.fail(f"spec.{key} key {name}", name, _EXPECTED_RESOURCE)
        out[resource] = _amount(fields, resource, value, f"spec.{key}[{name}]")
    return out


def _whole(fields: Fields, value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fields.fail(field, value, "a whole number, at least 0")
    return value


def _metadata(
    fields: Fields, obj: Mapping[str, Any]
) -> tuple[Mapping[str, Any], str, Mapping[str, str]]:
    """An object's metadata, its name (required) and its annotations."""
    m = fields.mapping(obj, "metadata", "metadata")
    name = m.get("name", MISSING)
    if not isinstance(name, str) or not name:
        raise fields.fail("metadata.name", name, "a non-empty string")
    return m, name, fields.strings(m, "annotations", "annotation")


def queue_from_k8s(obj: Mapping[str, Any]) -> QueueSpec:
    """A Queue object as the session's QueueSpec (ConversionError if malformed)."""
    fields = Fields(queue_ref(obj))
    _, name, annotations = _metadata(fields, obj)
    spec = fields.mapping(obj, "spec", "spec")
    deserved = _amounts(fields, spec, "deserved")
    limit = _amounts(fields, spec, "limit")
    for card, entry in fields.mapping(spec, "cards", "spec.cards").items():
        field = f"spec.cards[{card}]"
        if not isinstance(entry, Mapping):
            raise fields.fail(field, entry, "a mapping with deserved and limit")
        for what, into in (("deserved", deserved), ("limit", limit)):
            if entry.get(what) is not None:
                into[str(card)] = _whole(fields, entry[what], f"{field}.{what}") * MILLI
        low, high = deserved.get(str(card)), limit.get(str(card))
        if low is not None and high is not None and high < low:
            raise fields.fail(
                f"{field}.limit", high // MILLI, f"at least deserved ({low // MILLI})"
            )
    weight = spec.get("overQuotaWeight")
    weights: dict[str, float] = {}
    if weight is not None:
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight >= 0:
            raise fields.fail("spec.overQuotaWeight", weight, "a number of at least 0")
        weights = dict.fromkeys((CPU, MEMORY, GPU, *deserved, *limit), float(weight))
    priority = spec.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise fields.fail("spec.priority", priority, "an integer")
    unlimited = spec.get("cardUnlimitedCpuMemory", False)
    if not isinstance(unlimited, bool):
        raise fields.fail("spec.cardUnlimitedCpuMemory", unlimited, "true or false")
    served_namespaces(obj)
    queue = QueueSpec(
        name=name,
        parent=fields.string(spec, "parent", "spec.parent"),
        deserved=deserved,
        limit=limit,
        over_quota_weight=weights,
        priority=priority,
        card_unlimited_cpu_memory=unlimited,
    )
    quota = card_quota(fields, annotations)
    return queue if quota is None else with_card_quota(queue, quota)


def podgroup_from_k8s(obj: Mapping[str, Any]) -> JobSpec:
    """A PodGroup object as the session's JobSpec, priority 0: the session gives it its
    PriorityClass's value (``podgroup_priority``) or its pods' highest."""
    fields = Fields(podgroup_ref(obj))
    m, name, annotations = _metadata(fields, obj)
    namespace = fields.string(m, "namespace", "metadata.namespace") or "default"
    spec = fields.mapping(obj, "spec", "spec")
    low = min_member(fields, spec)
    high = spec.get("maxMember", 0)
    if isinstance(high, bool) or not isinstance(high, int) or (high and high < low):
        raise fields.fail("spec.maxMember", high, f"a whole number, at least minMember ({low})")
    return JobSpec(
        key=JobKey(f"{namespace}/{name}"),
        queue=fields.string(spec, "queue", "spec.queue"),
        min_member=low,
        max_member=high,
        created=parse_time(m.get("creationTimestamp")),
        card_request=card_request(fields, annotations),
        min_resources=_min_resources(fields, spec),
    )


def min_member(fields: Fields, spec: Mapping[str, Any]) -> int:
    """A PodGroup's ``spec.minMember`` (kgpu's and Volcano's spell it alike), 1 if unset."""
    low = spec.get("minMember", 1)
    if isinstance(low, bool) or not isinstance(low, int) or low < 1:
        raise fields.fail("spec.minMember", low, "a whole number, at least 1")
    return low


def card_quota(fields: Fields, annotations: Mapping[str, str]) -> dict[str, int] | None:
    """A Queue's ``volcano.sh/card.quota`` (kgpu's and Volcano's Queues carry it alike),
    None without one."""
    text = annotations.get(QUOTA_ANNOTATION)
    if text is None:
        return None
    try:
        return parse_card_quota(text)
    except CardError as exc:
        raise ConversionError(fields.ref, exc.field, exc.value, exc.expected) from None


def card_request(fields: Fields, annotations: Mapping[str, str]) -> dict[tuple[str, ...], int]:
    """A PodGroup's ``volcano.sh/card.request``, empty without one."""
    text = annotations.get(REQUEST_ANNOTATION)
    if text is None:
        return {}
    try:
        return parse_card_request(text)
    except CardError as exc:
        raise ConversionError(fields.ref, exc.field, exc.value, exc.expected) from None


def _min_resources(fields: Fields, spec: Mapping[str, Any]) -> dict[str, int]:
    """``spec.minResources`` in the resources queues account; others (``pods``,
    ``ephemeral-storage``, which Volcano's job controller writes too) are not held to any
    queue limit, so they are passed over rather than refused."""
    out: dict[str, int] = {}
    for name, value in fields.mapping(spec, "minResources", "spec.minResources").items():
        resource = RESOURCE_NAMES.get(str(name))
        if resource is not None:
            out[resource] = _amount(fields, resource, value, f"spec.minResources[{name}]")
    return out


def podgroup_priority(obj: Mapping[str, Any], classes: Mapping[str, object]) -> int | None:
    """The value of the PriorityClass a PodGroup names in ``spec.priorityClassName`` (None if
    it names none), from ``classes`` (name → ``value`` as the PriorityClass holds it). A
    class that does not exist, or whose value is not an integer, raises ConversionError."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or spec.get("priorityClassName") in (None, ""):
        return None  # the common case, read every session: no Fields to build
    fields = Fields(podgroup_ref(obj))
    name = fields.string(spec, "priorityClassName", "spec.priorityClassName")
    value = classes.get(name, MISSING)
    if value is MISSING:
        # Not the list of those that exist: the message would change, and the Warning be
        # said again on every PodGroup, whenever a class anywhere came or went.
        raise fields.fail("spec.priorityClassName", name, "the name of an existing PriorityClass")
    if isinstance(value, bool) or not isinstance(value, int):
        raise fields.fail(
            "spec.priorityClassName",
            name,
            f"a PriorityClass whose value is an integer (its value is {show(value)})",
        )
    return value


def pod_group_of(pod: PodSpec) -> JobKey:
    """The PodGroup a pod names, as "namespace/name", or "" if it names none."""
    name = next((pod.annotations[k] for k in GANG_ANNOTATIONS if pod.annotations.get(k)), "")
    if not name:
        return JobKey("")
    return JobKey(f"{pod.key.split('/', 1)[0]}/{name}")


# ---------------------------------------------------------------------------- back to quantities


def quantity_text(resource: str, amount: int) -> str:
    """A model amount as the Kubernetes quantity a status shows: cpu and gpu ``"1500m"`` or
    ``"2"``, memory ``"8Gi"`` or ``"1536Mi"``."""
    if resource == MEMORY:
        if amount and amount % 1024 == 0:
            return f"{amount // 1024}Gi"
        return f"{amount}Mi"
    whole = Fraction(amount, MILLI)
    return str(whole.numerator) if whole.denominator == 1 else f"{amount}m"

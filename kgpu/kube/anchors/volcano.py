"""Volcano's Queues and PodGroups (``scheduling.volcano.sh/v1beta1``) into kgpu's model.

A team that keeps Volcano's controllers and replaces only its scheduler keeps these objects
as they are; kgpu reads them beside its own ``kgpu.io`` ones (docs/MIGRATING.md, "From
Volcano"). A Queue's fields become a :class:`~kgpu.model.queue.QueueSpec`:

- ``spec.capability`` → ``limit``: a ceiling, never passed, borrowed or not;
- ``spec.deserved`` → ``deserved``: what reclaim takes back for it;
- ``spec.guarantee.resource`` → ``guarantee``: held for it alone, lent to no other queue;
- ``spec.weight`` (a whole number, at least 1; Volcano's default 1) → the weight of every
  resource when what no quota claims is divided;
- ``spec.reclaimable`` (default true) → ``reclaimable``: false keeps what it holds past its
  deserved from reclaim;
- ``spec.parent`` → ``parent``; Volcano's ``root`` is kgpu's top level, and the Queue named
  ``root`` itself is no queue to kgpu (:func:`is_root_queue`);
- annotation ``volcano.sh/card.quota`` → each card's deserved and limit, as the
  capacity-card plugin reads it.

A ResourceList's ``cpu``, ``memory`` and ``nvidia.com/gpu`` are read into the core's units;
other names (``pods``, ``ephemeral-storage``, another vendor's devices) hold nothing in
kgpu and are passed over, since Volcano accepts them; a malformed quantity under any name
refuses the object. Volcano's own checks are kept: ``deserved`` and ``guarantee`` at most
``capability`` for each resource both name.

A PodGroup becomes a :class:`~kgpu.model.job.JobSpec`: ``spec.minMember`` (default 1) the
gang, ``spec.queue`` (Volcano's default ``default``), ``spec.minResources``,
``spec.priorityClassName`` (its value is looked up by the session input, as for kgpu's own),
annotation ``volcano.sh/card.request``, and Volcano's "one card type per job". Its pods find
it by ``scheduling.k8s.io/group-name`` and name their card by ``volcano.sh/card.name`` (read
with the pod, :mod:`kgpu.model.card`). Its ``status.phase`` is read as its admission
(``JobSpec.enqueued``), since Volcano's job controller creates a Job's pods only once its
PodGroup is ``Inqueue``: empty or ``Pending`` not admitted (judged by enqueue, pods or
none), ``Inqueue`` admitted (not judged again; its ``minResources`` held in its queue until
its pods are placed), ``Running``, ``Unknown`` or ``Completed`` neither (its pods are
scheduled as any job's). The phase is on the object, so a restarted kgpu reads back what it
admitted.

Every malformed field raises :class:`ConversionError` naming the object (with its API group,
so that a Volcano Queue and a kgpu Queue of one name are told apart), the field, the value
and what was expected; the caller reports it and schedules the rest.
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping
from dataclasses import replace
from fractions import Fraction
from typing import Any, Final

from kgpu.kube.api.resource_types import Resource, meta, parse_time
from kgpu.kube.objects.fields import MISSING, Fields
from kgpu.kube.objects.queue_podgroup import card_quota, card_request, min_member, quantity_text
from kgpu.model.job import JobKey, JobSpec
from kgpu.model.ledger import (
    INSUFFICIENT_CPU_QUOTA,
    INSUFFICIENT_MEMORY_QUOTA,
    INSUFFICIENT_SCALAR_QUOTA,
)
from kgpu.model.queue import DEFAULT_QUEUE, QueueSpec, with_card_quota
from kgpu.model.resources import CPU, GPU, MEMORY
from kgpu.model.units import MIB, MILLI_PER_CPU, MILLI_PER_GPU

GROUP: Final = "scheduling.volcano.sh"
VERSION: Final = "v1beta1"
VOLCANO_QUEUES: Final = Resource(GROUP, VERSION, "queues", "Queue", namespaced=False)
VOLCANO_PODGROUPS: Final = Resource(GROUP, VERSION, "podgroups", "PodGroup", namespaced=True)
# Volcano's hierarchy hangs from a Queue named root; kgpu's top level stands for it.
ROOT_QUEUE: Final = "root"
# A PodGroup's status.phase as its admission (see the docstring); Volcano's five phases.
PHASE_PENDING: Final = "Pending"
PHASE_INQUEUE: Final = "Inqueue"
ADMISSION: Final[Mapping[str, bool | None]] = {
    "": False,
    PHASE_PENDING: False,
    PHASE_INQUEUE: True,
    "Running": None,
    "Unknown": None,
    "Completed": None,
}

# What kgpu accounts of a ResourceList; other names are passed over (see the docstring).
RESOURCE_NAMES: Final = {"cpu": CPU, "memory": MEMORY, "nvidia.com/gpu": GPU}


# The capacity-card plugin's refusal reasons, which events on pods of Volcano's queues carry
# (kgpu's own queues say FailedScheduling, as kube-scheduler does).
SEED_REASONS: Final = (INSUFFICIENT_CPU_QUOTA, INSUFFICIENT_MEMORY_QUOTA, INSUFFICIENT_SCALAR_QUOTA)


def volcano_reason(code: str, queue: str, volcano: Container[str]) -> bool:
    """Whether a pod refused with ``code`` in ``queue`` is told ``code`` as its event's
    reason: a quota refusal in one of Volcano's queues (``volcano``: their names)."""
    return code in SEED_REASONS and queue in volcano


def volcano_queue_ref(obj: Mapping[str, Any]) -> str:
    return f"Queue {meta(obj).get('name') or '(no name)'} ({GROUP})"


def volcano_podgroup_ref(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    return f"PodGroup {m.get('namespace') or 'default'}/{m.get('name') or '(no name)'} ({GROUP})"


def is_root_queue(obj: Mapping[str, Any]) -> bool:
    """Volcano's root Queue: the top of its tree, which kgpu's top level stands for."""
    return meta(obj).get("name") == ROOT_QUEUE


def resource_list(fields: Fields, spec: Mapping[str, Any], key: str, field: str) -> dict[str, int]:
    """A ResourceList under ``spec[key]`` in the core's units (see the module docstring)."""
    out: dict[str, int] = {}
    for name, value in fields.mapping(spec, key, field).items():
        resource = RESOURCE_NAMES.get(str(name))
        if resource is None:
            fields.quantity(value, f"{field}[{name}]")  # still a quantity, or refused
            continue
        quantity = fields.quantity(value, f"{field}[{name}]")
        # Rounded down, as a node's capacity is: a limit never grows in the reading.
        scale = {CPU: Fraction(MILLI_PER_CPU), MEMORY: Fraction(1, MIB),
                 GPU: Fraction(MILLI_PER_GPU)}[resource]  # fmt: skip
        out[resource] = math.floor(quantity * scale)
    return out


def _name(fields: Fields, obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], str, dict[str, str]]:
    m = fields.mapping(obj, "metadata", "metadata")
    name = m.get("name", MISSING)
    if not isinstance(name, str) or not name:
        raise fields.fail("metadata.name", name, "a non-empty string")
    return m, name, fields.strings(m, "annotations", "annotation")


def _within(
    fields: Fields, what: str, amounts: Mapping[str, int], ceiling: Mapping[str, int]
) -> None:
    for resource, amount in amounts.items():
        top = ceiling.get(resource)
        if top is not None and amount > top:
            shown = {CPU: "cpu", MEMORY: "memory", GPU: "nvidia.com/gpu"}[resource]
            raise fields.fail(
                f"{what}[{shown}]",
                quantity_text(resource, amount),
                f"at most spec.capability[{shown}] ({quantity_text(resource, top)})",
            )


def volcano_queue_from_k8s(obj: Mapping[str, Any]) -> QueueSpec:
    """A Volcano Queue as the session's QueueSpec (ConversionError if malformed)."""
    fields = Fields(volcano_queue_ref(obj))
    _, name, annotations = _name(fields, obj)
    spec = fields.mapping(obj, "spec", "spec")
    capability = resource_list(fields, spec, "capability", "spec.capability")
    deserved = resource_list(fields, spec, "deserved", "spec.deserved")
    guarantee_spec = fields.mapping(spec, "guarantee", "spec.guarantee")
    guarantee = resource_list(fields, guarantee_spec, "resource", "spec.guarantee.resource")
    _within(fields, "spec.deserved", deserved, capability)
    _within(fields, "spec.guarantee.resource", guarantee, capability)
    weight = spec.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
        raise fields.fail("spec.weight", weight, "a whole number, at least 1")
    reclaimable = spec.get("reclaimable", True)
    if reclaimable is None:
        reclaimable = True
    if not isinstance(reclaimable, bool):
        raise fields.fail("spec.reclaimable", reclaimable, "true or false")
    parent = fields.string(spec, "parent", "spec.parent")
    if parent == name:
        raise fields.fail("spec.parent", parent, "the name of another queue, or root")
    queue = QueueSpec(
        name=name,
        parent="" if parent == ROOT_QUEUE else parent,
        deserved=deserved,
        limit=capability,
        over_quota_weight=dict.fromkeys((CPU, MEMORY, GPU), float(weight)),
        guarantee=guarantee,
        reclaimable=reclaimable,
    )
    quota = card_quota(fields, annotations)
    if quota is None:
        return queue
    carded = with_card_quota(queue, quota)
    weights = dict.fromkeys((CPU, MEMORY, GPU, *quota), float(weight))
    return replace(carded, over_quota_weight=weights)


def volcano_podgroup_from_k8s(obj: Mapping[str, Any]) -> JobSpec:
    """A Volcano PodGroup as the session's JobSpec, priority 0: the session gives it its
    PriorityClass's value or its pods' highest, as for kgpu's own PodGroups."""
    fields = Fields(volcano_podgroup_ref(obj))
    m, name, annotations = _name(fields, obj)
    namespace = fields.string(m, "namespace", "metadata.namespace") or "default"
    spec = fields.mapping(obj, "spec", "spec")
    low = min_member(fields, spec)
    fields.string(spec, "priorityClassName", "spec.priorityClassName")
    request = card_request(fields, annotations)
    status = fields.mapping(obj, "status", "status")
    phase = fields.string(status, "phase", "status.phase")
    if phase not in ADMISSION:
        raise fields.fail("status.phase", phase, f"one of {', '.join(p for p in ADMISSION if p)}")
    return JobSpec(
        key=JobKey(f"{namespace}/{name}"),
        queue=fields.string(spec, "queue", "spec.queue") or DEFAULT_QUEUE,
        min_member=low,
        created=parse_time(m.get("creationTimestamp")),
        card_request=request,
        min_resources=resource_list(fields, spec, "minResources", "spec.minResources"),
        one_card_type=True,
        enqueued=ADMISSION[phase],
    )

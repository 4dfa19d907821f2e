"""KAI Scheduler's Queues (``scheduling.run.ai/v2``) and PodGroups (``scheduling.run.ai/v2alpha2``)
read into the model's QueueSpec and JobSpec.

A KAI Queue gives, for each of ``spec.resources.gpu``, ``.cpu`` and ``.memory``, in KAI's own
units (GPUs, may be fractions; millicores; megabytes of 10^6 bytes):

- ``quota``: the deserved amount; ``-1`` is a quota no demand exceeds (KAI: "unlimited");
  0 or unset: nothing guaranteed;
- ``limit``: ``-1`` no limit; 0 or unset: nothing beyond the quota (KAI's "no additional
  resources"), so the quota is the limit (none when the quota is ``-1``); a limit below
  the quota caps the quota too. A resource the Queue does not name at all is neither
  guaranteed nor limited;
- ``overQuotaWeight``: the resource's weight when what no quota claims is divided (unset: 1).

``spec.parentQueue`` and ``spec.priority`` (unset: 100, KAI's default) as they are;
``spec.preemptMinRuntime`` and ``spec.reclaimMinRuntime`` (Go durations: ``"90s"``, ``"1h30m"``)
become the queue's one min-runtime, the longer of the two (kgpu has one for preempt and
reclaim alike), so no pod is evicted earlier than KAI would evict it. A Queue that sets
neither takes its nearest ancestor's (:func:`with_inherited_min_runtime`), as in KAI.

A KAI PodGroup, as KAI's pod grouper writes it, gives ``spec.minMember`` (the gang; unset: 1),
``spec.queue``, ``spec.priorityClassName`` (read by the session, as for kgpu's own PodGroups)
and its creation time. Its pods name it in the ``pod-group-name`` annotation the pod grouper
sets. Sub-groups (``spec.subGroups``, ``spec.minSubGroup``) are gangs inside the gang that kgpu
does not place: a PodGroup that has them is refused, and its pods wait with why, rather than
being placed in a way KAI would not place them.

The functions here are pure; every malformed field raises
:class:`~kgpu.kube.objects.fields.ConversionError` naming the object, the field, the value and
what was expected.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any, Final

from kgpu.kube.api.resource_types import parse_time
from kgpu.kube.objects.fields import MISSING, ConversionError, Fields
from kgpu.model.job import JobKey, JobSpec
from kgpu.model.queue import QueueSpec
from kgpu.model.resources import CPU, GPU, MEMORY
from kgpu.model.units import MIB, MILLI_PER_GPU

GROUP: Final = "scheduling.run.ai"
QUEUE_API_VERSION: Final = f"{GROUP}/v2"
PODGROUP_API_VERSION: Final = f"{GROUP}/v2alpha2"
DEFAULT_PRIORITY: Final = 100  # KAI's, for a Queue that sets none
# KAI's -1 quota: deserved beyond any demand (a thousand million GPUs, cores or MiB blocks).
UNLIMITED_QUOTA: Final = 10**12
MIN_RUNTIME_FIELDS: Final = ("preemptMinRuntime", "reclaimMinRuntime")

# KAI's resource names, and the model resource and the model units per KAI unit of each.
_RESOURCES: Final = {
    "gpu": (GPU, Fraction(MILLI_PER_GPU)),  # GPUs, 0.5 is half of one
    "cpu": (CPU, Fraction(1)),  # millicores, as the model's milli-CPU
    "memory": (MEMORY, Fraction(10**6, MIB)),  # megabytes (10^6 bytes) into MiB
}
_AMOUNT: Final = "a number of at least 0, or -1"
_DURATION: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_S: Final = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),
    "μs": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}


def is_kai(obj: Mapping[str, Any]) -> bool:
    """Whether an object is of KAI's group (by its ``apiVersion``)."""
    version = obj.get("apiVersion")
    return isinstance(version, str) and version.split("/", 1)[0] == GROUP


def queue_ref(obj: Mapping[str, Any]) -> str:
    m = obj.get("metadata")
    name = m.get("name") if isinstance(m, Mapping) else None
    return f"KAI Queue {name if isinstance(name, str) and name else '(no name)'}"


def podgroup_ref(obj: Mapping[str, Any]) -> str:
    m = obj.get("metadata")
    m = m if isinstance(m, Mapping) else {}
    namespace = m.get("namespace") if isinstance(m.get("namespace"), str) else ""
    name = m.get("name") if isinstance(m.get("name"), str) else ""
    return f"KAI PodGroup {namespace or 'default'}/{name or '(no name)'}"


def _name(fields: Fields, obj: Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    m = fields.mapping(obj, "metadata", "metadata")
    name = m.get("name", MISSING)
    if not isinstance(name, str) or not name:
        raise fields.fail("metadata.name", name, "a non-empty string")
    return m, name


def _number(fields: Fields, value: object, field: str) -> Fraction | None:
    """A KAI amount: None for -1 (unlimited), else a number of at least 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise fields.fail(field, value, _AMOUNT)
    if value == -1:
        return None
    if value < 0:
        raise fields.fail(field, value, _AMOUNT)
    return Fraction(value)


def _resources(
    fields: Fields, spec: Mapping[str, Any]
) -> tuple[dict[str, int], dict[str, int], dict[str, float]]:
    deserved: dict[str, int] = {}
    limit: dict[str, int] = {}
    weights: dict[str, float] = {}
    resources = fields.mapping(spec, "resources", "spec.resources")
    for name, entry in resources.items():
        known = _RESOURCES.get(str(name))
        field = f"spec.resources.{name}"
        if known is None:
            raise fields.fail(field, entry, "only gpu, cpu and memory")
        if entry is None:
            continue
        if not isinstance(entry, Mapping):
            raise fields.fail(field, entry, "a mapping with quota, limit and overQuotaWeight")
        resource, scale = known
        quota = _number(fields, entry.get("quota", 0), f"{field}.quota")
        cap = _number(fields, entry.get("limit", 0), f"{field}.limit")
        deserved[resource] = UNLIMITED_QUOTA if quota is None else math.floor(quota * scale)
        if cap == 0 and quota is not None:
            limit[resource] = deserved[resource]  # nothing beyond the quota
        elif cap:
            # A limit below the quota (or a -1 quota) caps what the queue is guaranteed too.
            limit[resource] = math.floor(cap * scale)
            deserved[resource] = min(deserved[resource], limit[resource])
        weight = entry.get("overQuotaWeight")
        if weight is not None:
            if (
                isinstance(weight, bool)
                or not isinstance(weight, int | float)
                or not math.isfinite(weight)
                or weight < 0
            ):
                raise fields.fail(f"{field}.overQuotaWeight", weight, "a number of at least 0")
            weights[resource] = float(weight)
    return deserved, limit, weights


def parse_duration(fields: Fields, value: object, field: str) -> float:
    """A Go duration (``metav1.Duration``: ``"300s"``, ``"1h30m"``, ``"1.5h"``) in seconds."""
    expected = 'a duration of at least 0 such as "90s", "10m" or "1h30m"'
    if not isinstance(value, str) or not value:
        raise fields.fail(field, value, expected)
    if value == "0":
        return 0.0
    total, at = Fraction(0), 0
    for match in _DURATION.finditer(value):
        if match.start() != at:
            break
        total += Fraction(match.group(1)) * _UNIT_S[match.group(2)]
        at = match.end()
    if at != len(value):
        raise fields.fail(field, value, expected)
    return float(total)


def min_runtime_set(obj: Mapping[str, Any]) -> bool:
    """Whether a KAI Queue sets a min-runtime of its own (else it inherits its parent's)."""
    spec = obj.get("spec")
    return isinstance(spec, Mapping) and any(spec.get(f) is not None for f in MIN_RUNTIME_FIELDS)


def queue_from_kai(obj: Mapping[str, Any]) -> QueueSpec:
    """A KAI Queue as the session's QueueSpec (ConversionError if malformed)."""
    fields = Fields(queue_ref(obj))
    _, name = _name(fields, obj)
    spec = fields.mapping(obj, "spec", "spec")
    deserved, limit, weights = _resources(fields, spec)
    priority = spec.get("priority", DEFAULT_PRIORITY)
    if priority is None:
        priority = DEFAULT_PRIORITY
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise fields.fail("spec.priority", priority, "an integer")
    runtimes = [
        parse_duration(fields, spec[f], f"spec.{f}")
        for f in MIN_RUNTIME_FIELDS
        if spec.get(f) is not None
    ]
    return QueueSpec(
        name=name,
        parent=fields.string(spec, "parentQueue", "spec.parentQueue"),
        deserved=deserved,
        limit=limit,
        over_quota_weight=weights,
        priority=priority,
        min_runtime_s=max(runtimes, default=0.0),
    )


def with_inherited_min_runtime(
    queues: Sequence[QueueSpec], unset: set[str] | frozenset[str]
) -> list[QueueSpec]:
    """``queues`` where each queue named in ``unset`` (KAI Queues that set no min-runtime)
    takes its nearest ancestor's that sets one, or none; the others as they are."""
    by_name = {q.name: q for q in queues}

    def inherited(queue: QueueSpec) -> float:
        seen = {queue.name}
        parent = by_name.get(queue.parent)
        while parent is not None and parent.name not in seen:
            if parent.name not in unset:
                return parent.min_runtime_s
            seen.add(parent.name)
            parent = by_name.get(parent.parent)
        return 0.0

    out = []
    for queue in queues:
        if queue.name in unset and (least := inherited(queue)) != queue.min_runtime_s:
            queue = replace(queue, min_runtime_s=least)
        out.append(queue)
    return out


def podgroup_from_kai(obj: Mapping[str, Any]) -> JobSpec:
    """A KAI PodGroup as the session's JobSpec, priority 0: the session gives it its
    PriorityClass's value or its pods' highest, as for kgpu's own PodGroups."""
    fields = Fields(podgroup_ref(obj))
    m, name = _name(fields, obj)
    namespace = fields.string(m, "namespace", "metadata.namespace") or "default"
    spec = fields.mapping(obj, "spec", "spec")
    low = spec.get("minMember")
    low = 1 if low is None else low
    if isinstance(low, bool) or not isinstance(low, int) or low < 1:
        raise fields.fail("spec.minMember", low, "a whole number, at least 1")
    for field in ("subGroups", "minSubGroup"):
        if spec.get(field) not in (None, [], 0):
            raise fields.fail(
                f"spec.{field}",
                spec[field],
                "none: kgpu does not place KAI sub-groups (docs/MIGRATING.md)",
            )
    fields.string(spec, "priorityClassName", "spec.priorityClassName")
    return JobSpec(
        key=JobKey(f"{namespace}/{name}"),
        queue=fields.string(spec, "queue", "spec.queue"),
        min_member=low,
        created=parse_time(m.get("creationTimestamp")),
    )


def shadowed(obj: Mapping[str, Any], kgpu_kind: str, key: str) -> ConversionError:
    """The error for a KAI object whose name a kgpu.io object of the same kind already has:
    kgpu's own wins, so that installing kgpu's objects beside KAI's never silently changes
    which one a pod's job is read from."""
    ref = queue_ref(obj) if kgpu_kind == "Queue" else podgroup_ref(obj)
    return ConversionError(
        ref,
        "metadata.name",
        key.rsplit("/", 1)[-1],
        f"a name no kgpu.io {kgpu_kind} has: the kgpu.io {kgpu_kind} {key} is used, "
        "this one is left out",
    )

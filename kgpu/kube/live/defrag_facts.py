"""What defragmentation's move rules read (:class:`~kgpu.actions.defrag_rules.MoveFacts`),
from the live caches of one session.

- Running pods: this scheduler's bound pods on Ready nodes, not being deleted (the
  snapshot's ``bound``), that a controller owns (an ``ownerReference`` with
  ``controller: true``): a moved pod is evicted, and only a controller starts it again;
  a pod of its own would be gone for good, which is no move.
- Started: ``status.startTime`` (when the kubelet took the pod); a pod without one has not
  started, and counts as started now (the min-runtime protects it).
- Min-runtime: that of the pod's queue (the queue kgpu recorded when it bound the pod, a
  record it signed; else its PodGroup's; else its label's), besides the profile's.
- Jobs: a pod that names a PodGroup is of that job; ``job_min`` is the PodGroup's
  ``minMember`` (1 for a PodGroup that does not exist) and ``job_running`` counts the
  job's running pods as above, owned or not.
- Budgets: each pod's PodDisruptionBudgets (:mod:`kgpu.kube.objects.disruption_budgets`)
  by key, and each budget's ``disruptionsAllowed``. A budget that could not be read is
  refused alone (its Warning event names what is wrong), and stands for "no disruption"
  over every pod of its namespace: the Eviction API still applies it, and moves it would
  refuse are not worth planning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kgpu.actions.defrag_rules import MoveFacts, RunningPod
from kgpu.kube.api.resource_types import meta, parse_time
from kgpu.kube.objects.disruption_budgets import LiveBudget
from kgpu.kube.objects.queue_podgroup import pod_group_of
from kgpu.kube.objects.queue_tenancy import ADMITTED_QUEUE_ANNOTATION
from kgpu.kube.snapshot.cache_snapshot import CacheSnapshot
from kgpu.kube.snapshot.session_input import QueueObjects

Obj = Mapping[str, Any]


@dataclass(slots=True)
class Budgets:
    """The namespace's readable budgets, and the keys of those that could not be read."""

    readable: list[LiveBudget] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)


def move_facts(
    snap: CacheSnapshot,
    objects: QueueObjects,
    budgets: Mapping[str, Budgets],
    now: float,
) -> MoveFacts:
    """The facts for a round over ``snap.state``; ``budgets`` by namespace; ``now`` in
    seconds since the epoch (the clock of ``status.startTime``)."""
    allocations = snap.state.allocations
    min_runtime = {q.name: q.min_runtime_s for q in objects.queues}
    on_node: dict[int, list[RunningPod]] = {}
    job_running: dict[str, int] = {}
    allowed: dict[str, int] = {}
    for found in budgets.values():
        allowed.update((b.budget.key, b.allowed) for b in found.readable)
        allowed.update((key, 0) for key in found.unreadable)
    for pod in snap.bound:
        spec = pod.spec
        alloc = allocations.get(spec.key)
        if alloc is None:
            continue
        job = str(pod_group_of(spec))
        if job:
            job_running[job] = job_running.get(job, 0) + 1
        if not controlled(pod.obj):
            continue
        queue = "" if spec.key in snap.unsigned else spec.annotations.get(ADMITTED_QUEUE_ANNOTATION)
        group = objects.jobs.get(pod_group_of(spec)) if job else None
        queue = queue or (group.queue if group is not None else "") or spec.queue
        namespace = spec.key.split("/", 1)[0]
        running = RunningPod(
            spec,
            started(pod.obj, now),
            min_runtime.get(queue, 0.0),
            job,
            selecting(budgets.get(namespace), namespace, labels(pod.obj)),
        )
        on_node.setdefault(alloc.node, []).append(running)
    job_min = {str(key): spec.min_member for key, spec in objects.jobs.items()}
    return MoveFacts(
        now,
        lambda n: on_node.get(n, ()),
        job_min,
        job_running,
        allowed,
    )


def selecting(
    found: Budgets | None, namespace: str, pod_labels: Mapping[str, str]
) -> tuple[str, ...]:
    """The keys of the budgets that cover a pod; every unreadable one of its namespace."""
    if found is None:
        return ()
    keys = [b.budget.key for b in found.readable if b.selects(namespace, pod_labels)]
    return tuple(sorted([*keys, *found.unreadable]))


def controlled(obj: Obj) -> bool:
    """Whether a controller owns the pod (and so starts it again once evicted)."""
    owners = meta(obj).get("ownerReferences")
    return isinstance(owners, list) and any(
        isinstance(o, Mapping) and o.get("controller") is True for o in owners
    )


def started(obj: Obj, now: float) -> float:
    status = obj.get("status")
    return parse_time(status.get("startTime") if isinstance(status, Mapping) else None) or now


def labels(obj: Obj) -> dict[str, str]:
    """The pod's labels (the API server keeps them strings; anything else selects nothing)."""
    found = meta(obj).get("labels")
    if not isinstance(found, Mapping):
        return {}
    return {str(k): v for k, v in found.items() if isinstance(v, str)}


def by_namespace(budgets: Iterable[tuple[str, LiveBudget | None]]) -> dict[str, Budgets]:
    """(key, budget or None when unreadable) pairs, grouped by namespace."""
    out: dict[str, Budgets] = {}
    for key, budget in budgets:
        found = out.setdefault(key.split("/", 1)[0], Budgets())
        if budget is None:
            found.unreadable.append(key)
        else:
            found.readable.append(budget)
    return out

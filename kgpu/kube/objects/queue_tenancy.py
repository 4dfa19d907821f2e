"""Who may use a queue: the namespaces a Queue serves, and the queue a pod was admitted to.

A Queue's ``spec.namespaces`` lists, by name, the namespaces whose pods and PodGroups may
name it; a Queue without the field serves every namespace (as before the field existed),
and ``namespaces: []`` serves none. A parent's list bounds its whole subtree: a pod may use
a queue when its namespace is served by the queue and by every ancestor that lists
namespaces. docs/QUEUES.md ("Who may use a queue") says why names and not a label selector.

A pod's queue is fixed when it is bound: the scheduler writes the queue it charged the pod
to into the annotation ``kgpu.io/admitted-queue``, carried by the Binding itself (so the
pod is never seen bound without it), and reads a bound pod's queue from there, never from
its labels again. The annotation of a pod that is not bound means nothing and is not read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kgpu.kube.objects.fields import ConversionError, Fields
from kgpu.model.queue import DEFAULT_QUEUE

ADMITTED_QUEUE_ANNOTATION: Final = "kgpu.io/admitted-queue"
NAMESPACES_FIELD: Final = "spec.namespaces"
# A namespace's name is a DNS-1123 label.
_NAMESPACE: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SHOWN: Final = 5  # namespaces named in a refusal; the rest are counted


def served_namespaces(obj: Mapping[str, Any]) -> frozenset[str] | None:
    """The namespaces a Queue object serves; None when it lists none (it serves every
    namespace). ConversionError when ``spec.namespaces`` is not a list of namespace names."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    fields = Fields(f"Queue {name or '(no name)'}")
    spec = fields.mapping(obj, "spec", "spec")
    listed = spec.get("namespaces")
    if listed is None:
        return None
    if not isinstance(listed, list):
        raise fields.fail(NAMESPACES_FIELD, listed, "a list of namespace names")
    for i, item in enumerate(listed):
        if not isinstance(item, str) or not _NAMESPACE.fullmatch(item):
            raise fields.fail(
                f"{NAMESPACES_FIELD}[{i}]", item, "a namespace name (a DNS-1123 label)"
            )
    return frozenset(listed)


@dataclass(frozen=True, slots=True)
class QueueFences:
    """The namespaces each readable Queue serves (None: every one) and its parent."""

    served: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    parents: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_objects(cls, objs: Iterable[Mapping[str, Any]]) -> QueueFences:
        """From Queue objects; one that cannot be read fences nothing here (it is refused
        where it is read, and its jobs wait for it)."""
        served: dict[str, frozenset[str] | None] = {}
        parents: dict[str, str] = {}
        for obj in objs:
            meta = obj.get("metadata")
            name = meta.get("name") if isinstance(meta, Mapping) else None
            if not isinstance(name, str) or not name:
                continue
            try:
                served[name] = served_namespaces(obj)
            except ConversionError:
                continue
            spec = obj.get("spec")
            # KAI's Queues (scheduling.run.ai) name theirs in spec.parentQueue.
            parent = (
                (spec.get("parent") or spec.get("parentQueue"))
                if isinstance(spec, Mapping)
                else None
            )
            if isinstance(parent, str) and parent:
                parents[name] = parent
        return cls(served, parents)

    def refusal(self, namespace: str, queue: str) -> str | None:
        """None when ``namespace`` may use ``queue`` ("" is the default queue); else why
        not, naming the Queue whose ``spec.namespaces`` leaves the namespace out."""
        name = queue or DEFAULT_QUEUE
        seen: set[str] = set()
        while name and name not in seen:  # a cycle is the queue tree's problem, reported there
            seen.add(name)
            listed = self.served.get(name)
            if listed is not None and namespace not in listed:
                where = "" if name == (queue or DEFAULT_QUEUE) else f" (a parent of {queue})"
                return (
                    f"namespace {namespace} may not use queue {queue or DEFAULT_QUEUE}: "
                    f"Queue {name}{where} serves {_names(listed)} ({NAMESPACES_FIELD})"
                )
            name = self.parents.get(name, "")
        return None


def _names(namespaces: frozenset[str]) -> str:
    if not namespaces:
        return "no namespace"
    ordered = sorted(namespaces)
    shown = ", ".join(ordered[:_SHOWN])
    more = len(ordered) - _SHOWN
    word = "namespace" if len(ordered) == 1 else "namespaces"
    return f"{word} {shown}" + (f" and {more} more" if more > 0 else "")

"""Who may use a queue, at admission: the webhook's half of the fence
(:mod:`kgpu.kube.objects.queue_tenancy` says who may; the scheduler checks it again before
placing a pod, so the fence holds with the webhook down or not installed).

- A pod of ours (CREATE or UPDATE) whose queue label names a queue its namespace may not
  use is denied; so is one with no queue label and no PodGroup when the ``default`` Queue
  does not serve its namespace. A pod in a PodGroup without a queue label takes its queue
  from the PodGroup, which is checked itself.
- A kgpu.io PodGroup (CREATE or UPDATE) whose ``spec.queue`` its namespace may not use.
- A bound pod's queue label may not change (UPDATE): its queue was fixed when it was bound
  (``kgpu.io/admitted-queue``), and a label that says otherwise would only mislead.

The Queues are listed, kept a few seconds (:class:`kgpu.kube.api.listed.Listed`). When they
cannot be read the object is admitted with a warning, whatever the failure policy: the
scheduler refuses the pod anyway, so denying would only stop pods while the API is slow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from kgpu.kube.api.listed import ListUnavailable
from kgpu.kube.objects.fields import MISSING, ConversionError
from kgpu.kube.objects.node_pod import QUEUE_LABELS
from kgpu.kube.objects.queue_podgroup import GANG_ANNOTATIONS
from kgpu.kube.objects.queue_tenancy import ADMITTED_QUEUE_ANNOTATION, QueueFences

Obj = Mapping[str, Any]
Verdict = tuple[str | None, str | None]  # (denial, warning)


class QueueSource(Protocol):
    def items(self) -> list[dict[str, Any]]:
        """The cluster's kgpu.io Queues; ListUnavailable if they cannot be read."""
        ...


def fence_problem(
    kind: object, obj: Obj, old: Obj | None, scheduler_name: str, queues: QueueSource
) -> Verdict:
    """Whether ``obj`` (a Pod or PodGroup, named; ``old``: what it was, on UPDATE) names a
    queue its namespace may use."""
    if kind == "Pod":
        if _section(obj, "spec").get("schedulerName") != scheduler_name:
            return None, None
        if old is not None and _section(old, "spec").get("nodeName"):
            return _fixed(obj, old), None
        labels = _section(_section(obj, "metadata"), "labels")
        key = next((k for k in QUEUE_LABELS if labels.get(k)), QUEUE_LABELS[0])
        notes = _section(_section(obj, "metadata"), "annotations")
        if key not in labels and any(notes.get(k) for k in GANG_ANNOTATIONS):
            return None, None  # its PodGroup's queue, checked with the PodGroup
        return _check(obj, f"label {key}", labels.get(key, MISSING), queues)
    if kind == "PodGroup" and str(obj.get("apiVersion", "")).startswith("kgpu.io/"):
        queue = _section(obj, "spec").get("queue")
        if isinstance(queue, str) and queue:
            return _check(obj, "spec.queue", queue, queues)
    return None, None


def _check(obj: Obj, field: str, queue: object, queues: QueueSource) -> Verdict:
    meta = _section(obj, "metadata")
    ref = f"{obj.get('kind') or 'Pod'} {meta.get('namespace')}/{meta.get('name')}"
    try:
        fences = QueueFences.from_objects(queues.items())
    except ListUnavailable as exc:
        return None, (
            f"{ref}: its queue was not checked ({exc}); the scheduler checks it before "
            "placing the pod"
        )
    namespace = str(meta.get("namespace") or "default")
    why = fences.refusal(namespace, queue if isinstance(queue, str) else "")
    if why is None:
        return None, None
    expected = f"a queue that serves namespace {namespace}"
    return f"{ConversionError(ref, field, queue, expected)}; {why}", None


def _fixed(obj: Obj, old: Obj) -> str | None:
    """A bound pod keeps the queue it was bound in."""
    new_labels = _section(_section(obj, "metadata"), "labels")
    old_labels = _section(_section(old, "metadata"), "labels")
    now = next((new_labels[k] for k in QUEUE_LABELS if new_labels.get(k)), "")
    before = next((old_labels[k] for k in QUEUE_LABELS if old_labels.get(k)), "")
    if now == before:
        return None
    key = next((k for k in QUEUE_LABELS if new_labels.get(k) or old_labels.get(k)), "")
    meta = _section(obj, "metadata")
    then = f'"{before}"' if before else "no queue label"
    return str(
        ConversionError(
            f"Pod {meta.get('namespace')}/{meta.get('name')}",
            f"label {key}",
            new_labels.get(key, MISSING),
            f"{then}, as when the pod was bound: a running pod's queue is fixed "
            f"({ADMITTED_QUEUE_ANNOTATION}); create a new pod to use another queue",
        )
    )


def _section(parent: Obj, key: str) -> Mapping[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, Mapping) else {}

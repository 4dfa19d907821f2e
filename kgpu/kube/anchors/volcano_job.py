"""A Volcano Job (``batch.volcano.sh/v1alpha1``) into the PodGroup and pods Volcano's job
controller makes of it, for ``kgpu simulate manifests`` (live, Volcano's own controller
does this and kgpu reads what it made).

As Volcano's admission webhook defaults a Job and its controller expands it:

- ``spec.queue`` defaults to ``default``, ``spec.schedulerName`` to ``volcano`` (or the
  caller's ``scheduler_name``), a task's name to ``default<i>``, ``spec.minAvailable`` (0 or
  absent) to the sum of the tasks' ``minAvailable`` where each sets one, else of their
  ``replicas``; a ``minAvailable`` above the replicas is refused, as the webhook refuses it;
- the PodGroup is named after the Job (``<job>-<uid>`` where the Job has a uid, as Volcano
  names it since v1.8) in its namespace, with the Job's annotations and labels (so
  ``volcano.sh/card.request`` reaches the scheduler), ``minMember`` = ``minAvailable``,
  ``queue``, ``priorityClassName`` and ``minResources``: the requests (else limits, which the
  API server copies into requests) of the first ``minAvailable`` pods in task order;
- each task makes ``replicas`` pods ``<job>-<task>-<i>`` from its template: the template's
  labels and annotations (``volcano.sh/card.name`` among them), plus
  ``scheduling.k8s.io/group-name``, ``volcano.sh/job-name``, ``volcano.sh/task-spec`` and
  ``volcano.sh/queue-name``; ``schedulerName`` and ``priorityClassName`` the Job's where the
  template sets none.

A malformed field raises :class:`ConversionError` naming the Job, the field, the value and
what was expected.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, Final

from kgpu.kube.api.resource_types import meta
from kgpu.kube.objects.fields import Fields
from kgpu.kube.objects.queue_podgroup import GANG_ANNOTATIONS

GROUP_NAME: Final = GANG_ANNOTATIONS[1]  # scheduling.k8s.io/group-name
DEFAULT_SCHEDULER: Final = "volcano"
DEFAULT_TASK: Final = "default"
JOB_NAME_KEY: Final = "volcano.sh/job-name"
TASK_SPEC_KEY: Final = "volcano.sh/task-spec"
QUEUE_NAME_KEY: Final = "volcano.sh/queue-name"

Obj = dict[str, Any]


def is_volcano_job(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Job" and str(obj.get("apiVersion", "")).startswith(
        "batch.volcano.sh/"
    )


def job_ref(obj: Mapping[str, Any]) -> str:
    m = meta(obj)
    return (
        f"Job {m.get('namespace') or 'default'}/{m.get('name') or '(no name)'} (batch.volcano.sh)"
    )


def _count(fields: Fields, parent: Mapping[str, Any], key: str, field: str, default: int) -> int:
    value = parent.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fields.fail(field, value, "a whole number, at least 0")
    return value


def _requests(fields: Fields, template: Mapping[str, Any], field: str) -> dict[str, Fraction]:
    """What one pod of the template asks: its containers' requests, else their limits."""
    out: dict[str, Fraction] = {}
    spec = fields.mapping(template, "spec", f"{field}.spec")
    for i, container in enumerate(fields.items(spec, "containers", f"{field}.spec.containers")):
        where = f"{field}.spec.containers[{i}].resources"
        resources = fields.mapping(container, "resources", where)
        limits = fields.mapping(resources, "limits", f"{where}.limits")
        requests = {**limits, **fields.mapping(resources, "requests", f"{where}.requests")}
        for name, value in requests.items():
            out[str(name)] = out.get(str(name), Fraction(0)) + fields.quantity(
                value, f"{where}[{name}]"
            )
    return out


def _quantity(amount: Fraction) -> str:
    return str(amount.numerator) if amount.denominator == 1 else f"{round(amount * 1000)}m"


def expand_job(
    obj: Mapping[str, Any], scheduler_name: str = DEFAULT_SCHEDULER
) -> tuple[Obj, list[Obj]]:
    """The PodGroup and the pods of a Volcano Job (ConversionError if malformed)."""
    fields = Fields(job_ref(obj))
    m = fields.mapping(obj, "metadata", "metadata")
    name = m.get("name")
    if not isinstance(name, str) or not name:
        raise fields.fail("metadata.name", name, "a non-empty string")
    namespace = fields.string(m, "namespace", "metadata.namespace") or "default"
    annotations = fields.strings(m, "annotations", "annotation")
    labels = fields.strings(m, "labels", "label")
    spec = fields.mapping(obj, "spec", "spec")
    queue = fields.string(spec, "queue", "spec.queue") or "default"
    scheduler = fields.string(spec, "schedulerName", "spec.schedulerName") or scheduler_name
    priority_class = fields.string(spec, "priorityClassName", "spec.priorityClassName")
    tasks = fields.items(spec, "tasks", "spec.tasks")
    if not tasks:
        raise fields.fail("spec.tasks", spec.get("tasks"), "at least one task")
    uid = m.get("uid")
    group = f"{name}-{uid}" if isinstance(uid, str) and uid else name
    pods: list[Obj] = []
    seen: set[str] = set()
    total = floor = 0
    per_pod: list[dict[str, Fraction]] = []
    for i, task in enumerate(tasks):
        field = f"spec.tasks[{i}]"
        task_name = fields.string(task, "name", f"{field}.name") or f"{DEFAULT_TASK}{i}"
        if task_name in seen:
            raise fields.fail(f"{field}.name", task_name, "a name no other task of the Job has")
        seen.add(task_name)
        replicas = _count(fields, task, "replicas", f"{field}.replicas", 1)
        task_min = task.get("minAvailable")
        floor += replicas if task_min is None else _count(fields, task, "minAvailable",
                                                          f"{field}.minAvailable", 0)  # fmt: skip
        total += replicas
        template = fields.mapping(task, "template", f"{field}.template")
        if not template:
            raise fields.fail(f"{field}.template", task.get("template"), "a pod template")
        asks = _requests(fields, template, f"{field}.template")
        for index in range(replicas):
            pods.append(
                _pod(
                    fields,
                    template,
                    f"{field}.template",
                    name,
                    namespace,
                    task_name,
                    index,
                    group,
                    queue,
                    scheduler,
                    priority_class,
                )
            )
            per_pod.append(asks)
    low = _count(fields, spec, "minAvailable", "spec.minAvailable", 0) or floor
    if low > total:
        raise fields.fail("spec.minAvailable", low, f"at most the replicas of its tasks ({total})")
    least: dict[str, Fraction] = {}
    for asks in per_pod[:low]:
        for resource, amount in asks.items():
            least[resource] = least.get(resource, Fraction(0)) + amount
    podgroup_meta: Obj = {"name": group, "namespace": namespace}
    if annotations:
        podgroup_meta["annotations"] = dict(annotations)
    if labels:
        podgroup_meta["labels"] = dict(labels)
    podgroup_spec: Obj = {"minMember": low, "queue": queue}
    if priority_class:
        podgroup_spec["priorityClassName"] = priority_class
    if least:
        podgroup_spec["minResources"] = {r: _quantity(a) for r, a in sorted(least.items())}
    podgroup: Obj = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": podgroup_meta,
        "spec": podgroup_spec,
    }
    return podgroup, pods


def _pod(
    fields: Fields,
    template: Mapping[str, Any],
    field: str,
    job: str,
    namespace: str,
    task: str,
    index: int,
    group: str,
    queue: str,
    scheduler: str,
    priority_class: str,
) -> Obj:
    tm = fields.mapping(template, "metadata", f"{field}.metadata")
    annotations = fields.strings(tm, "annotations", f"{field} annotation")
    labels = fields.strings(tm, "labels", f"{field} label")
    annotations.update(
        {GROUP_NAME: group, JOB_NAME_KEY: job, TASK_SPEC_KEY: task, QUEUE_NAME_KEY: queue}
    )
    labels.update({JOB_NAME_KEY: job, QUEUE_NAME_KEY: queue})
    spec = copy.deepcopy(dict(fields.mapping(template, "spec", f"{field}.spec")))
    if not spec.get("schedulerName"):
        spec["schedulerName"] = scheduler
    if priority_class and not spec.get("priorityClassName"):
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-{task}-{index}",
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }

"""A live session's input: the cache snapshot's pods as jobs and tasks, in their queues.

The session itself runs through :func:`kgpu.actions.session_runner.run_session`, the one
runner. What goes into it (:class:`kgpu.framework.session_snapshot.Snapshot`):

- the queues: every Queue that can be read (one that cannot gets a Warning and is left out,
  so its jobs wait with "queue ... does not exist or is invalid"); the session adds the
  ``default`` queue, with no quota and no limit, unless a Queue of that name exists;
- running tasks: our bound pods that are not being deleted, and the pods whose binds are in
  flight (``assumed``), since the time their pod started (or was created);
- pending tasks: the batch of pods the loop chose this session;
- jobs: each PodGroup those tasks name, every PodGroup that waits for admission with no
  pod here (:mod:`kgpu.kube.snapshot.awaiting_groups`: Volcano's, whose pods are created
  only once it is admitted), and every other pod as a job of its own (its
  priority and creation time order it among the others, as the plain allocate did). A
  PodGroup's priority is the value of the PriorityClass its ``spec.priorityClassName``
  names, else its pods' highest. A class that does not exist gets the PodGroup a Warning
  and the pods' priority, as Volcano does: the pods themselves were admitted at theirs, and
  a typo in what only orders jobs should not hold a whole job back.

A cluster with no Queue object at all is not held to queues: every job goes to ``default``,
whatever queue its pods or PodGroup name, and card names and requests check no quota (a card
name still chooses the GPU model), so installing kgpu changes nothing until the first Queue
is created. From then on a job goes to its PodGroup's ``spec.queue``, else its pods'
queue label, else ``default``.

A pod naming a PodGroup that cannot be read is not scheduled: it waits with the PodGroup's
error (``blocked``), and the PodGroup gets a Warning.

Who may use a queue (:mod:`kgpu.kube.objects.queue_tenancy`), once queues are enforced:

- a job's queue is fixed once one of its pods is bound: the queue recorded on its bound pods
  (``kgpu.io/admitted-queue``, written with the Binding), whatever its PodGroup or labels
  say now; relabelling a running pod, or moving its PodGroup, changes no accounting;
- the pending pods of a job whose namespace may not use its queue are not scheduled: they
  wait with why (``blocked``), so no pod of one namespace spends another's quota;
- the running pods of such a job (bound before the Queue listed its namespaces, or bound
  without kgpu) are charged to ``default``, never to the queue they may not use.

``admitted``: the queue each pending pod of the batch is charged to if it binds, which the
binder records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kgpu.framework.session_snapshot import Snapshot
from kgpu.kube.anchors import kai, volcano
from kgpu.kube.api.resource_types import meta, object_key, parse_time, resource_version, uid
from kgpu.kube.objects.node_pod import ConversionError
from kgpu.kube.objects.queue_podgroup import (
    pod_group_of,
    podgroup_from_k8s,
    podgroup_priority,
    queue_from_k8s,
)
from kgpu.kube.objects.queue_tenancy import ADMITTED_QUEUE_ANNOTATION, QueueFences
from kgpu.kube.snapshot.awaiting_groups import awaiting_jobs
from kgpu.kube.snapshot.cache_snapshot import Assumed, CacheSnapshot, PendingPod, Problem
from kgpu.model.card import NAME_ANNOTATION
from kgpu.model.job import JobKey, JobSpec, Task
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.queue import DEFAULT_QUEUE, QueueSpec, QueueTree

Obj = Mapping[str, Any]


@dataclass(slots=True)
class QueueObjects:
    """The Queues and PodGroups of the caches, read: specs, the objects they came from, and
    what could not be read (``invalid``: key → message). ``priorities``: the jobs whose
    PodGroup names an existing PriorityClass, and its value."""

    queues: list[QueueSpec] = field(default_factory=list)
    queue_objs: dict[str, Obj] = field(default_factory=dict)
    jobs: dict[JobKey, JobSpec] = field(default_factory=dict)
    podgroup_objs: dict[JobKey, Obj] = field(default_factory=dict)
    invalid: dict[str, str] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    priorities: dict[JobKey, int] = field(default_factory=dict)
    fences: QueueFences = field(default_factory=QueueFences)
    # Which of queue_objs and podgroup_objs are Volcano's (scheduling.volcano.sh): their
    # status is Volcano's shape, and a Queue's is its queue controller's to write.
    volcano: set[str] = field(default_factory=set)

    @property
    def enforced(self) -> bool:
        """Queues hold jobs to them once any Queue object exists, readable or not."""
        return bool(self.queue_objs)


@dataclass(slots=True)
class SessionInput:
    snapshot: Snapshot
    blocked: dict[PodKey, tuple[str, str]]  # pods not given to the session: code, why
    admitted: dict[PodKey, str] = field(default_factory=dict)  # the batch's pods' queues


class QueueReader:
    """Reads Queues and PodGroups, remembering conversions by (uid, resourceVersion) so a
    session reads only the objects that changed."""

    def __init__(self) -> None:
        self._seen: dict[
            tuple[str, str, str], tuple[str, QueueSpec | JobSpec | ConversionError]
        ] = {}

    def _read(self, kind: str, obj: Obj) -> QueueSpec | JobSpec | ConversionError:
        mark = _mark(kind, obj)
        version = resource_version(obj)
        known = self._seen.get(mark)
        if known is not None and known[0] == version and version:
            return known[1]
        converters = _READERS[_group(obj)]
        convert = converters.queue if kind == "Queue" else converters.podgroup
        try:
            read: QueueSpec | JobSpec | ConversionError = convert(obj)
        except ConversionError as exc:
            read = exc
        self._seen[mark] = (version, read)
        return read

    def read(
        self,
        queue_objs: Iterable[Obj],
        podgroup_objs: Iterable[Obj],
        priority_class_objs: Iterable[Obj] = (),
    ) -> QueueObjects:
        """The Queues and PodGroups of every group kgpu reads (kgpu.io, KAI's, Volcano's:
        :func:`reads`), told apart by their ``apiVersion``. Where two groups name one queue
        or PodGroup, kgpu's own is used, then KAI's, then Volcano's, and the other is left
        out with a Warning, so that a switch never mixes two definitions."""
        out = QueueObjects()
        classes = {str(meta(c).get("name")): c.get("value") for c in priority_class_objs}
        live: set[tuple[str, str, str]] = set()
        kai_unset: set[str] = set()
        for obj in sorted(queue_objs, key=_ranked):
            group = _group(obj)
            if group == volcano.GROUP and volcano.is_root_queue(obj):
                continue  # Volcano's root is kgpu's top level, not a queue
            live.add(_mark("Queue", obj))
            name = str(meta(obj).get("name") or "")
            if name in out.queue_objs:
                out.problems.append(_shadowed(obj, "Queue", name, out.queue_objs[name]))
                continue
            out.queue_objs[name] = obj
            if group == volcano.GROUP:
                out.volcano.add(name)
            elif group == kai.GROUP and not kai.min_runtime_set(obj):
                kai_unset.add(name)
            spec = self._read("Queue", obj)
            if isinstance(spec, QueueSpec):
                out.queues.append(spec)
            else:
                out.invalid[name] = f"{spec}; the queue is left out"
                out.problems.append(Problem(obj, "InvalidQueue", out.invalid[name]))
        if kai_unset:
            out.queues = kai.with_inherited_min_runtime(out.queues, kai_unset)
        out.fences = QueueFences.from_objects(out.queue_objs.values())
        for problem in QueueTree(out.queues).problems:
            found = out.queue_objs.get(problem.queue)
            if found is not None:
                out.invalid[problem.queue] = f"{problem.message}; the queue is left out"
                out.problems.append(Problem(found, "InvalidQueue", out.invalid[problem.queue]))
        for obj in sorted(podgroup_objs, key=_ranked):
            live.add(_mark("PodGroup", obj))
            key = JobKey(object_key(obj) if meta(obj).get("namespace") else "")
            if key and key in out.podgroup_objs:
                out.problems.append(_shadowed(obj, "PodGroup", key, out.podgroup_objs[key]))
                continue
            if key and _group(obj) == volcano.GROUP:
                out.volcano.add(key)
            job = self._read("PodGroup", obj)
            if isinstance(job, JobSpec):
                out.jobs[job.key] = job
                out.podgroup_objs[job.key] = obj
                self._read_priority(obj, job.key, classes, out)
            elif key:
                out.podgroup_objs[key] = obj
                out.invalid[key] = f"{job}; its pods are not scheduled until it is fixed"
                out.problems.append(Problem(obj, "InvalidPodGroup", out.invalid[key]))
        for mark in [m for m in self._seen if m not in live]:
            del self._seen[mark]
        return out

    @staticmethod
    def _read_priority(
        obj: Obj, key: JobKey, classes: Mapping[str, object], out: QueueObjects
    ) -> None:
        """Not remembered with the PodGroup's conversion: a PriorityClass created or deleted
        changes the answer without a new version of the PodGroup."""
        try:
            priority = podgroup_priority(obj, classes)
        except ConversionError as exc:
            message = f"{exc}; the job takes its pods' highest priority until it is fixed"
            out.problems.append(Problem(obj, "InvalidPriorityClassName", message))
            return
        if priority is not None:
            out.priorities[key] = priority


@dataclass(frozen=True, slots=True)
class _Converters:
    rank: int  # where two groups name one queue or PodGroup, the lower rank's is used
    queue: Callable[[Obj], QueueSpec]
    podgroup: Callable[[Obj], JobSpec]


KGPU_GROUP = "kgpu.io"
_READERS: dict[str, _Converters] = {
    KGPU_GROUP: _Converters(0, queue_from_k8s, podgroup_from_k8s),
    kai.GROUP: _Converters(1, kai.queue_from_kai, kai.podgroup_from_kai),
    volcano.GROUP: _Converters(
        2, volcano.volcano_queue_from_k8s, volcano.volcano_podgroup_from_k8s
    ),
}
SHADOWED = "Shadowed"


def _group(obj: Obj) -> str:
    """The object's API group among those read; kgpu's for any other (as before the
    anchors were read, a Queue or PodGroup was read as kgpu's)."""
    group = str(obj.get("apiVersion", "")).split("/", 1)[0]
    return group if group in _READERS else KGPU_GROUP


def reads(obj: Obj) -> bool:
    """Whether ``obj`` is a Queue or PodGroup of a group :class:`QueueReader` reads."""
    group = str(obj.get("apiVersion", "")).split("/", 1)[0]
    return obj.get("kind") in ("Queue", "PodGroup") and group in _READERS


def _ranked(obj: Obj) -> tuple[int, str]:
    return _READERS[_group(obj)].rank, object_key(obj)


def _mark(kind: str, obj: Obj) -> tuple[str, str, str]:
    return kind, _group(obj), uid(obj) or object_key(obj)


def _shadowed(obj: Obj, kind: str, key: str, used: Obj) -> Problem:
    """An anchor's Queue or PodGroup whose name an earlier one (kgpu's own, else KAI's)
    already has: left out, with why."""
    if kai.is_kai(obj):
        return Problem(obj, f"Invalid{kind}", str(kai.shadowed(obj, kind, key)))
    group = str(used.get("apiVersion", "")).split("/", 1)[0]
    message = (
        f"{kind} {key} (scheduling.volcano.sh) is not used: a {group} {kind} of that name "
        "exists, and kgpu uses it; rename or delete one of them"
    )
    return Problem(obj, SHADOWED, message)


INVALID_PODGROUP = "InvalidPodGroup"
QUEUE_NOT_ALLOWED = "QueueNotAllowed"


def assemble(
    snap: CacheSnapshot,
    batch: Sequence[PendingPod],
    assumed: Mapping[PodKey, Assumed],
    objects: QueueObjects,
    now: float | None = None,
    victims_leaving: frozenset[PodKey] = frozenset(),
) -> SessionInput:
    """The session's snapshot over ``snap.state`` (shared: the session's binds stay in it).
    ``victims_leaving``: preemptors that may be placed but evict no one this session."""
    now = time.time() if now is None else now
    allocations = snap.state.allocations
    tasks: list[Task] = []
    pods_of: dict[JobKey, list[Task]] = {}
    blocked: dict[PodKey, tuple[str, str]] = {}
    created: dict[str, float] = {}
    recorded: dict[JobKey, str] = {}  # the queue a job's bound pods were admitted to

    def add(task: Task, obj: Obj | None) -> None:
        tasks.append(task)
        pods_of.setdefault(task.job, []).append(task)
        created[task.key] = parse_time(meta(obj).get("creationTimestamp")) if obj else now

    for pod in snap.bound:
        if pod.spec.key in allocations:
            job = job_of(pod.spec)
            add(Task(pod.spec, job, _started(pod.obj, now)), pod.obj)
            queue = pod.spec.annotations.get(ADMITTED_QUEUE_ANNOTATION)
            if pod.spec.key in snap.unsigned:
                queue = None  # not kgpu's record: the labels say, fenced like a new pod's
            if queue is not None and (job not in recorded or queue < recorded[job]):
                recorded[job] = queue  # the least, should its pods disagree: deterministic
    running = {t.key for t in tasks}
    for key, entry in assumed.items():
        if key in allocations and key not in running:
            add(Task(entry.spec, job_of(entry.spec), now), None)
    batch_jobs: list[tuple[PodKey, JobKey]] = []
    for pod in batch:
        job = job_of(pod.spec)
        if job in objects.invalid:
            blocked[pod.spec.key] = (INVALID_PODGROUP, objects.invalid[job])
            continue
        add(Task(pod.spec, job), pod.obj)
        batch_jobs.append((pod.spec.key, job))
    jobs: list[JobSpec] = []
    queue_of: dict[JobKey, str] = {}
    refused: set[str] = set()
    for job_key, members in pods_of.items():
        spec = objects.jobs.get(job_key)
        named = recorded.get(job_key)
        if named is None:
            named = spec.queue if spec is not None else ""
            named = named or next((t.pod.queue for t in members if t.pod.queue), "")
        queue = _fenced(job_key, named, members, objects, allocations, blocked, refused)
        queue_of[job_key] = queue
        priority = max(t.pod.priority for t in members)
        if spec is not None:
            priority = objects.priorities.get(job_key, priority)
            jobs.append(replace(spec, queue=queue, priority=priority))
        elif len(members) == 1 and str(members[0].pod.key) == str(job_key):
            alone = members[0].pod
            jobs.append(JobSpec(job_key, queue, priority=priority, created=created[alone.key]))
        # else: pods of a PodGroup that does not exist; the session says so
    fences = objects.fences if objects.enforced else None
    jobs.extend(awaiting_jobs(objects.jobs, pods_of, objects.priorities, fences, objects.volcano))
    # Only the batch's pods bind: what a running pod was charged to is recorded already.
    admitted = {key: queue_of.get(job, "") or DEFAULT_QUEUE for key, job in batch_jobs}
    if refused:
        tasks = [t for t in tasks if t.key not in refused]
    if not objects.enforced:
        # No queue has a card quota, so card names and requests would only refuse pods:
        # they keep choosing the GPU model (the pod's request holds it), nothing more.
        # Most jobs already are so: copying each, every session, cost about 4 µs a running pod.
        jobs = [
            replace(j, queue="", card_request={}) if j.queue or j.card_request else j for j in jobs
        ]
        tasks = [_without_card(t) for t in tasks]
    queues = objects.queues if objects.enforced else []
    session = Snapshot(snap.state, queues, jobs, tasks, now, victims_leaving)
    return SessionInput(session, blocked, admitted)


def _fenced(
    job: JobKey,
    queue: str,
    members: Sequence[Task],
    objects: QueueObjects,
    allocations: Container[str],
    blocked: dict[PodKey, tuple[str, str]],
    refused: set[str],
) -> str:
    """The queue ``job`` is charged to: ``queue``, unless its namespace may not use it; then
    its pending pods are refused (into ``blocked`` and ``refused``) and its running ones go
    to the default queue."""
    if not objects.enforced:
        return queue
    namespace = str(job).split("/", 1)[0]
    why = objects.fences.refusal(namespace, queue)
    if why is None:
        return queue
    for task in members:
        if task.key not in allocations:
            blocked[task.pod.key] = (QUEUE_NOT_ALLOWED, f"{why}; the pod is not scheduled")
            refused.add(task.key)
    return ""


def job_of(pod: PodSpec) -> JobKey:
    """The job a pod is a task of: its PodGroup, else itself."""
    return pod_group_of(pod) or JobKey(pod.key)


def _without_card(task: Task) -> Task:
    pod = task.pod
    if NAME_ANNOTATION not in pod.annotations:
        return task
    rest = {k: v for k, v in pod.annotations.items() if k != NAME_ANNOTATION}
    return replace(task, pod=replace(pod, annotations=rest))


def _started(obj: Obj, now: float) -> float:
    status = obj.get("status")
    start = status.get("startTime") if isinstance(status, Mapping) else None
    return parse_time(start) or parse_time(meta(obj).get("creationTimestamp")) or now

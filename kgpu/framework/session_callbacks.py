"""The session plugins' callbacks, and the one rule by which each kind of them combines.

Plugins register in ``on_open`` by appending to ``session.callbacks``' lists; the actions
and the session ask only the combining methods below, never the lists (as Volcano keeps
``session_plugins.go`` apart from ``session.go``). Plugins are asked in profile order:

- ``job_order``, ``task_order``, ``queue_order``, ``victim_order`` give sort keys; keys
  compare in registration order, so the first plugin that tells two items apart decides
  (Volcano's "first non-zero wins"). Ties fall back to creation time, then name; victims
  to the youngest first. A plugin's keys are tuples of one length: job and queue keys
  are the plugins' tuples laid end to end, then the tie-breakers, one flat tuple whose
  items compare natively (a nested tuple compares each level for equality first, then
  again for order: most of a heap's cost where queues are re-keyed after every job).
- ``job_ready(job, pods)``: every plugin must agree; with none, one pod makes a job ready.
- ``job_valid``, ``enqueueable``, ``allocatable``: every plugin must pass; the first
  refusal is the reason given. (Queue limits are checked before them, by the session.)
- ``preemptable`` and ``reclaimable`` judge a victim unit (an extra pod, or all pods of a
  job whose gang would break): every plugin that registered must accept it; with none
  registered there are no victims. ``can_reclaim``: every plugin must agree, none: no.
  ``reclaim_from(job, queues)`` narrows the queues victims may come from, before any unit
  is judged: each plugin keeps a subset of what the one before it kept.
- ``on_admit(job)`` handlers all hear of each job the enqueue action admits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kgpu.framework.status import Status
from kgpu.model.job import JobInfo, Task
from kgpu.model.queue import QueueTree
from kgpu.model.resources import Vector

Key = tuple[Any, ...]
Verdict = Status | None  # None: no objection


class SessionCallbacks:
    def __init__(self, tree: QueueTree) -> None:
        self.tree = tree
        # Queue names break ties in the queue order: read once (the tree stands for the
        # session, and is plain Python even compiled).
        self._names: list[str] = [spec.name for spec in tree.specs]
        self.job_order: list[Callable[[JobInfo], Key]] = []
        self.task_order: list[Callable[[Task], Key]] = []
        self.queue_order: list[Callable[[int], Key]] = []
        self.victim_order: list[Callable[[JobInfo, Task], Key]] = []
        self.job_ready: list[Callable[[JobInfo, int], bool]] = []
        self.job_valid: list[Callable[[JobInfo], Verdict]] = []
        self.enqueueable: list[Callable[[JobInfo, Vector], Verdict]] = []
        self.allocatable: list[Callable[[JobInfo, Task, Vector], Verdict]] = []
        self.preemptable: list[Callable[[JobInfo, Sequence[Task]], bool]] = []
        self.reclaimable: list[Callable[[JobInfo, Sequence[Task]], bool]] = []
        self.can_reclaim: list[Callable[[JobInfo, Vector], bool]] = []
        self.reclaim_from: list[Callable[[JobInfo, set[int]], set[int]]] = []
        self.on_admit: list[Callable[[JobInfo], None]] = []

    # ------------------------------------------------------------------ orders

    # The keys are asked for tens of thousands of times a session: lists, not generators,
    # and none where one plugin orders (most profiles): the same key, built directly.
    def job_key(self, job: JobInfo) -> Key:
        order = self.job_order
        spec = job.spec
        if len(order) == 1:
            return (*order[0](job), spec.created, spec.key)
        return _joined([f(job) for f in order], spec.created, spec.key)

    def task_key(self, task: Task) -> Key:
        order = self.task_order
        if len(order) == 1:
            return (order[0](task), task.pod.key)
        return (*[f(task) for f in order], task.pod.key)

    def sort_tasks(self, tasks: list[Task]) -> None:
        """Sort ``tasks`` (a job's pending pods) by ``task_key``, in place."""
        # Some 4,000 jobs a session have several pods, which mostly share the plugins' part
        # of the key (one priority a job) and come in their names' order: then the key's
        # order is the names', and checking that costs a comparison of names a pod, where
        # the sort by the whole key built a key of two tuples a pod and compared them
        # generically.
        order = self.task_order
        if len(order) > 1:
            tasks.sort(key=self.task_key)
            return
        if order:
            head = order[0]
            first = head(tasks[0])
            for i in range(1, len(tasks)):
                if head(tasks[i]) != first:
                    tasks.sort(key=self.task_key)
                    return
        for i in range(1, len(tasks)):
            if tasks[i].pod.key < tasks[i - 1].pod.key:
                tasks.sort(key=_pod_name)
                return

    def queue_key(self, queue: int) -> Key:
        """Where ``queue`` comes in the queue order (asked once a queue an action: the
        picker's heaps hold ``queue_entry``)."""
        return self.queue_entry(queue)[:-1]

    def queue_entry(self, queue: int) -> Key:
        """``queue_key`` with the queue itself appended, built as one tuple: what a heap of
        queues holds (the name before it is unique: the queue is never compared)."""
        order = self.queue_order
        if len(order) == 1:
            return (*order[0](queue), self._names[queue], queue)
        return _joined([f(queue) for f in order], self._names[queue], queue)

    def victim_key(self, job: JobInfo, task: Task) -> Key:
        """Where running ``task`` of ``job`` comes as a victim."""
        return (*self.victim_head(job, task), -task.started, task.pod.key)

    def victim_head(self, job: JobInfo, task: Task) -> Key:
        """The plugins' part of ``victim_key``: the same for the pods of one job. The
        job is given with the pod: the pools ask it of every running job, and finding the
        job from the pod is a lookup in a dictionary of every pod."""
        return tuple([f(job, task) for f in self.victim_order])  # a list: asked once a job

    # ------------------------------------------------------------------ jobs

    def ready(self, job: JobInfo, pods: int | None = None) -> bool:
        count = len(job.running) + len(job.placed) if pods is None else pods
        # Asked some hundred thousand times a session: a loop, not a generator.
        for judge in self.job_ready:
            if not judge(job, count):
                return False
        return count >= 1 if not self.job_ready else True

    def needed(self, job: JobInfo) -> list[Task]:
        """The job's next pods: those that make it ready, or one if it is ready."""
        count = 1
        while count < len(job.pending) and not self.ready(job, job.alive + count):
            count += 1
        return job.pending[:count]

    def validity(self, job: JobInfo) -> Verdict:
        """Why ``job`` cannot be scheduled at all, if a plugin says so."""
        for judge in self.job_valid:
            verdict = judge(job)
            if verdict is not None:
                return verdict
        return None

    def enqueue_verdict(self, job: JobInfo, vec: Vector) -> Verdict:
        for judge in self.enqueueable:
            verdict = judge(job, vec)
            if verdict is not None:
                return verdict
        return None

    def allocate_verdict(self, job: JobInfo, task: Task, vec: Vector) -> Verdict:
        for judge in self.allocatable:  # a loop: asked for every pod placed or tried
            verdict = judge(job, task, vec)
            if verdict is not None:
                return verdict
        return None

    def admit(self, job: JobInfo) -> None:
        for handler in self.on_admit:
            handler(job)

    # ------------------------------------------------------------------ victims

    def preempts(self) -> bool:
        """Whether any plugin judges victims of preemption (none: there are none)."""
        return bool(self.preemptable)

    def reclaims(self) -> bool:
        """Whether plugins judge victims of reclaim and which jobs may reclaim."""
        return bool(self.reclaimable) and bool(self.can_reclaim)

    def may_reclaim(self, job: JobInfo, need: Vector) -> bool:
        for judge in self.can_reclaim:
            if not judge(job, need):
                return False
        return bool(self.can_reclaim)

    def victim_queues(self, job: JobInfo, candidates: set[int]) -> set[int]:
        """Of ``candidates``, the queues ``job`` may reclaim from."""
        out = candidates
        for f in self.reclaim_from:
            out = f(job, out)
        return out

    def victim_ok(self, job: JobInfo, unit: Sequence[Task], reclaim: bool) -> bool:
        judges = self.reclaimable if reclaim else self.preemptable
        for judge in judges:
            if not judge(job, unit):
                return False
        return bool(judges)


def _pod_name(task: Task) -> str:
    return task.pod.key


def _joined(keys: list[Key], *tail: Any) -> Key:
    """The plugins' keys laid end to end, then ``tail``."""
    out: list[Any] = []
    for key in keys:
        out.extend(key)
    out.extend(tail)
    return tuple(out)

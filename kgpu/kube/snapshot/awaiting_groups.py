"""The PodGroups a session takes in without pods: those that wait for admission.

Volcano's job controller creates a Job's pods only once the Job's PodGroup is ``Inqueue``,
which the scheduler's enqueue writes; so a PodGroup with no pods yet must still be judged,
or its pods are never created. Such a PodGroup records its admission
(``JobSpec.enqueued`` not None: only Volcano's do). Every one that has no pod in the
session goes into it:

- not admitted (phase empty or ``Pending``): enqueue judges it by its ``minResources``;
  admitted, it is written ``Inqueue`` (its status, from the session's figures); turned
  down, it stays ``Pending`` with why;
- admitted (``Inqueue``) with its pods not created yet, or waiting out of this batch: its
  ``minResources`` hold their place in its queue, so that the next judged count them.

Its queue is the PodGroup's (``default`` when it names none), or no queue at all when no
Queue object exists (as every job then). One whose namespace may not use its queue is
left out: its pods, once created, are refused with why, as any pod of such a job.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable, Mapping
from dataclasses import replace

from kgpu.kube.objects.queue_tenancy import QueueFences
from kgpu.model.job import JobKey, JobSpec
from kgpu.model.queue import DEFAULT_QUEUE


def awaiting_jobs(
    jobs: Mapping[JobKey, JobSpec],
    with_pods: Container[JobKey],
    priorities: Mapping[JobKey, int],
    fences: QueueFences | None,
    anchored: Collection[str],
) -> Iterable[JobSpec]:
    """The jobs of ``jobs`` that record their admission and have no pod in the session
    (``with_pods``), at their PodGroup's priority. ``fences``: None when queues are not
    enforced; ``anchored``: the keys of the PodGroups that may record one (Volcano's)."""
    for key, spec in jobs.items():
        if spec.enqueued is None or key in with_pods or key not in anchored:
            continue
        if fences is not None:
            namespace = str(key).split("/", 1)[0]
            if fences.refusal(namespace, spec.queue or DEFAULT_QUEUE) is not None:
                continue
        yield replace(spec, priority=priorities.get(key, spec.priority))

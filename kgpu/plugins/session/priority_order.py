"""Priority: higher-priority jobs and pods first, and lower-priority jobs as victims.

Inside a queue a job of higher priority is tried first, then (the session's fallback) the
job created first. Preemption may only take pods of jobs of strictly lower priority than
the preemptor; among victims the lowest-priority job goes first.
"""

from __future__ import annotations

from collections.abc import Sequence

from kgpu.framework.session import Session, SessionPlugin
from kgpu.model.job import JobInfo, Task
from kgpu.plugins import names


class PriorityOrder:
    name = names.PRIORITY

    def on_open(self, session: Session) -> None:
        job_for = session.job_for
        session.callbacks.job_order.append(lambda job: (-job.spec.priority,))
        session.callbacks.task_order.append(lambda task: (-task.pod.priority,))
        session.callbacks.victim_order.append(
            lambda job, task: (job.spec.priority, task.pod.priority)
        )

        def lower(preemptor: JobInfo, unit: Sequence[Task]) -> bool:
            bar = preemptor.spec.priority
            if len(unit) == 1:  # most units: no generator for them, asked thousands of times
                return job_for(unit[0]).spec.priority < bar
            return all(job_for(t).spec.priority < bar for t in unit)

        session.callbacks.preemptable.append(lower)


_: type[SessionPlugin] = PriorityOrder

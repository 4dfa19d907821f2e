"""The backfill action: place pods that ask for nothing, wherever the filters let them.

Such pods (Volcano's BestEffort) take no CPU, memory or GPU, so they change no queue's
share and need no turn in the queue order; they only need a node that passes the filters
(selectors, taints, the pod limit). A job of them still obeys its gang.
"""

from __future__ import annotations

from kgpu.actions.placement import best_effort, placer_of
from kgpu.framework.session import Session


class Backfill:
    name = "backfill"

    def execute(self, session: Session) -> None:
        placer = placer_of(session)
        for job in session.jobs:
            if not job.pending or job.problem or not job.admitted:
                continue  # most jobs run with nothing pending: that test first
            tasks = [t for t in job.pending if best_effort(t)]
            if not tasks:
                continue
            statement = session.statement()
            for task in tasks:
                if job.alive >= job.max_pods:
                    break
                why = placer.place(statement, job, task)
                if why is not None:
                    session.note(job, why, [task])
            if session.callbacks.ready(job):
                statement.commit()
            else:
                statement.discard()

"""The enqueue action: admit jobs whose minimum fits their queue's limits and quotas.

Jobs already holding resources are admitted. Every other job with pods waiting is judged,
queue by queue in queue order and job by job in job order: its minimum (the pods it needs
to be ready) must fit the CPU, memory and GPU limits of its queue and of every ancestor,
counting what they hold and the minimums of the jobs admitted before it, and every
``enqueueable`` plugin must agree (capacity-card checks the job's card request). A
PodGroup's ``minResources``, where it asks more of a resource than those pods, counts
instead (Volcano admits a job by it). A job turned down stays out of allocate, and its
PodGroup gets an event with the reason.

A PodGroup that records its own admission (``JobSpec.enqueued``: Volcano's, whose job
controller creates the pods only once it is ``Inqueue``) is judged while it records none,
with pods or without (then by its ``minResources`` alone), and never again once it does:
its pods go to allocate, and its minimum is held in its queue's account (the session does
that as it opens) so that the next ones judged count it.
"""

from __future__ import annotations

from kgpu.framework.session import Session
from kgpu.model.job import JobInfo


class Enqueue:
    name = "enqueue"

    def execute(self, session: Session) -> None:
        candidates = [
            job
            for job in session.jobs
            if not job.problem
            and (job.pending if job.spec.enqueued is None else not job.spec.enqueued)
            and not job.running
            and not job.placed
        ]
        # Queue by queue in queue order, then job by job: a queue's key ends with its
        # unique name, so this is the order of (queue key, job key), with fewer and
        # cheaper comparisons than sorting every job by the pair.
        by_queue: dict[int, list[JobInfo]] = {}
        for job in candidates:
            jobs = by_queue.get(job.queue)
            if jobs is None:
                by_queue[job.queue] = [job]
            else:
                jobs.append(job)
        callbacks = session.callbacks
        ordered: list[JobInfo] = []
        for queue in sorted(by_queue, key=callbacks.queue_key):
            jobs = by_queue[queue]
            jobs.sort(key=callbacks.job_key)
            ordered.extend(jobs)
        for job in ordered:
            need = session.need(job)
            floor = job.spec.min_resources
            if floor:  # most jobs have none: no walk of an empty mapping
                for resource, amount in floor.items():
                    if amount > need.get(resource, 0):
                        need[resource] = amount
            verdict = session.check_enqueueable(job, need)
            if verdict is not None:
                job.admitted = False
                session.note(job, verdict)
                session.result.refused[job.key] = verdict
                session.event(job.key, "PodGroup", "Warning", verdict.reason_code, verdict.message)
                continue
            session.ledger.admit(job.queue, need)
            session.callbacks.admit(job)

"""The reclaim action: a queue below its fair share takes back from queues above theirs.

Queues are served in queue order (the least served first); in each, the jobs not ready
yet in job order. A job may reclaim only if every ``can_reclaim`` plugin agrees
(proportion: its queue stays within its fair share with the job's needs added). The
candidates are the running pods, past their queue's min-runtime, of the other queues
that hold more than their fair share; the ``reclaimable`` plugins judge each victim unit
(proportion: the victim's side stays at or above its deserved quota, the reclaimer's side
within its fair share). Placement and nomination then go as in preemption, in one
statement per job. As there, victim units are worked out once per action (from the
queues over their share as it starts), and a job that would fail like one that failed
before in its queue is not tried again in the action.
"""

from __future__ import annotations

import heapq

from kgpu.actions.ordering import QueuePicker
from kgpu.actions.placement import placer_of
from kgpu.actions.preempt import Failures, may_take_room, take_room
from kgpu.actions.victim_pool import VictimPool
from kgpu.framework.session import Session
from kgpu.framework.session_callbacks import Key
from kgpu.model.fair_share import dominant_ratio
from kgpu.model.job import JobInfo


class Reclaim:
    name = "reclaim"

    def execute(self, session: Session) -> None:
        if not session.callbacks.reclaims():
            return
        placer = placer_of(session)
        waiting: dict[int, list[tuple[Key, JobInfo]]] = {}
        for job in session.jobs:
            if may_take_room(session, job):
                waiting.setdefault(job.queue, []).append((session.callbacks.job_key(job), job))
        if not waiting:
            return
        for heap in waiting.values():
            heapq.heapify(heap)
        ledger, tree = session.ledger, session.tree
        # Candidates: pods of queues over their share as the action starts (all queues that
        # hold anything when no plugin computed fair shares: the judges decide then).
        over = {
            q
            for q in range(len(tree))
            if tree.is_leaf(q) and dominant_ratio(ledger.allocated[q], ledger.fair[q]) > 1
        }
        pool = VictimPool(session, [j for j in session.jobs if j.queue in over])
        candidates = set(pool.by_queue)  # read by the plugins, never changed: made once
        picker = QueuePicker(session, waiting)
        failures = Failures()  # what failed stays failed for the action (see preempt)
        while (leaf := picker.pick()) is not None:
            heap = waiting[leaf]
            _, job = heapq.heappop(heap)
            if not failures.known(session, job, leaf) and session.callbacks.may_reclaim(
                job, session.need(job)
            ):
                givers = session.callbacks.victim_queues(job, candidates)
                message = f"reclaimed by queue {tree.name(leaf)} for {job.key}"
                if not givers or not take_room(session, placer, job, pool, True, message, givers):
                    failures.add(session, job, leaf)
            picker.served(bool(heap))

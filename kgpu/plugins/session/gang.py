"""Gang: a job is ready when ``minMember`` of its pods hold (or will hold) resources.

With this plugin the allocate action places a job's first ``minMember`` pods through one
statement and keeps them only if all fit; pods past the minimum (an elastic job's extras)
are placed one by one afterwards. A job with fewer pods than its minimum can never be
ready and is reported as such rather than tried; but a job with no pod at all whose
PodGroup records its admission (Volcano's, whose pods are created once it is admitted) is
enqueue's to judge, not invalid.
"""

from __future__ import annotations

from kgpu.framework.session import Session, SessionPlugin
from kgpu.framework.status import Code, Status
from kgpu.model.job import JobInfo
from kgpu.plugins import names


class Gang:
    name = names.GANG

    def on_open(self, session: Session) -> None:
        session.callbacks.job_ready.append(lambda job, pods: pods >= job.spec.min_member)
        session.callbacks.job_valid.append(_valid)


def _valid(job: JobInfo) -> Status | None:
    pods = len(job.running) + len(job.pending) + len(job.placed)
    if pods >= job.spec.min_member or (not pods and job.spec.enqueued is not None):
        return None  # none yet, for a job whose pods are made once it is admitted: enqueue's
    message = f"job {job.key} has {pods} pods, fewer than its minMember {job.spec.min_member}"
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (message,), names.GANG, "NotEnoughPods")


_: type[SessionPlugin] = Gang

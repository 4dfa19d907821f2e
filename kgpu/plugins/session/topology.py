"""Topology: read each gang's topology request and the cluster's domains, once a session.

Added to a session by the runner when the profile declares topology levels (see
:mod:`kgpu.framework.topology_config`), never listed by name: without levels there is
nothing to place by. On open it works out the domains of every level over the session's
nodes and reads each job's request off its pods' annotations
(:mod:`kgpu.model.topology_request`); a job whose annotations cannot be read is invalid,
with the pod, the annotation, the value and the levels expected as its reason (a
``job_valid`` callback: every plugin must pass). The actions find both in the session's
scratch under :data:`TOPOLOGY` and place the gangs that asked domain by domain
(:mod:`kgpu.actions.topology_placement`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kgpu.framework.session import Session, SessionPlugin
from kgpu.framework.session_scratch import StateKey
from kgpu.framework.status import Code, Status
from kgpu.framework.topology_config import Topology
from kgpu.model.job import JobInfo, JobKey
from kgpu.model.topology_request import TopologyRequest, TopologyRequestError, gang_request
from kgpu.plugins import names
from kgpu.state.topology_domains import TopologyDomains

INVALID_REQUEST = "InvalidTopologyRequest"


@dataclass(slots=True)
class SessionTopology:
    """The profile's levels (name, node label), their domains, and each asking job's request."""

    levels: tuple[tuple[str, str], ...]
    domains: TopologyDomains
    requests: dict[JobKey, TopologyRequest] = field(default_factory=dict)


TOPOLOGY: StateKey[SessionTopology] = StateKey("topology")


class TopologyPlugin:
    name = names.TOPOLOGY

    def __init__(self, topology: Topology) -> None:
        self.levels = topology.pairs

    def on_open(self, session: Session) -> None:
        found = SessionTopology(self.levels, TopologyDomains(session.state, self.levels))
        session.scratch.set(TOPOLOGY, found)

        def valid(job: JobInfo) -> Status | None:
            pods = [t.pod for t in (*job.running, *job.placed, *job.pending)]
            try:
                request = gang_request(pods, self.levels)
            except TopologyRequestError as exc:
                return Status(
                    Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (str(exc),), self.name, INVALID_REQUEST
                )
            if request is not None:
                found.requests[job.key] = request
            return None

        session.callbacks.job_valid.append(valid)


_: type[SessionPlugin] = TopologyPlugin

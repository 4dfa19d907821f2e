"""What a session opens over: the cluster state, the queues, the jobs and their tasks, the
clock. Data only, built by the edge (from its caches) or a simulator, and read by
:class:`kgpu.framework.session.Session` when it opens."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kgpu.dra.inventory import DraInventory
from kgpu.model.job import JobSpec, Task
from kgpu.model.pod import PodKey
from kgpu.model.queue import QueueSpec
from kgpu.state.cluster import ClusterState


@dataclass(slots=True)
class Snapshot:
    state: ClusterState
    queues: Sequence[QueueSpec] = ()
    jobs: Sequence[JobSpec] = ()
    tasks: Sequence[Task] = ()
    now: float = 0.0
    # Pending pods whose victims of an earlier session are still terminating: they may be
    # placed, but they evict no one (another eviction would take more than they need).
    victims_leaving: frozenset[PodKey] = frozenset()
    # The DRA objects and their claims (None: no DRA). A session records the claims of the
    # pods it places in it, and counts their GPUs in their queues' accounts.
    dra: DraInventory | None = None

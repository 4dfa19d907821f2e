"""The profile switch for defragmentation, and the bounds on what one round may do.

Off by default: moving a pod restarts it, which only an administrator may decide is worth
the room it makes. One line turns it on in a profile::

    defragmentation: {enabled: true}

Every field is checked when the profile is read; a bad value is refused with the field,
the value and what was expected (pydantic's message, under the profile's name).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# Subsets of a node's pods are tried by size; four moves for one pod is already past
# what an administrator would accept, and C(16, 4) subsets per node bounds the search.
MAX_MOVES_PER_POD = 4


class Defragmentation(BaseModel):
    """When GPU pods wait while enough GPU sits idle in holes, move movable pods (see
    ``kgpu.actions.defrag_rules``) so that the waiting pods fit.

    - ``maxMovesPerRound``: moves one round may plan (one round per scheduling round that
      leaves pods waiting).
    - ``maxEvictionsPerMinute``: live (``kgpu run``), the most evictions asked in any 60
      seconds, whatever the rounds plan (``kgpu.kube.live.defrag_live``).
    - ``maxMovesPerPod``: the most moves that may be spent on one waiting pod.
    - ``maxNodesPerPod``: nodes examined per waiting pod, nearest to fitting first.
    - ``minRuntimeSeconds``: a pod is never moved before it has run this long (nor before
      its queue's min-runtime); a moved pod starts again, so it is protected anew.
    - ``moveCostSeconds``: what one move costs in the simulator, as seconds of the moved
      pod's GPUs lost to its restart (stop, reschedule, image pull, checkpoint reload).
    - ``preemptibleBelowPriority``: a pod without the ``kgpu.io/preemptible`` annotation is
      preemptible when its priority is below this (KAI's convention: below 100, the
      "build" priority, a pod may be preempted).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, strict=True)

    enabled: bool = False
    max_moves_per_round: int = Field(default=4, ge=1, le=1000, alias="maxMovesPerRound")
    max_evictions_per_minute: int = Field(default=10, ge=1, le=600, alias="maxEvictionsPerMinute")
    max_moves_per_pod: int = Field(default=2, ge=1, le=MAX_MOVES_PER_POD, alias="maxMovesPerPod")
    max_nodes_per_pod: int = Field(default=16, ge=1, le=4096, alias="maxNodesPerPod")
    min_runtime_seconds: float = Field(default=600.0, ge=0, alias="minRuntimeSeconds")
    move_cost_seconds: float = Field(default=300.0, ge=0, alias="moveCostSeconds")
    preemptible_below_priority: int = Field(default=100, alias="preemptibleBelowPriority")

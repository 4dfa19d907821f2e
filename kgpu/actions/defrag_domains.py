"""Where defragmentation may make room for a gang that requires a topology domain.

Topology placement (:mod:`kgpu.actions.topology_placement`) starts such a gang in one
domain of its required level or not at all, so room made pod by pod across domains would
not start it. The planner (:mod:`kgpu.actions.defrag_planner`) pins the gang to one domain
at a time; this says which, in order:

- a gang with pods running joins their domain, and only it (none where they are in more
  than one, or on nodes of none: topology placement would not place it either);
- otherwise the domains whose nodes that take pods have GPU enough for the pods it needs,
  the most idle GPU first (the nearest to holding it, so the fewest moves), then by the
  domain's path; at most ``MAX_DOMAINS``, so that a round costs the same on any cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from kgpu.actions.defrag_planner import Domain
from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.state.topology_domains import TopologyDomains

MAX_DOMAINS: Final = 4


def gang_domains(
    domains: TopologyDomains, level: int, needed: Sequence[PodSpec], running_on: Sequence[int]
) -> tuple[Domain, ...] | str:
    """The domains of ``level`` to plan the gang's ``needed`` pods in, or why there are
    none; ``running_on``: the nodes of the gang's running pods."""
    at = domains.levels[level]
    if not len(at):
        return f"no node has the label {at.label} of level {at.name}"
    if running_on:
        order = at.holding(running_on)
        if len(order) != 1 or order[0] < 0:
            return f"its running pods are on nodes of more than one {at.name}, or of none"
    else:
        state = domains.state
        open_ = state.schedulable
        room = at.sums(state.gpu_count * MILLI_PER_GPU * open_)
        idle = at.sums(state.gpu_free_total * open_)
        need = sum(pod.gpu.total_milli for pod in needed)
        fit = [d for d in range(len(at)) if int(room[d]) >= need]
        if not fit:
            return f"no {at.name} has {need} milli-GPU on nodes that take pods"
        order = sorted(fit, key=lambda d: (-int(idle[d]), d))[:MAX_DOMAINS]
    return tuple(Domain(f"{at.name} {at.names[d]}", at.selectors[d]) for d in order)

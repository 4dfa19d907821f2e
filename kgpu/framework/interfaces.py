"""Extension points, one Protocol each; a plugin implements only those it needs.

Filters and scores work on arrays of node indices, not on one node at a time: a cycle over
thousands of nodes is then a handful of numpy operations. A plugin's verdict and score for a
node must depend only on that node's state and the pod's ``shape`` (``node_local``), which
lets the framework keep them between pods of the same shape and recompute only the nodes
that changed. A plugin whose score is not node-local (random tie-breaking, say) sets
``cacheable = False`` and is asked again every cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from kgpu.framework.cycle import CycleState
from kgpu.framework.status import Reason, Status
from kgpu.model.pod import PodSpec
from kgpu.state.cluster import ClusterState

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(slots=True)
class Verdicts:
    """A filter's answer for the nodes it was given: which pass, and why the others don't.

    ``rejected`` pairs a reason with the mask of given nodes it rejected; masks are disjoint
    and together cover exactly the nodes where ``ok`` is False.
    """

    ok: BoolArray
    rejected: list[tuple[Reason, BoolArray]] = field(default_factory=list)

    @staticmethod
    def all_pass(count: int) -> Verdicts:
        return Verdicts(np.ones(count, dtype=np.bool_))

    @staticmethod
    def from_reasons(why: list[Reason | None]) -> Verdicts:
        """The verdicts of nodes judged one by one: each its first reason, or None."""
        verdicts = Verdicts(np.array([r is None for r in why], dtype=np.bool_))
        if why.count(None) == len(why):  # most calls: the one or two nodes re-checked pass
            return verdicts
        for reason in dict.fromkeys(r for r in why if r is not None):
            verdicts.rejected.append((reason, np.array([r is reason for r in why], dtype=np.bool_)))
        return verdicts

    def reject(self, reason: Reason, mask: BoolArray) -> None:
        """Reject ``mask`` for ``reason``; nodes already rejected keep their first reason."""
        new = mask & self.ok
        if np.count_nonzero(new):  # cheaper than .any(), a Python-level wrapper
            self.rejected.append((reason, new))
            self.ok &= ~new


class Plugin(Protocol):
    @property
    def name(self) -> str: ...


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(self, cycle: CycleState, pod: PodSpec) -> Status:
        """Check the pod alone (and compute what Filter needs); non-success ends the cycle."""
        ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        """Say which of ``nodes`` can run the pod."""
        ...


@runtime_checkable
class NodeByNodeFilter(FilterPlugin, Protocol):
    """A filter that also judges one node at a time, on Python figures: a cycle that
    re-judges the few nodes changed since its shape's last (``Scheduler``) asks each node
    this way rather than building arrays for one or two nodes."""

    def judges_one(self, pod: PodSpec) -> bool:
        """Whether ``why_not_one`` judges this pod (a shape the filter has no such path
        for is judged by ``filter``)."""
        ...

    def why_not_one(self, cycle: CycleState, pod: PodSpec, node: int) -> Reason | None:
        """The first reason ``filter`` would give ``node``, or None where it passes."""
        ...


@runtime_checkable
class PodFilterPlugin(FilterPlugin, Protocol):
    """A filter whose verdicts for some pods depend on more than the pod's shape and the
    node: DraClaims, for a pod with ResourceClaims (its claims are its own, and the devices
    they may take change as other pods' claims are placed anywhere). For the pods it
    ``judges_alone`` the scheduler asks it in every cycle, over the nodes the verdicts kept
    per shape let through; the others it must pass on every node, and is not asked about."""

    def judges_alone(self, pod: PodSpec) -> bool:
        """Whether the pod's verdicts must come from this filter afresh, every cycle."""
        ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    """A cacheable score may also have ``zero_for(pod) -> bool``: True where it scores the
    pod's shape 0 on every node whatever their state; the scheduler then neither asks it
    nor adds it (``Scheduler``, GpuTopology)."""

    cacheable: bool

    def score(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> FloatArray:
        """Raw scores of feasible ``nodes``; higher is better."""
        ...


@runtime_checkable
class NodeByNodeScore(ScorePlugin, Protocol):
    """A score that also scores one node at a time: as ``NodeByNodeFilter``."""

    def score_one(self, cycle: CycleState, pod: PodSpec, node: int) -> float:
        """The raw score ``score`` gives ``node``, the same float."""
        ...


@runtime_checkable
class NormalizeScorePlugin(ScorePlugin, Protocol):
    def normalize(self, scores: FloatArray) -> FloatArray:
        """Map the raw scores of all feasible nodes of one cycle onto 0..100."""
        ...


@runtime_checkable
class GpuChoicePlugin(Plugin, Protocol):
    def choose_gpus(self, state: ClusterState, pod: PodSpec, node: int) -> tuple[int, ...]:
        """Pick the GPU slots of ``node`` the pod gets; the node is known to fit."""
        ...

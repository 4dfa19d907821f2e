"""One scheduling cycle for one pod: PreFilter, Filter, Score, then the GPU choice.

The cycle only decides; it never changes the cluster state. The caller (an action of a
session) reserves what was decided, so that a decision can be inspected, replayed or
discarded.

How answers combine:

- PreFilter: every plugin must succeed; the first failure ends the cycle with its status.
- Filter: a node must pass every filter; a node rejected by one filter is not shown to the
  next, and keeps the first reason it was given.
- Score: the sum over score plugins of weight × score, where a plugin that normalises maps
  its raw scores of the cycle's feasible nodes onto 0..100 first.
- Ties between nodes with the best total go to the node with the lowest tie-break rank
  (a fixed, seeded permutation of the nodes; by default the node order itself).
- GPU choice: the one GPU-choice plugin of the profile picks the node's GPU slots.

What a cycle recomputes: verdicts and cacheable scores are kept per pod shape
(``shape_cache``) and redone only on the nodes that changed since the shape was last
seen. Filters at the head of the profile's list that set ``static_verdicts = True`` read
only what placements never change (cordon, labels, taints); they run once per shape over
all nodes, and later cycles show the changed nodes they passed to the other filters only.
As they read only the pod's node selector and tolerations (``PodSpec.placement_key``),
their verdicts are also kept per those: a new shape that goes where an earlier one could
takes them from there.

Pods whose verdicts depend on more than their shape (a pod with DRA claims: see
``PodFilterPlugin``) still take the shape's kept verdicts and scores; the filters at the end
of the profile that judge them alone are asked afresh in every cycle, over the nodes those
verdicts let through, on a copy that is never kept. So is a filter the caller adds for one
cycle (``extra``: the queue's check of what a pod's claims would take on each node). A
filter that judges some pods alone but is not at the end of the list (where a node it
rejects could keep another filter's reason) makes those pods' cycles keep nothing at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from kgpu.framework.best_nodes import BestNodes
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import (
    FilterPlugin,
    FloatArray,
    GpuChoicePlugin,
    IntArray,
    NodeByNodeFilter,
    NodeByNodeScore,
    NormalizeScorePlugin,
    PodFilterPlugin,
    PreFilterPlugin,
    ScorePlugin,
)
from kgpu.framework.shape_cache import ShapeCache, ShapeEntry, StaticVerdicts
from kgpu.framework.status import Code, NodeReasons, Reason, Status
from kgpu.model.pod import PodSpec
from kgpu.state.cluster import ClusterState

# More nodes than this evaluated again in one cycle drop the shape's ranking (``_rerank``):
# pushing each costs more than the passes over the arrays it would save.
_RERANKED = 64
# A shape's ranking is made once it was picked this many times in a row with at most
# ``_FEW_CHANGED`` nodes changed since its pick before (``_ranking``).
_STREAK = 2
_FEW_CHANGED = 2
# Up to this many nodes evaluated again, a cycle judges and scores each in Python where
# every plugin asked can (``_evaluate_few``): the plugins' own few-node paths go as far.
_NODE_BY_NODE = 16


@dataclass(frozen=True, slots=True, init=False)
class Placement:
    """The cycle's choice: a node and the GPU slots on it."""

    pod: PodSpec
    node: int
    gpus: tuple[int, ...]
    score: float

    # Written out, not generated: one a cycle, and the generated __init__ of a frozen
    # dataclass is Python even in the compiled build (it sets each field through a call).
    def __init__(self, pod: PodSpec, node: int, gpus: tuple[int, ...], score: float) -> None:
        object.__setattr__(self, "pod", pod)
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "score", score)


@dataclass(frozen=True, slots=True, init=False)
class Unschedulable:
    """No node fits: the status and, when filters ran, how many nodes each reason rejected."""

    pod: PodSpec
    status: Status
    node_reasons: NodeReasons | None = None

    # Written out, not generated: as ``Placement``'s.
    def __init__(
        self, pod: PodSpec, status: Status, node_reasons: NodeReasons | None = None
    ) -> None:
        object.__setattr__(self, "pod", pod)
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "node_reasons", node_reasons)

    @property
    def message(self) -> str:
        if self.node_reasons is not None:
            return self.node_reasons.message()
        return self.status.message


Outcome = Placement | Unschedulable


@dataclass(frozen=True, slots=True)
class _ScoreStep:
    """One score plugin as a cycle uses it, resolved once instead of every cycle."""

    plugin: ScorePlugin
    weight: float
    normalize: Callable[[FloatArray], FloatArray] | None
    zero_for: Callable[[PodSpec], bool] | None  # the plugin's ``zero_for``, if it has one
    score_one: Callable[[CycleState, PodSpec, int], float] | None  # ``NodeByNodeScore``'s


class Scheduler:
    """Runs cycles with a fixed set of plugins (built from a profile by the registry).

    The plugin lists are read once, when the scheduler is built: how each score combines
    and which filters are static is worked out then, not in every cycle.
    """

    def __init__(
        self,
        pre_filters: Sequence[PreFilterPlugin],
        filters: Sequence[FilterPlugin],
        scores: Sequence[tuple[ScorePlugin, float]],
        gpu_choice: GpuChoicePlugin,
        *,
        use_cache: bool = True,
    ) -> None:
        self.pre_filters = tuple(pre_filters)
        self.filters = tuple(filters)
        self.scores = tuple(scores)
        self.gpu_choice = gpu_choice
        self.use_cache = use_cache
        self.cache = ShapeCache()
        self.tie_rank: IntArray | None = None
        self._tie: list[int] | None = None  # ``tie_rank`` as Python ints, for rankings
        # isinstance() against a runtime-checkable Protocol costs microseconds: ask once.
        self._steps = tuple(
            _ScoreStep(
                p,
                w,
                p.normalize if isinstance(p, NormalizeScorePlugin) else None,
                _zero_for(p),
                p.score_one if isinstance(p, NodeByNodeScore) else None,
            )
            for p, w in self.scores
        )
        self._cached_steps = tuple(step for step in self._steps if step.plugin.cacheable)
        # A profile of one cached score, unweighted or normalised so that its best nodes
        # stay the best: the cycle's choice is read off the raw scores (``_pick_raw``),
        # without a pass over the feasible nodes to normalise and weigh them.
        only = self._steps[0] if len(self._steps) == 1 else None
        self._best_only = (
            only
            if only is not None
            and only.plugin.cacheable
            and (
                (only.normalize is None and only.weight == 1.0)
                or (only.normalize is not None and only.weight > 0 and _keeps_best(only.plugin))
            )
            else None
        )
        # The first score, cached, unweighted and raw, where every other is cached, raw and
        # says of some pods that it scores them 0 everywhere (``zero_for``): for those pods
        # the others add nothing, and the choice is read off the first's raw scores.
        first = self._steps[0] if len(self._steps) > 1 else None
        self._lead = (
            first
            if first is not None
            and first.plugin.cacheable
            and first.normalize is None
            and first.weight == 1.0
            and all(
                s.plugin.cacheable and s.normalize is None and s.zero_for is not None
                for s in self._steps[1:]
            )
            else None
        )
        lead = 0
        while lead < len(self.filters) and _has_static_verdicts(self.filters[lead]):
            lead += 1
        tail = len(self.filters)
        while tail > lead and isinstance(self.filters[tail - 1], PodFilterPlugin):
            tail -= 1
        self._static_filters = self.filters[:lead]
        self._changing_filters = self.filters[lead:tail]
        # The changing filters and cached scores, where every one also judges and scores
        # node by node (``_evaluate_few``); else None.
        by_node = tuple(f for f in self._changing_filters if isinstance(f, NodeByNodeFilter))
        self._node_filters: tuple[NodeByNodeFilter, ...] | None = (
            by_node
            if len(by_node) == len(self._changing_filters)
            and all(s.score_one is not None for s in self._cached_steps)
            else None
        )
        # Asked after the kept verdicts, only for the pods they judge alone.
        self._pod_filters: tuple[PodFilterPlugin, ...] = tuple(
            f for f in self.filters[tail:] if isinstance(f, PodFilterPlugin)
        )
        # Judging some pods alone but followed by filters that do not: those pods' cycles
        # keep nothing (``_alone_inside``).
        self._inner_pod_filters: tuple[PodFilterPlugin, ...] = tuple(
            f for f in self.filters[:tail] if isinstance(f, PodFilterPlugin)
        )

    def set_tie_rank(self, rank: IntArray | None) -> None:
        """Nodes with equal best totals go to the lowest rank; None: the lowest index."""
        self.tie_rank = None if rank is None else np.asarray(rank, dtype=np.int64)
        self._tie = None if self.tie_rank is None else self.tie_rank.tolist()
        self.cache.unrank()  # made with the ranks before

    # ------------------------------------------------------------------ the cycle

    def schedule(
        self, state: ClusterState, pod: PodSpec, extra: Sequence[FilterPlugin] = ()
    ) -> Outcome:
        """The cycle's outcome. ``extra``: filters for this cycle only, asked last (never
        kept per shape)."""
        found = self._decide(state, pod, extra)
        if isinstance(found, ShapeEntry):
            return self._unschedulable(pod, found, len(state))
        return found

    def placement(
        self, state: ClusterState, pod: PodSpec, extra: Sequence[FilterPlugin] = ()
    ) -> Placement | None:
        """``schedule``'s choice, without the reasons a refusal carries: a caller that only
        asks whether the pod fits (a first try before evicting) spares their count over
        every node, which costs as much as the cycle itself."""
        found = self._decide(state, pod, extra)
        return found if isinstance(found, Placement) else None

    def passes(
        self, state: ClusterState, pod: PodSpec, node: int, extra: Sequence[FilterPlugin] = ()
    ) -> bool:
        """Whether ``pod`` passes every pre-filter and filter (and ``extra``) on ``node``.
        The filters with static verdicts are read off those kept for the pod's placement
        key, where a cycle left some: a trial of victims asks this after every eviction,
        and those filters' answers never change."""
        cycle = CycleState(state, pod)
        for pre in self.pre_filters:
            if not pre.pre_filter(cycle, pod).ok:
                return False
        filters: Sequence[FilterPlugin] = self.filters
        if self._static_filters and self.use_cache:
            self.cache.bind(state)
            known = self.cache.statics.get(pod.placement_key)  # not a use: the LRU stays
            if known is not None:
                if not known.static_ok[node]:
                    return False
                filters = self.filters[len(self._static_filters) :]
        by_node = self._node_filters
        if (
            by_node is not None
            and not extra
            and len(filters) + len(self._static_filters) == len(self.filters)
            and self._node_by_node(pod)
            and not any([f.judges_alone(pod) for f in self._pod_filters])
        ):
            # What a cycle of the shape finds on the node (``_evaluate_few``): the changing
            # filters judge it on Python figures, and the filters at the end only the pods
            # they judge alone. (A trial of victims asks after every eviction: an array
            # per filter for one node was most of its cost.)
            return all([f.why_not_one(cycle, pod, node) is None for f in by_node])
        nodes = np.array([node], dtype=np.int64)
        return all(bool(f.filter(cycle, pod, nodes).ok[0]) for f in (*filters, *extra))

    def _decide(
        self, state: ClusterState, pod: PodSpec, extra: Sequence[FilterPlugin] = ()
    ) -> Placement | Unschedulable | ShapeEntry:
        """The placement, a pre-filter's refusal, or the shape's entry when no node fits."""
        cycle = CycleState(state, pod)
        for plugin in self.pre_filters:
            status = plugin.pre_filter(cycle, pod)
            if not status.ok:
                return Unschedulable(pod, status)
        entry = self._refresh(cycle, pod)
        alone: Sequence[FilterPlugin] = extra
        if self._pod_filters:
            alone = [*(f for f in self._pod_filters if f.judges_alone(pod)), *extra]
        if alone:
            entry = self._judged_alone(cycle, pod, entry, alone)
        raw = self._raw_step(entry)
        ranking = self._ranking(entry, raw) if raw is not None and not alone else None
        if raw is not None and ranking is not None:
            found = ranking.best()
            if found is None:
                return entry
            best, high, low = found
            top = _raw_top(raw, high, low)
        else:
            feasible = entry.feasible.nonzero()[0]
            if len(feasible) == 0:
                return entry
            if raw is not None:
                best, top = self._pick_raw(feasible, entry, raw)
            else:
                best, top = self._pick(feasible, self._total_scores(cycle, pod, entry, feasible))
        gpus = self.gpu_choice.choose_gpus(state, pod, best) if pod.gpu.count else ()
        return Placement(pod, best, gpus, top)

    def _raw_step(self, entry: ShapeEntry) -> _ScoreStep | None:
        """The score whose raw figures the choice is read off for ``entry``'s shape, if
        one is (see ``__init__``): then the best node is the one with the best raw score."""
        if self._best_only is not None:
            return self._best_only
        if self._lead is not None and entry.lead_only:
            return self._lead
        return None

    def _ranking(self, entry: ShapeEntry, step: _ScoreStep) -> BestNodes | None:
        """``entry``'s feasible nodes ranked by ``step``'s raw score, or None: then the
        choice is read off the arrays. A ranking is made once the shape is picked a few
        times in a row with hardly a node changed in between (a job's tasks one after
        another): there each pick costs it a push or two instead of a pass over every
        feasible node. Where shapes take turns (a replay's arrivals), many nodes change
        between a shape's picks, and pushing them costs more than the pass it saves."""
        if entry.ranking is not None:
            return entry.ranking
        if entry.streak < _STREAK:
            return None
        feasible = entry.feasible.nonzero()[0]
        scores: list[float] = entry.scores[step.plugin.name][feasible].tolist()
        if not BestNodes.usable(scores):
            return None
        ranking = BestNodes(feasible.tolist(), scores, self._tie)
        self.cache.rank(entry, ranking, BestNodes.most_bytes(len(entry.feasible)))
        return ranking

    def _refresh(self, cycle: CycleState, pod: PodSpec) -> ShapeEntry:
        """Bring the shape's verdicts and cacheable scores up to date for changed nodes."""
        state = cycle.state
        self.cache.bind(state)
        if not self.use_cache or self._alone_inside(pod):
            entry = self._new_entry(state, pod)
            self._evaluate(cycle, pod, entry, self.cache.all_nodes(), fresh=True)
            return entry
        shape = pod.shape
        found, stale = self.cache.lookup(state, shape)
        if found is None:
            entry = self._new_entry(state, pod)
            self.cache.store(shape, entry)
            self._evaluate(cycle, pod, entry, stale, fresh=True)
        else:
            entry = found
            entry.streak = entry.streak + 1 if len(stale) <= _FEW_CHANGED else 0
            if len(stale):
                self._evaluate(cycle, pod, entry, stale, fresh=False)
        entry.seen_at = state.clock
        return entry

    def _alone_inside(self, pod: PodSpec) -> bool:
        """Does a filter before the profile's last ones judge the pod alone?"""
        return any(f.judges_alone(pod) for f in self._inner_pod_filters)

    def _judged_alone(
        self,
        cycle: CycleState,
        pod: PodSpec,
        entry: ShapeEntry,
        filters: Sequence[FilterPlugin],
    ) -> ShapeEntry:
        """The shape's entry with ``filters`` asked too, for this pod alone: a copy of the
        verdicts (the scores are shared: read only), never kept. As the filters come last,
        a node they reject had no reason before, as in a cycle that keeps nothing."""
        alive = entry.feasible.nonzero()[0]
        own = replace(entry, feasible=entry.feasible.copy(), reason_idx=entry.reason_idx.copy())
        passed = self._filter(cycle, pod, own, alive, filters)
        if len(passed) < len(alive):
            own.feasible[alive] = False
            own.feasible[passed] = True
        return own

    def _new_entry(self, state: ClusterState, pod: PodSpec) -> ShapeEntry:
        n = len(state)
        # Scores that are 0 on every node for this shape stay the zeros they start as.
        zero = tuple(
            s.plugin.name for s in self._cached_steps if s.zero_for is not None and s.zero_for(pod)
        )
        lead = self._lead
        return ShapeEntry(
            seen_at=state.clock,
            feasible=np.zeros(n, dtype=np.bool_),
            reason_idx=np.full(n, -1, dtype=np.int64),
            static_ok=np.zeros(n, dtype=np.bool_),
            scores={s.plugin.name: np.zeros(n, dtype=np.float64) for s in self._cached_steps},
            zero_scores=zero,
            lead_only=lead is not None
            and len(zero) == len(self._steps) - 1
            and lead.plugin.name not in zero,
        )

    def _evaluate(
        self,
        cycle: CycleState,
        pod: PodSpec,
        entry: ShapeEntry,
        listed: IntArray | list[int],
        *,
        fresh: bool,
    ) -> None:
        """Filter and score ``listed`` nodes; a ``fresh`` entry runs the static filters too."""
        if not fresh and len(listed) <= _NODE_BY_NODE and self._node_by_node(pod):
            few = listed if isinstance(listed, list) else listed.tolist()
            self._evaluate_few(cycle, pod, entry, few)
            return
        nodes = np.array(listed, dtype=np.int64) if isinstance(listed, list) else listed
        if fresh:
            nodes = self._static_pass(cycle, pod, entry, nodes)
        else:
            if self._static_filters:
                nodes = nodes[entry.static_ok[nodes]]  # the others keep their reason
            entry.reason_idx[nodes] = -1
        alive = self._filter(cycle, pod, entry, nodes, self._changing_filters)
        if not fresh:  # a fresh entry's verdicts start all False
            entry.feasible[nodes] = False
        entry.feasible[alive] = True
        if len(alive):
            for step in self._cached_steps:
                if step.plugin.name not in entry.zero_scores:
                    entry.scores[step.plugin.name][alive] = step.plugin.score(cycle, pod, alive)
        if entry.ranking is not None:
            self._rerank(entry, nodes, alive)

    def _node_by_node(self, pod: PodSpec) -> bool:
        """Do the changing filters judge ``pod`` node by node (``_evaluate_few``)?"""
        filters = self._node_filters
        if filters is None:
            return False
        return all([f.judges_one(pod) for f in filters])  # a list: asked every cycle

    def _evaluate_few(
        self, cycle: CycleState, pod: PodSpec, entry: ShapeEntry, nodes: list[int]
    ) -> None:
        """``_evaluate`` of a few nodes for a shape seen before, node by node: the same
        verdicts, reasons and scores (each plugin's ``why_not_one`` and ``score_one`` say
        what its arrays would), without the dozen array operations a pass over one or two
        nodes costs. Where a node fails a static filter it keeps its reason and is not
        evaluated, as in ``_evaluate``."""
        filters = self._node_filters
        assert filters is not None, "asked only where every changing filter judges one node"
        state_ok = entry.static_ok if self._static_filters else None
        feasible, reason_idx = entry.feasible, entry.reason_idx
        steps = [
            (entry.scores[s.plugin.name], s.score_one)
            for s in self._cached_steps
            if s.plugin.name not in entry.zero_scores
        ]
        ranking, raw = entry.ranking, self._raw_step(entry)
        listed: list[int] = []
        now: list[float | None] = []
        for node in nodes:
            if state_ok is not None and not state_ok[node]:
                continue
            listed.append(node)
            why: Reason | None = None
            for f in filters:
                why = f.why_not_one(cycle, pod, node)
                if why is not None:
                    break
            if why is not None:
                reason_idx[node] = self.cache.reason_id(why)
                feasible[node] = False
                now.append(None)
                continue
            reason_idx[node] = -1
            feasible[node] = True
            for scores, score_one in steps:
                assert score_one is not None, "every cached step scores one node here"
                scores[node] = score_one(cycle, pod, node)
            now.append(float(entry.scores[raw.plugin.name][node]) if raw is not None else 0.0)
        if ranking is None:
            return
        if raw is None or not BestNodes.usable([s for s in now if s is not None]):
            self.cache.rank(entry, None)
            return
        ranking.update(listed, now)

    def _rerank(self, entry: ShapeEntry, nodes: IntArray, alive: IntArray) -> None:
        """Tell ``entry``'s ranking what ``nodes`` (of which ``alive`` are feasible) score
        now; past a few hundred nodes it is dropped instead, and made again once asked."""
        ranking, step = entry.ranking, self._raw_step(entry)
        if ranking is None or step is None or len(nodes) > _RERANKED:
            self.cache.rank(entry, None)
            return
        scores: list[float] = entry.scores[step.plugin.name][alive].tolist()
        if not BestNodes.usable(scores):
            self.cache.rank(entry, None)
            return
        now: dict[int, float] = dict(zip(alive.tolist(), scores, strict=True))
        listed: list[int] = nodes.tolist()
        ranking.update(listed, [now.get(n) for n in listed])

    def _static_pass(
        self, cycle: CycleState, pod: PodSpec, entry: ShapeEntry, nodes: IntArray
    ) -> IntArray:
        """The nodes of a fresh entry (all nodes) that pass the static filters, the verdicts
        written into ``entry``; taken from the cache when a pod with the same placement key
        was filtered before (and the per-shape cache is in use)."""
        if not self._static_filters:
            entry.static_ok[nodes] = True
            return nodes
        key = pod.placement_key
        known = self.cache.static_verdicts(key) if self.use_cache else None
        if known is not None:
            entry.static_ok[:] = known.static_ok
            entry.reason_idx[:] = known.reason_idx
            return known.passed
        passed = self._filter(cycle, pod, entry, nodes, self._static_filters)
        entry.static_ok[passed] = True
        if self.use_cache:
            verdicts = StaticVerdicts(passed, entry.static_ok.copy(), entry.reason_idx.copy())
            self.cache.store_static(key, verdicts)
        return passed

    def _filter(
        self,
        cycle: CycleState,
        pod: PodSpec,
        entry: ShapeEntry,
        nodes: IntArray,
        filters: Sequence[FilterPlugin],
    ) -> IntArray:
        """The nodes that pass every filter; each rejected one gets its reason recorded."""
        alive = nodes
        for filter_plugin in filters:
            if len(alive) == 0:
                break
            verdicts = filter_plugin.filter(cycle, pod, alive)
            if verdicts.rejected:  # else every node passed: ``alive`` stays as it is
                for reason, mask in verdicts.rejected:
                    entry.reason_idx[alive[mask]] = self.cache.reason_id(reason)
                alive = alive[verdicts.ok]
        return alive

    def _total_scores(
        self, cycle: CycleState, pod: PodSpec, entry: ShapeEntry, feasible: IntArray
    ) -> FloatArray:
        """Σ weight × (normalised) score over the feasible nodes.

        The sum starts from the first term rather than from zeros, saving a pass over the
        nodes: the same figures but for the sign of a zero, which no comparison sees.
        """
        total: FloatArray | None = None
        for step in self._steps:
            plugin = step.plugin
            if plugin.cacheable:
                raw = entry.scores[plugin.name][feasible]
            else:
                raw = plugin.score(cycle, pod, feasible)
            if step.normalize is not None:
                raw = step.normalize(raw)
            term = raw if step.weight == 1.0 else step.weight * raw
            total = term if total is None else total + term
        if total is None:
            return np.zeros(len(feasible), dtype=np.float64)
        return total

    def _pick(self, feasible: IntArray, total: FloatArray) -> tuple[int, float]:
        """The best node and its total (ties: the lowest tie-break rank); ``+ 0.0`` turns
        a total of -0.0 into 0.0, as a sum started from zeros would have it."""
        top = np.maximum.reduce(total)  # ndarray.max's Python-level wrapper costs more
        best = feasible[(total == top).nonzero()[0]]  # faster than a boolean mask
        if len(best) > 1 and self.tie_rank is not None:
            return int(best[self.tie_rank[best].argmin()]), float(top) + 0.0
        return int(best[0]), float(top) + 0.0

    def _pick_raw(
        self, feasible: IntArray, entry: ShapeEntry, step: _ScoreStep
    ) -> tuple[int, float]:
        """``_pick`` for a profile of one score: the nodes with the best raw score are those
        with the best total, which is the raw top (unnormalised, weight 1) or the weight
        times the normalised top: 100, or 0 where every node scores the same."""
        raw = entry.scores[step.plugin.name].take(feasible)  # ``take``: faster than indexing
        high = np.maximum.reduce(raw)  # as in ``_pick``
        if step.normalize is None:
            top = float(high)
        else:
            top = step.weight * 100.0 if raw.min() < high else 0.0
        best = feasible.take((raw == high).nonzero()[0])
        if len(best) > 1 and self.tie_rank is not None:
            return int(best[self.tie_rank[best].argmin()]), top + 0.0
        return int(best[0]), top + 0.0

    def _unschedulable(self, pod: PodSpec, entry: ShapeEntry, n: int) -> Unschedulable:
        reasons = NodeReasons(total=n)
        rejected = entry.reason_idx[entry.reason_idx >= 0]
        counts = np.bincount(rejected) if len(rejected) else np.zeros(0, dtype=np.int64)
        for rid in np.flatnonzero(counts):
            reasons.add(self.cache.reasons[int(rid)], int(counts[rid]))
        top = self.cache.reasons[int(np.argmax(counts))].code if len(counts) else "NoNodes"
        status = Status(Code.UNSCHEDULABLE, (reasons.message(),), reason_code=top)
        return Unschedulable(pod, status, reasons)


def _raw_top(step: _ScoreStep, high: float, low: float) -> float:
    """``_pick_raw``'s total for the best node, from the best and the lowest raw score."""
    if step.normalize is None:
        return high + 0.0
    return (step.weight * 100.0 if low < high else 0.0) + 0.0


def _keeps_best(plugin: ScorePlugin) -> bool:
    """Does the plugin say its normalisation gives 100 to exactly the nodes with the best
    raw score, and 0 to all when they score the same (as integer min-max does)?"""
    return getattr(plugin, "normalize_keeps_best", False) is True


def _zero_for(plugin: ScorePlugin) -> Callable[[PodSpec], bool] | None:
    """The plugin's ``zero_for(pod)``, if it has one: True where it scores the pod's shape
    0 on every node, whatever their state, so that the framework need not ask it."""
    found = getattr(plugin, "zero_for", None)
    return found if callable(found) else None


def _has_static_verdicts(plugin: FilterPlugin) -> bool:
    """Does the filter say its verdict on a node never changes while the cluster runs?"""
    return getattr(plugin, "static_verdicts", False) is True

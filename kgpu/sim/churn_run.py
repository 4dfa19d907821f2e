"""One churn replay of an openb pod list on a node list, as ``kgpu simulate openb --churn``
runs it: the same profiles, plugin context, tie-break order of nodes and typical pods as
the arrival-only replay (``openb_run``), with the trace's times instead of a shuffle."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kgpu.actions.defrag_rules import PREEMPTIBLE_ANNOTATION
from kgpu.config import load_profile
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodSpec
from kgpu.plugins.registry import PluginContext, build_scheduler
from kgpu.sim.churn import ChurnPod, ChurnResult, Outcome, replay_churn
from kgpu.sim.churn_defrag import ChurnDefrag
from kgpu.sim.churn_trace import PHASES, TimedPod, select_phases
from kgpu.sim.openb_run import tie_rank
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import typical_pods


@dataclass(slots=True)
class ChurnRun:
    policy: str
    seed: int
    node_share: float
    nodes: int
    left_out: int  # pods whose phase was not replayed
    result: ChurnResult

    def summary(self) -> dict[str, Any]:
        """The figures, without the series."""
        r = self.result
        return {
            "policy": self.policy,
            "seed": self.seed,
            "node_share": self.node_share,
            "nodes": self.nodes,
            "total_gpus": r.total_gpu_milli // 1000,
            "pods": len(r.outcome),
            "left_out_pods": self.left_out,
            "placed_at_arrival": r.count(Outcome.PLACED),
            "placed_after_waiting": r.count(Outcome.PLACED_LATE),
            "withdrawn_while_waiting": r.count(Outcome.WITHDRAWN),
            "waiting_at_end": r.count(Outcome.WAITING),
            "start_s": r.start,
            "end_s": r.end,
            "time_avg_gpu_alloc_pct": round(r.time_avg_alloc_pct, 4),
            "time_avg_gpu_asked_pct": round(r.time_avg_asked_pct, 4),
            "time_avg_frag_gpu_pct": round(r.time_avg_frag_pct, 4),
            "pending_p50_s": round(r.pending_s(50), 3),
            "pending_p99_s": round(r.pending_s(99), 3),
            "cycles": r.cycles,
            "elapsed_s": round(r.elapsed_s, 3),
            **self._defrag_summary(),
        }

    def _defrag_summary(self) -> dict[str, Any]:
        d = self.result.defrag
        if d is None:
            return {}
        return {
            "defrag_rounds": d.rounds,
            "defrag_moves": d.moves,
            "defrag_moved_pods": len(d.moved_pods),
            "defrag_moved_pods_pct": round(
                100.0 * len(d.moved_pods) / max(len(self.result.outcome), 1), 4
            ),
            "defrag_placed": d.placed,
            "defrag_move_cost_gpu_h": round(d.cost_gpu_s / 3600, 3),
        }

    def to_json(self) -> dict[str, Any]:
        """The figures and the series, one value per instant with an event."""
        r = self.result
        return {
            **self.summary(),
            "series": {
                "time_s": r.times.tolist(),
                "gpu_alloc_pct": [round(r.pct(v), 4) for v in r.used_milli.tolist()],
                "gpu_asked_pct": [round(r.pct(v), 4) for v in r.asked_milli.tolist()],
                "frag_gpu_pct": [round(r.pct(v), 4) for v in r.frag_milli.tolist()],
                "waiting_pods": r.waiting.tolist(),
            },
            **self._defrag_moves(),
        }

    def _defrag_moves(self) -> dict[str, Any]:
        """Every move, with the reason the planner gave for it."""
        d = self.result.defrag
        if d is None:
            return {}
        keys = ("time_s", "pod", "from_node", "to_node", "for_pod", "reason")
        return {"defrag_moves_log": [dict(zip(keys, move, strict=True)) for move in d.log]}


def sample_nodes(nodes: Sequence[NodeInfo], share: float, seed: int) -> list[NodeInfo]:
    """A seeded sample of ``share`` of the nodes (at least one), in their list order."""
    if share >= 1.0:
        return list(nodes)
    k = min(len(nodes), max(1, round(len(nodes) * share)))
    # Its own stream: the tie-break order and the policies' draws stay as they were.
    picked = np.random.default_rng([seed, 2]).choice(len(nodes), size=k, replace=False)
    return [nodes[i] for i in sorted(picked.tolist())]


def run_churn(
    nodes: Sequence[NodeInfo],
    trace: Sequence[TimedPod],
    policy: str,
    seed: int,
    node_share: float = 1.0,
    phases: frozenset[str] = frozenset(PHASES),
    progress: Callable[[int], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    defrag: bool = False,
) -> ChurnRun:
    """Replay the pods of ``trace`` whose phase is in ``phases`` under one policy, on a
    ``node_share`` of ``nodes``. ``on_start`` hears the number of events once known,
    ``progress`` how many more were handled since it was last called. Defragmentation runs
    when the policy's profile turns it on, or ``defrag`` does (the profile's bounds)."""
    kept = sample_nodes(nodes, node_share, seed)
    state = ClusterState(kept)
    # As in the arrival-only replay: the typical pods are the whole pod list's shapes.
    typical = typical_pods(p.pod.to_pod() for p in trace)
    profile = load_profile(policy)
    scheduler = build_scheduler(profile, PluginContext(seed=seed, typical_pods=typical))
    scheduler.set_tie_rank(tie_rank(len(state), seed))
    replayed = select_phases(trace, phases)
    pods = [ChurnPod(p.pod.to_pod(), p.created, p.deleted) for p in replayed]
    mover = None
    if defrag or profile.defragmentation.enabled:
        # Best-effort pods may be moved, the others not (``churn_defrag``).
        pods = [
            ChurnPod(_with_qos(c.spec, p.qos), c.created, c.deleted)
            for c, p in zip(pods, replayed, strict=True)
        ]
        config = profile.defragmentation.model_copy(update={"enabled": True})
        mover = ChurnDefrag(config, scheduler, [c.spec for c in pods])
    if on_start is not None:
        # Each pod comes and goes, or neither if deleted the second it came (``replay_churn``).
        on_start(sum(0 if p.deleted == p.created else 1 + (p.deleted is not None) for p in pods))
    result = replay_churn(state, scheduler, pods, typical, progress, mover)
    return ChurnRun(policy, seed, node_share, len(kept), len(trace) - len(replayed), result)


def _with_qos(spec: PodSpec, qos: str) -> PodSpec:
    preemptible = "true" if qos == "BE" else "false"
    return replace(spec, annotations={**spec.annotations, PREEMPTIBLE_ANNOTATION: preemptible})

"""Defragmentation inside a churn replay (``kgpu simulate openb --churn --defrag``).

After the instant's events, while pods wait and the cluster changed since a round last
found nothing, one round: the planner (``kgpu.actions.defrag_planner``) is shown the head
of each waiting shape in queue order (at most ``MAX_WAITING_PER_ROUND``), GPU pods only,
and its steps are carried out: each moved pod is evicted and placed again where the
planner's trial placed it, by the same scheduler, and the waiting pod takes the room.

What the replay knows of each pod: it started when it was last placed (a moved pod starts
again, so the min-runtime protects it anew), it is a job of its own (the trace has no
gangs), no PodDisruptionBudget selects it, and its qos says whether it may be preempted:
best-effort ("BE") pods may, the others may not (``run_churn`` writes that as the
``kgpu.io/preemptible`` annotation).

Cost of a move: ``moveCostSeconds`` of the moved pod's GPUs, the GPU time its restart
loses (stop, reschedule, image pull, reload). The allocation series does not change for
it: the restarting pod holds its new GPUs meanwhile, allocated but not working. Work lost
since the pod's last checkpoint is not modelled (the trace says nothing of checkpoints).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kgpu.actions.defrag_planner import Step, apply_step, plan_moves
from kgpu.actions.defrag_rules import MoveFacts, RunningPod
from kgpu.framework.defrag_config import Defragmentation
from kgpu.framework.scheduler import Scheduler
from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.state.cluster import ClusterState

# Waiting shapes a round looks at: each costs a search (bounded by the planner), and a
# round runs whenever the cluster changed while pods wait.
MAX_WAITING_PER_ROUND = 8


@dataclass(slots=True)
class DefragStats:
    """What defragmentation did over a replay."""

    rounds: int = 0
    moves: int = 0
    placed: int = 0  # waiting pods placed by a round's step
    moved_pods: set[int] = field(default_factory=set)
    cost_gpu_s: float = 0.0
    # Each move: (second, moved pod, from node, to node, pending pod, why), in order.
    log: list[tuple[int, str, str, str, str, str]] = field(default_factory=list)


class ChurnDefrag:
    """Keeps what the rules read about placed pods, and runs rounds."""

    def __init__(
        self, config: Defragmentation, scheduler: Scheduler, specs: Sequence[PodSpec]
    ) -> None:
        self.config = config
        self.scheduler = scheduler
        self.specs = specs
        self.index = {spec.key: i for i, spec in enumerate(specs)}
        self.started: dict[int, int] = {}
        # Pods per node in placement order (a dict as an ordered set): what ``on_node``
        # shows the planner, without a pass over every placed pod.
        self.on: dict[int, dict[int, None]] = {}
        self.stats = DefragStats()
        self.idle_clock = -1  # the state's clock when a round last found nothing

    def placed(self, pod: int, node: int, now: int) -> None:
        self.started[pod] = now
        self.on.setdefault(node, {})[pod] = None

    def left(self, pod: int, node: int) -> None:
        self.started.pop(pod, None)
        self.on[node].pop(pod, None)

    def _on_node(self, node: int) -> list[RunningPod]:
        return [RunningPod(self.specs[i], float(self.started[i])) for i in self.on.get(node, ())]

    def round(self, state: ClusterState, now: int, waiting: Sequence[int]) -> list[Step]:
        """Plan and carry out a round for the waiting pods ``waiting`` (each the head of its
        shape, in queue order); the steps carried out, in order. ``placed`` is called for
        each waiting pod placed and each pod moved; the caller updates its own records."""
        if state.clock == self.idle_clock:
            return []
        heads = [self.specs[i] for i in waiting if self.specs[i].gpu.count > 0]
        heads = heads[:MAX_WAITING_PER_ROUND]
        if not heads:
            return []
        self.stats.rounds += 1
        facts = MoveFacts(float(now), self._on_node)
        plan = plan_moves(state, heads, facts, self.scheduler.placement, self.config)
        if not plan.steps:
            self.idle_clock = state.clock
            return []
        for step in plan.steps:
            apply_step(state, step)
            for move in step.moves:
                i = self.index[move.pod.key]
                self.left(i, move.source)
                self.placed(i, move.target, now)
                self.stats.moved_pods.add(i)
                self.stats.log.append(
                    (
                        now,
                        move.pod.key,
                        state.nodes[move.source].name,
                        state.nodes[move.target].name,
                        step.pending.key,
                        move.reason,
                    )
                )
                self.stats.cost_gpu_s += (
                    self.config.move_cost_seconds * move.pod.gpu.total_milli / MILLI_PER_GPU
                )
            self.stats.moves += len(step.moves)
            self.stats.placed += 1
        return plan.steps

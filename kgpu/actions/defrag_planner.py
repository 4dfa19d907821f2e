"""Defragmentation: the fewest moves that let waiting GPU pods fit.

A GPU pod may wait while enough GPU sits idle, in holes spread over nodes where it fits
nowhere whole. The planner looks, for each waiting pod in the caller's order, for the
smallest set of movable pods (``defrag_rules``) on one node whose eviction lets the pod
fit there, each of them placed again elsewhere by the same scheduler. Fewest moves
first; among as few, the least GPU moved, then the node nearest to fitting. Each move
says why, in words.

How it works, per waiting pod:

1. Only whole GPUs or a share of one GPU (the requests whose room is a count of milli per
   GPU). If the schedulable nodes have less idle GPU in all than it asks, no move helps:
   the cluster is full, not fragmented. (Not only the nodes that could hold the pod: a
   pod moved off one of them may go to a node the waiting pod could not use.)
2. Candidate nodes: schedulable, of an allowed GPU model, big enough when empty; nearest
   to fitting first (fewest GPUs, or milli of one GPU, short), then by index. At most
   ``maxNodesPerPod`` of those with a movable pod are examined.
3. On each, its movable pods (at most ``MAX_PODS_PER_NODE``, the least GPU first) in
   subsets of 1, 2, ... up to ``maxMovesPerPod`` pods; a subset whose room (the node's
   free CPU, memory and per-GPU milli plus what the subset holds) would hold the pod is a
   candidate. At most ``MAX_SUBSETS`` subsets are counted per pod.
4. The candidates of the smallest size are tried, the least GPU moved first, at most
   ``MAX_TRIALS``: release the subset, place the waiting pod with the scheduler (it must
   land on that node), then place each moved pod with the scheduler (biggest first). A
   moved pod with nowhere to go, or that would land back on the GPUs it held, fails the
   trial, which is undone.
5. A trial that succeeds is the pod's step; it stays in place while the later pods are
   planned (they see the room it took), and the round's move budget shrinks by its moves.

A gang (``Gang``: waiting pods of one job) is planned as one, for as many pods as it
needs to start (its ``minMember`` less its running pods, read from the facts): its
members in order, each placed as it fits now or by a step of its own (the steps above,
each seeing the room the earlier members took); the pods moved for it are placed again
only once all are in. Short of that, every trial of the gang is undone and it gets no
step: room for some of a gang's pods is no room for the gang. A gang whose members all
fit without a move gets none either: what holds it back is not room. A gang that requires
a topology domain comes with the domains to try (``Domain``, in the caller's order): its
members are pinned to each in turn (the domain's node labels added to their node
selector, as topology placement pins them) and the first domain where moves start it is
kept; the pods moved for it may go anywhere.

A waiting pod's candidate nodes are those its node selector allows (labels, exactly).

The state is changed only for trials and comes back with the allocations it had (its
clocks do move, which only makes caches look again). ``apply_step`` then carries a step
out on a state as it was planned; the live edge evicts instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

import numpy as np

from kgpu.actions.defrag_rules import MoveFacts, RunningPod, Taken, refusal, why_movable
from kgpu.framework.defrag_config import Defragmentation
from kgpu.framework.scheduler import Placement
from kgpu.model.gpu import GpuKind
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.units import MILLI_PER_GPU
from kgpu.state.cluster import Allocation, ClusterState
from kgpu.state.topology_domains import Selector, pinned

# Bounds on one waiting pod's search, so that a round costs the same on any cluster:
# pods of one node looked at, subsets counted over all its nodes, trials run.
MAX_PODS_PER_NODE = 16
MAX_SUBSETS = 4096
MAX_TRIALS = 8
# Candidate nodes skipped for having no movable pod, per node examined: a full cluster
# of immovable pods must not make a round scan every node.
SKIP_FACTOR = 4

Find = Callable[[ClusterState, PodSpec], Placement | None]


@dataclass(frozen=True, slots=True)
class Move:
    """Evict ``pod`` from ``source`` (GPU slots ``source_gpus``); it is placed again on
    ``target`` (``target_gpus``)."""

    pod: PodSpec
    source: int
    source_gpus: tuple[int, ...]
    target: int
    target_gpus: tuple[int, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Step:
    """The moves that let ``pending`` fit on ``node``, on GPU slots ``gpus``."""

    pending: PodSpec
    node: int
    gpus: tuple[int, ...]
    moves: tuple[Move, ...]


@dataclass(frozen=True, slots=True)
class Domain:
    """A topology domain a gang may start in: how messages call it ("rack r1") and the
    node labels that pin a pod to it."""

    name: str
    selector: Selector


@dataclass(frozen=True, slots=True)
class Gang:
    """Waiting pods of job ``key`` (a PodGroup with ``minMember`` above 1), in the order to
    place them; ``domains``: where it may start, in the order to try, when it requires a
    topology domain (empty: anywhere)."""

    key: str
    members: tuple[PodSpec, ...]
    domains: tuple[Domain, ...] = ()


@dataclass(slots=True)
class Plan:
    """A round's steps, in order, and why each waiting pod (or gang, by its job's key)
    examined got none."""

    steps: list[Step] = field(default_factory=list)
    unplanned: dict[str, str] = field(default_factory=dict)

    @property
    def moves(self) -> int:
        return sum(len(s.moves) for s in self.steps)


@dataclass(slots=True)
class _Trial:
    """What a successful trial changed, to undo it: every pod it placed is released before
    any it released is put back, so the room each had is free again."""

    released: list[Allocation]
    placed: list[PodKey]

    def undo(self, state: ClusterState) -> None:
        for key in reversed(self.placed):
            state.release(key)
        for alloc in reversed(self.released):
            state.restore(alloc)


@dataclass(slots=True)
class _Node:
    """A candidate node: its movable pods and what they hold."""

    index: int
    rank: int
    movable: list[RunningPod]
    held: list[Allocation]


def plan_moves(
    state: ClusterState,
    pending: Sequence[PodSpec | Gang],
    facts: MoveFacts,
    find: Find,
    config: Defragmentation,
) -> Plan:
    """Steps for the waiting pods and gangs ``pending`` (each pod of which fits nowhere
    now), in their order, within ``config.max_moves_per_round`` moves. ``find`` is the
    scheduler's placement. ``state`` comes back with the allocations it had."""
    plan = Plan()
    taken = Taken()
    budget = config.max_moves_per_round
    trials: list[_Trial] = []
    try:
        for item in pending:
            if budget <= 0:
                plan.unplanned[item.key] = "the round's moves are spent"
                continue
            if isinstance(item, Gang):
                found_gang = _plan_gang(state, item, facts, find, config, taken, budget)
                if isinstance(found_gang, str):
                    plan.unplanned[item.key] = f"gang {item.key}: {found_gang}"
                    continue
                steps, trial = found_gang
            else:
                found = _search(state, item, facts, find, config, taken, budget, again=True)
                if isinstance(found, str):
                    plan.unplanned[item.key] = found
                    continue
                steps, trial = [_step(state, item, found, facts, config, taken)], found.trial
            trials.append(trial)
            plan.steps.extend(steps)
            budget -= sum(len(step.moves) for step in steps)
    finally:
        for trial in reversed(trials):
            trial.undo(state)
    return plan


def apply_step(state: ClusterState, step: Step) -> None:
    """Carry out ``step`` on ``state`` as it was planned: evict, place, place again."""
    for move in step.moves:
        state.release(move.pod.key)
    state.allocate(step.pending, step.node, step.gpus)
    for move in step.moves:
        state.allocate(move.pod, move.target, move.target_gpus)


def asks(pod: PodSpec) -> str:
    """The pod's GPU request in words."""
    req = pod.gpu
    if req.milli < MILLI_PER_GPU:
        return f"{req.milli} milli of one GPU"
    return f"{req.count} GPU" + ("s" if req.count > 1 else "")


def _plan_gang(
    state: ClusterState,
    gang: Gang,
    facts: MoveFacts,
    find: Find,
    config: Defragmentation,
    taken: Taken,
    budget: int,
) -> tuple[list[Step], _Trial] | str:
    """The steps that let the gang start (in the first of its domains where moves can,
    when it has domains), with the one trial that undoes them all, or why there are none
    (then nothing of it is left in ``state``, ``taken`` as it was)."""
    need = facts.job_min.get(gang.key, 1) - facts.job_running.get(gang.key, 0)
    if need <= 0:
        # Its waiting pods are extras, placed as room allows and the first to go when room
        # is taken back: no running pod is restarted for them.
        return "its minimum is running; its extra pods get no moves"
    if need > len(gang.members):
        return f"needs {need} more pods to start, {len(gang.members)} wait: moves cannot start it"
    members = gang.members[:need]
    if not gang.domains:
        return _start_gang(state, members, facts, find, config, taken, budget)
    whys: list[str] = []
    for domain in gang.domains:
        held = tuple(pinned(pod, domain.selector) for pod in members)
        found = _start_gang(state, held, facts, find, config, taken, budget)
        if not isinstance(found, str):
            return found
        whys.append(f"{domain.name}: {found}")
    return "moves start it in none of the domains it may use: " + "; ".join(whys)


def _start_gang(
    state: ClusterState,
    members: tuple[PodSpec, ...],
    facts: MoveFacts,
    find: Find,
    config: Defragmentation,
    taken: Taken,
    budget: int,
) -> tuple[list[Step], _Trial] | str:
    """``_plan_gang`` for the members a gang needs, where ``find`` puts them. The pods a
    member's room is made of are placed again once every member is in: placed at once, one
    could take the room the next member needs."""
    need = len(members)
    mine = taken.copy()
    made: list[tuple[PodSpec, _Tried, Taken]] = []  # a member, its room, ``mine`` before it
    # One trial for the whole gang: the pods moved for a member are placed again after the
    # later members' trials, so its members' trials could not be undone one by one.
    whole = _Trial([], [])
    for pod in members:
        fits = find(state, pod)
        if fits is not None:
            state.allocate(pod, fits.node, fits.gpus)
            whole.placed.append(pod.key)
            continue
        left = budget - sum(len(tried.evicted) for _, tried, _ in made)
        found = (
            _search(state, pod, facts, find, config, mine, left, again=False)
            if left > 0
            else "the round's moves are spent"
        )
        if isinstance(found, str):
            whole.undo(state)  # it holds the members placed so far, and nothing else yet
            return (
                f"room for {len(whole.placed)} of the {need} pods it needs; pod {pod.key}: {found}"
            )
        made.append((pod, found, mine.copy()))
        mine.add([running for running, _ in found.evicted])
        whole.released.extend(found.trial.released)
        whole.placed.extend(found.trial.placed)
    if not made:
        whole.undo(state)
        return f"the {need} pod(s) it needs fit without moves; what holds it back is not room"
    steps: list[Step] = []
    for pod, tried, before in made:
        if not _again(state, tried, find, whole):
            whole.undo(state)
            return f"a pod moved for {pod.key} has nowhere else to go once the gang is in"
        steps.append(_step(state, pod, tried, facts, config, before))
    taken.jobs, taken.budgets, taken.pods = mine.jobs, mine.budgets, mine.pods
    return steps, whole


def _search(
    state: ClusterState,
    pod: PodSpec,
    facts: MoveFacts,
    find: Find,
    config: Defragmentation,
    taken: Taken,
    budget: int,
    *,
    again: bool,
) -> _Tried | str:
    """The trial that made room for ``pod`` (its moved pods placed again if ``again``), or
    why there is none."""
    req = pod.gpu
    if req.count == 0 or req.kind is not GpuKind.GPU or not req.plain:
        return "defragmentation plans for whole GPUs or a share of one GPU only"
    mask = state.schedulable & (state.gpu_count >= req.count)
    mask &= (state.cpu_cap >= pod.cpu_milli) & (state.mem_cap >= pod.memory_mib)
    for key, value in pod.node_selector:
        mask &= state.label_mask(key, value)
    if req.models:
        ids = [state.model_ids[m] for m in req.models if m in state.model_ids]
        mask &= np.isin(state.model_id, ids)
    # The room a move makes on a node that could hold the pod is GPU that lands elsewhere,
    # on any schedulable node (one the pod itself could not use included): what is idle
    # there and on the nodes that could hold it bounds what moves can gather.
    idle = int(state.gpu_free_total[state.schedulable].sum())
    if idle < req.total_milli:
        return (
            f"{idle} milli-GPU idle on the schedulable nodes, it asks "
            f"{req.total_milli}: no move makes room that is not there"
        )
    if req.milli == MILLI_PER_GPU:
        short = np.maximum(0, req.count - state.gpu_idle_count)
    else:
        short = np.maximum(0, req.milli - state.gpu_max_free)
    where = np.flatnonzero(mask)
    order = where[np.argsort(short[where], kind="stable")]
    refused: Counter[str] = Counter()
    nodes = _candidates(state, pod, order.tolist(), facts, config, taken, refused)
    most = min(budget, config.max_moves_per_pod)
    counted = 0
    for size in range(1, most + 1):
        fitting: list[tuple[int, int, tuple[str, ...], _Node, tuple[int, ...]]] = []
        for node in nodes:
            for subset in combinations(range(len(node.movable)), size):
                counted += 1
                if counted > MAX_SUBSETS:
                    break
                if _room(state, pod, node, subset) and _together(node, subset, facts, taken):
                    moved = sum(node.held[i].gpu_milli * len(node.held[i].gpus) for i in subset)
                    keys = tuple(node.movable[i].key for i in subset)
                    fitting.append((moved, node.rank, keys, node, subset))
        fitting.sort(key=lambda c: c[:3])
        for _, _, _, node, subset in fitting[:MAX_TRIALS]:
            found = _trial(state, pod, node, [node.movable[i] for i in subset], find, again)
            if found is not None:
                return found
        if counted > MAX_SUBSETS:
            break
    if not nodes:
        why = ", ".join(f"{rule} {n}" for rule, n in sorted(refused.items()))
        return "no node near fitting holds a movable pod" + (
            f" (pods refused: {why})" if why else ""
        )
    return (
        f"no set of at most {most} moves on the {len(nodes)} nodes examined lets it fit "
        "with every moved pod placed again"
    )


def _candidates(
    state: ClusterState,
    pod: PodSpec,
    order: list[int],
    facts: MoveFacts,
    config: Defragmentation,
    taken: Taken,
    refused: Counter[str],
) -> list[_Node]:
    """The nodes to examine, nearest to fitting first, each with its movable pods."""
    out: list[_Node] = []
    for rank, n in enumerate(order[: config.max_nodes_per_pod * SKIP_FACTOR]):
        if len(out) >= config.max_nodes_per_pod:
            break
        movable: list[tuple[int, str, RunningPod, Allocation]] = []
        for running in facts.on_node(n):
            alloc = state.allocations.get(running.key)
            if alloc is None or alloc.node != n or running.key in taken.pods:
                continue  # gone, or moved by an earlier step of the plan
            rule, _ = refusal(running, pod, facts, taken, config)
            if rule:
                refused[rule] += 1
                continue
            movable.append((alloc.gpu_milli * len(alloc.gpus), running.key, running, alloc))
        if not movable:
            continue
        movable.sort(key=lambda m: m[:2])
        kept = movable[:MAX_PODS_PER_NODE]
        out.append(_Node(n, rank, [m[2] for m in kept], [m[3] for m in kept]))
    return out


def _room(state: ClusterState, pod: PodSpec, node: _Node, subset: tuple[int, ...]) -> bool:
    """Whether the node, without the subset's pods, has the CPU, memory, pod slot and
    per-GPU milli the pod asks (GPU memory is left to the trial)."""
    n = node.index
    held = [node.held[i] for i in subset]
    if int(state.cpu_free[n]) + sum(a.cpu_milli for a in held) < pod.cpu_milli:
        return False
    if int(state.mem_free[n]) + sum(a.memory_mib for a in held) < pod.memory_mib:
        return False
    if int(state.pods[n]) - len(held) >= int(state.max_pods[n]):
        return False
    free = state.gpu_free[n, : int(state.gpu_count[n])].tolist()
    for a in held:
        for g in a.gpus:
            free[g] += a.gpu_milli
    req = pod.gpu
    if req.milli == MILLI_PER_GPU:
        return sum(1 for v in free if v >= MILLI_PER_GPU) >= req.count
    return max(free, default=0) >= req.milli


def _together(node: _Node, subset: tuple[int, ...], facts: MoveFacts, taken: Taken) -> bool:
    """Whether the subset's pods may all move: each passed the rules alone; two of one
    job, or under one budget, must pass them together too."""
    if len(subset) == 1:
        return True
    pods = [node.movable[i] for i in subset]
    jobs = [p.job for p in pods if p.job]
    budgets = [b for p in pods for b in p.budgets]
    if len(set(jobs)) == len(jobs) and len(set(budgets)) == len(budgets):
        return True
    so_far = taken.copy()
    for p in pods:
        left_in_job = facts.job_running.get(p.job, 0) - so_far.jobs[p.job] - 1
        if p.job and left_in_job < facts.job_min.get(p.job, 1):
            return False
        for b in p.budgets:
            if facts.budget_allowed.get(b, 0) - so_far.budgets[b] < 1:
                return False
        so_far.add([p])
    return True


@dataclass(slots=True)
class _Tried:
    """A trial that made room: where the pod went, the pods evicted for it and, once placed
    again, where each went."""

    placement: Placement
    evicted: list[tuple[RunningPod, Allocation]]
    moved: list[tuple[RunningPod, Allocation, Placement]]
    trial: _Trial


def _trial(
    state: ClusterState,
    pod: PodSpec,
    node: _Node,
    pods: list[RunningPod],
    find: Find,
    again: bool = True,
) -> _Tried | None:
    """Evict ``pods`` and place ``pod`` on the node with ``find``, then (``again``) place
    ``pods`` again; None (and the state as it was) if any of that fails."""
    released = [state.release(p.key) for p in pods]
    trial = _Trial(released, [])
    placement = find(state, pod)
    if placement is None or placement.node != node.index:
        trial.undo(state)
        return None
    state.allocate(pod, placement.node, placement.gpus)
    trial.placed.append(pod.key)
    tried = _Tried(placement, list(zip(pods, released, strict=True)), [], trial)
    if again and not _again(state, tried, find, trial):
        trial.undo(state)
        return None
    return tried


def _again(state: ClusterState, tried: _Tried, find: Find, into: _Trial) -> bool:
    """Place the pods evicted in ``tried`` again with ``find``, biggest first, each noted in
    ``into``; False if one has nowhere to go or would land back on the GPUs it held (then
    the caller undoes ``into``)."""
    by_size = sorted(tried.evicted, key=lambda m: (-m[1].gpu_milli * len(m[1].gpus), m[0].key))
    for running, alloc in by_size:
        again = find(state, running.pod)
        if again is None or (again.node == alloc.node and again.gpus == alloc.gpus):
            return False
        state.allocate(running.pod, again.node, again.gpus)
        into.placed.append(running.key)
        tried.moved.append((running, alloc, again))
    return True


def _step(
    state: ClusterState,
    pod: PodSpec,
    tried: _Tried,
    facts: MoveFacts,
    config: Defragmentation,
    taken: Taken,
) -> Step:
    """The step a successful trial makes, each move with its reason; ``taken`` counts it."""
    name = [node.name for node in state.nodes]
    at = tried.placement
    moves = []
    for running, alloc, again in tried.moved:
        gpus = ", ".join(map(str, alloc.gpus))
        freed = f"GPU {gpus} ({alloc.gpu_milli} milli" + (" each)" if len(alloc.gpus) > 1 else ")")
        reason = (
            f"moves pod {running.key} off node {name[alloc.node]}: frees {freed} so that "
            f"pending pod {pod.key} ({asks(pod)}) fits on GPU "
            f"{', '.join(map(str, at.gpus))} there; placed again on node {name[again.node]} "
            f"GPU {', '.join(map(str, again.gpus))}; "
            f"{why_movable(running, pod, facts, taken, config)}"
        )
        taken.add([running])
        moves.append(Move(running.pod, alloc.node, alloc.gpus, again.node, again.gpus, reason))
    return Step(pod, at.node, at.gpus, tuple(moves))

"""Which running pods a defragmentation move may take, and why or why not.

A move evicts a running pod so that it starts again elsewhere. It is allowed only when
every rule below agrees; each rule answers with the reason it refuses, or "" to agree,
and ``why_movable`` says in words why a pod that passes them all may go.

1. Preemptibility. The pod's annotation ``kgpu.io/preemptible`` says "true" or "false";
   without it, the pod is preemptible when its priority is below the profile's
   ``preemptibleBelowPriority`` (KAI's convention: below the "build" priority, 100). Any
   other value of the annotation is refused, naming it: an unreadable promise is no
   promise.
2. Priority. A move never disturbs a pod of higher priority than the pod it makes room
   for. Equal priority may move: unlike a victim of preemption, a moved pod is placed
   again at once (the planner proposes no move whose pod has nowhere to go), so it loses
   a restart, not its place; KAI's consolidation moves pods across priorities the same way.
3. Min-runtime. A pod that has run less than its queue's min-runtime, or the profile's
   ``minRuntimeSeconds``, stays. A moved pod starts again, so it cannot be moved twice in
   that time.
4. Gang minimum. A pod of a job (PodGroup) moves only if the job keeps at least its
   ``minMember`` pods running without it and without the pods this plan already moves. A
   pod that names no job is a job of its own and is free to move.
5. PodDisruptionBudgets. A pod selected by a budget moves only while the budget allows
   one more disruption after the ones this plan already takes from it; a pod selected by
   more than one budget never moves (the Eviction API refuses to evict it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kgpu.framework.defrag_config import Defragmentation
from kgpu.model.pod import PodKey, PodSpec

PREEMPTIBLE_ANNOTATION = "kgpu.io/preemptible"
# The rules in the order they are asked, by the names refusals are counted under.
RULES = ("preemptibility", "priority", "min-runtime", "gang minimum", "disruption budget")


@dataclass(frozen=True, slots=True)
class RunningPod:
    """A running pod as the rules see it: its spec, when it started (seconds, on the
    clock of ``MoveFacts.now``), its queue's min-runtime, its job ("" for a pod of its
    own) and the disruption budgets that select it (their keys)."""

    pod: PodSpec
    started: float
    min_runtime_s: float = 0.0
    job: str = ""
    budgets: tuple[str, ...] = ()

    @property
    def key(self) -> PodKey:
        return self.pod.key


@dataclass(slots=True)
class MoveFacts:
    """What the rules read about the cluster: the time, the pods running on each node
    (``on_node``), each job's ``minMember`` and running pods, and each budget's
    disruptions allowed now."""

    now: float
    on_node: Callable[[int], Sequence[RunningPod]]
    job_min: Mapping[str, int] = field(default_factory=dict)
    job_running: Mapping[str, int] = field(default_factory=dict)
    budget_allowed: Mapping[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class Taken:
    """What a plan has used so far: moves per job, disruptions per budget, pods moved."""

    jobs: Counter[str] = field(default_factory=Counter)
    budgets: Counter[str] = field(default_factory=Counter)
    pods: set[PodKey] = field(default_factory=set)

    def copy(self) -> Taken:
        return Taken(Counter(self.jobs), Counter(self.budgets), set(self.pods))

    def add(self, pods: Sequence[RunningPod]) -> None:
        for p in pods:
            self.pods.add(p.key)
            if p.job:
                self.jobs[p.job] += 1
            self.budgets.update(p.budgets)


def preemptible(pod: PodSpec, config: Defragmentation) -> str:
    """Rule 1: "" when the pod may be preempted, else why not."""
    value = pod.annotations.get(PREEMPTIBLE_ANNOTATION)
    if value is None:
        if pod.priority < config.preemptible_below_priority:
            return ""
        return (
            f"not preemptible: priority {pod.priority} is not below "
            f"{config.preemptible_below_priority} and no {PREEMPTIBLE_ANNOTATION} annotation"
        )
    if value == "true":
        return ""
    if value == "false":
        return f'not preemptible: annotation {PREEMPTIBLE_ANNOTATION} is "false"'
    return (
        f"not preemptible: annotation {PREEMPTIBLE_ANNOTATION} is {value!r}, expected "
        '"true" or "false"'
    )


def priority_refusal(running: RunningPod, pending: PodSpec) -> str:
    """Rule 2."""
    if running.pod.priority > pending.priority:
        return (
            f"priority {running.pod.priority} is above pending pod {pending.key}'s "
            f"{pending.priority}"
        )
    return ""


def runtime_refusal(running: RunningPod, facts: MoveFacts, config: Defragmentation) -> str:
    """Rule 3."""
    least = max(running.min_runtime_s, config.min_runtime_seconds)
    ran = facts.now - running.started
    if ran < least:
        return f"ran {duration(ran)}, less than its min-runtime {duration(least)}"
    return ""


def gang_refusal(running: RunningPod, facts: MoveFacts, taken: Taken) -> str:
    """Rule 4: with ``taken`` the moves already planned (not counting this pod)."""
    if not running.job:
        return ""
    least = facts.job_min.get(running.job, 1)
    left = facts.job_running.get(running.job, 0) - taken.jobs[running.job] - 1
    if left < least:
        return f"job {running.job} would keep {left} running pods, below its minMember {least}"
    return ""


def budget_refusal(running: RunningPod, facts: MoveFacts, taken: Taken) -> str:
    """Rule 5: with ``taken`` the disruptions already planned (not counting this pod)."""
    if len(running.budgets) > 1:
        return (
            f"selected by {len(running.budgets)} PodDisruptionBudgets "
            f"({', '.join(running.budgets)}); the Eviction API evicts none such"
        )
    for budget in running.budgets:
        left = facts.budget_allowed.get(budget, 0) - taken.budgets[budget]
        if left < 1:
            return f"PodDisruptionBudget {budget} allows no more disruptions"
    return ""


def refusal(
    running: RunningPod,
    pending: PodSpec,
    facts: MoveFacts,
    taken: Taken,
    config: Defragmentation,
) -> tuple[str, str]:
    """The first rule that refuses moving ``running`` for ``pending`` (its name, as in
    ``RULES``, and its reason), or ("", "") if none does."""
    for rule, why in (
        ("preemptibility", preemptible(running.pod, config)),
        ("priority", priority_refusal(running, pending)),
        ("min-runtime", runtime_refusal(running, facts, config)),
        ("gang minimum", gang_refusal(running, facts, taken)),
        ("disruption budget", budget_refusal(running, facts, taken)),
    ):
        if why:
            return rule, why
    return "", ""


def why_movable(
    running: RunningPod,
    pending: PodSpec,
    facts: MoveFacts,
    taken: Taken,
    config: Defragmentation,
) -> str:
    """Why each rule lets ``running`` move (``taken``: the plan's moves before it)."""
    pod = running.pod
    parts = [
        "preemptible by annotation"
        if pod.annotations.get(PREEMPTIBLE_ANNOTATION) == "true"
        else f"preemptible at priority {pod.priority} < {config.preemptible_below_priority}",
        f"priority {pod.priority} <= {pending.priority}",
        f"ran {duration(facts.now - running.started)} >= min-runtime "
        f"{duration(max(running.min_runtime_s, config.min_runtime_seconds))}",
    ]
    if running.job:
        left = facts.job_running.get(running.job, 0) - taken.jobs[running.job] - 1
        parts.append(
            f"job {running.job} keeps {left} running >= minMember "
            f"{facts.job_min.get(running.job, 1)}"
        )
    for budget in running.budgets:
        left = facts.budget_allowed.get(budget, 0) - taken.budgets[budget]
        parts.append(f"PodDisruptionBudget {budget} allows {left} more disruption(s)")
    if not running.budgets:
        parts.append("no PodDisruptionBudget selects it")
    return "; ".join(parts)


def duration(seconds: float) -> str:
    """A short human duration: 45s, 10m, 2h5m, 3d4h."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f"{s % 60}s" if s % 60 else "")
    if s < 86400:
        return f"{s // 3600}h" + (f"{s % 3600 // 60}m" if s % 3600 // 60 else "")
    return f"{s // 86400}d" + (f"{s % 86400 // 3600}h" if s % 86400 // 3600 else "")

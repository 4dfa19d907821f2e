"""Jobs (PodGroups) and their tasks (pods), as a scheduling session sees them.

A job is placed as a gang: ``min_member`` of its pods or none. An elastic job has more pods
than that (up to ``max_member``); the pods past the minimum are extras, placed as capacity
allows and the first to go when resources are taken back. A pod that names no job is a job
of its own with ``min_member`` 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NewType

from kgpu.model.card import NAME_ANNOTATION, CardError, parse_card_name
from kgpu.model.pod import PodSpec

JobKey = NewType("JobKey", str)  # "namespace/name" of the PodGroup


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A PodGroup: its queue, gang size, elastic bound, priority and card request.

    ``max_member`` 0 means as many pods as the job has. ``created`` orders jobs of equal
    priority (earlier first). ``card_request`` is ``volcano.sh/card.request``: card
    alternatives to whole cards, checked against the queue's card quota at enqueue.
    ``min_resources`` is the PodGroup's ``spec.minResources`` (cpu milli, memory MiB, GPU
    milli): what enqueue holds the job to at least, when its first pods ask for less.
    ``one_card_type``: all its tasks on one card, the card of the first placed (Volcano's
    capacity-card: "all tasks in a job use the same card type"); else each task takes the
    first of its card alternatives with room.

    ``enqueued``: what the PodGroup's own record says of its admission, for a PodGroup whose
    pods are created only once it is admitted (Volcano's, whose job controller waits for
    ``Inqueue``). None: no such record (kgpu's and KAI's): the job is judged by enqueue
    whenever it has pods waiting and none placed. False: not admitted yet: judged, with
    pods or without. True: admitted in an earlier session: not judged again, and its
    ``min_resources``, less what its running pods hold, count against its queue at enqueue
    until its pods are placed.
    """

    key: JobKey
    queue: str = ""
    min_member: int = 1
    max_member: int = 0
    priority: int = 0
    created: float = 0.0
    card_request: Mapping[tuple[str, ...], int] = field(default_factory=dict)
    min_resources: Mapping[str, int] = field(default_factory=dict)
    one_card_type: bool = False
    enqueued: bool | None = None


@dataclass(frozen=True, slots=True)
class Task:
    """One pod of a job. It is running when the session's ClusterState holds it, since
    ``started`` (seconds, on the clock the snapshot's ``now`` is read from)."""

    pod: PodSpec
    job: JobKey = JobKey("")
    started: float = 0.0

    @property
    def key(self) -> str:
        return self.pod.key

    def card_names(self) -> tuple[str, ...]:
        """The ``volcano.sh/card.name`` alternatives, in order (CardError if malformed)."""
        text = self.pod.annotations.get(NAME_ANNOTATION)
        return parse_card_name(text) if text is not None else ()


def singleton_job(task: Task) -> JobSpec:
    """The job of a pod that names none: itself, in its own queue, at its own priority."""
    return JobSpec(key=JobKey(task.pod.key), queue=task.pod.queue, priority=task.pod.priority)


@dataclass(slots=True, init=False)
class JobInfo:
    """A job during one session: its tasks by state and what the session did with them.

    ``running`` are the tasks holding resources when the session opened and not evicted
    since, and ``running_nodes`` the node of each, in the same order (the session keeps
    them together); ``placed`` the tasks the session gave a node (bound or pipelined);
    ``pending`` the tasks still waiting, in the order they are to be tried.
    """

    spec: JobSpec
    queue: int  # index in the session's QueueTree, -1 if the queue is unusable
    running: list[Task]
    running_nodes: list[int]
    pending: list[Task]
    placed: list[Task]
    admitted: bool
    problem: str  # why the job cannot be scheduled at all (bad queue, bad card name)

    # Written out, not generated: a generated __init__ is Python even in the compiled
    # build (mypyc compiles only what the source spells), and a session opens one a job.
    def __init__(
        self,
        spec: JobSpec,
        queue: int,
        running: list[Task] | None = None,
        pending: list[Task] | None = None,
        placed: list[Task] | None = None,
        admitted: bool = True,
        problem: str = "",
        running_nodes: list[int] | None = None,
    ) -> None:
        self.spec = spec
        self.queue = queue
        self.running = [] if running is None else running
        self.running_nodes = [] if running_nodes is None else running_nodes
        if len(self.running_nodes) != len(self.running):
            raise ValueError(f"job {spec.key}: a node for each running task, not {running_nodes}")
        self.pending = [] if pending is None else pending
        self.placed = [] if placed is None else placed
        self.admitted = admitted
        self.problem = problem

    @property
    def key(self) -> JobKey:
        return self.spec.key

    @property
    def alive(self) -> int:
        """Pods that hold or will hold resources once the session's decisions are done."""
        return len(self.running) + len(self.placed)

    @property
    def max_pods(self) -> int:
        total = len(self.running) + len(self.placed) + len(self.pending)
        return min(total, self.spec.max_member) if self.spec.max_member else total


def card_problem(task: Task) -> str:
    """Why a task's card annotation cannot be read, or "" if it can."""
    try:
        task.card_names()
    except CardError as exc:
        return f"Pod {task.pod.key}: {exc}"
    return ""

"""A harness for sessions: a snapshot in, actions run, binds and evictions out.

snap = Snap([make_node("a").gpus(4).build()], queues=[QueueSpec("q")])
snap.job("train", "q", min_member=2)
snap.pending(make_pod("w0").gpus(1), job="train")
snap.running(make_pod("old").gpus(2), node="a", job="other", started=0.0)
result = snap.run(actions=("allocate",))
assert binds(result) == [("default/w0", "a")]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kgpu.actions.session_runner import SessionConfig, run_session
from kgpu.config import load_profile
from kgpu.framework.profile import Profile
from kgpu.framework.session_result import SessionResult
from kgpu.framework.session_snapshot import Snapshot
from kgpu.model.gpu import GpuKind
from kgpu.model.job import JobKey, JobSpec, Task
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodSpec
from kgpu.model.queue import QueueSpec
from kgpu.plugins.node.gpu_slots import lowest_idle_gpus, tightest_gpu
from kgpu.plugins.registry import build_scheduler
from kgpu.state.cluster import ClusterState
from tests.builders import PodBuilder


def with_annotations(pod: PodBuilder | PodSpec, **annotations: str) -> PodSpec:
    spec = pod.build() if isinstance(pod, PodBuilder) else pod
    return replace(spec, annotations={**spec.annotations, **annotations})


def card(pod: PodBuilder | PodSpec, name: str) -> PodSpec:
    return with_annotations(pod, **{"volcano.sh/card.name": name})


@dataclass
class Snap:
    nodes: Sequence[NodeInfo]
    queues: list[QueueSpec] = field(default_factory=list)
    now: float = 1000.0
    jobs: list[JobSpec] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.state = ClusterState(self.nodes)

    def job(self, name: str, queue: str = "", **kw: Any) -> JobKey:
        key = JobKey(f"default/{name}")
        self.jobs.append(JobSpec(key=key, queue=queue, **kw))
        return key

    def pending(self, pod: PodBuilder | PodSpec, job: str = "", queue: str = "") -> Task:
        spec = pod.build() if isinstance(pod, PodBuilder) else pod
        spec = replace(spec, queue=queue) if queue else spec
        task = Task(spec, JobKey(f"default/{job}") if job else JobKey(""))
        self.tasks.append(task)
        return task

    def running(
        self,
        pod: PodBuilder | PodSpec,
        node: str,
        job: str = "",
        started: float = 0.0,
        queue: str = "",
        need: tuple[int, int] | None = None,  # what it holds of each GPU, as read back
    ) -> Task:
        spec = pod.build() if isinstance(pod, PodBuilder) else pod
        spec = replace(spec, queue=queue) if queue else spec
        n = self.state.index[node]  # type: ignore[index]
        gpus: tuple[int, ...]
        if spec.gpu.kind is GpuKind.MIG:
            gpus = ()
        elif spec.gpu.count and not spec.gpu.milli:  # memory-only or MPS: the first GPU it fits
            count = int(self.state.gpu_count[n])
            gpus = next((g,) for g in range(count) if not self.state.fits(spec, n, (g,)))
        elif spec.gpu.is_shared:
            gpus = (tightest_gpu(self.state, n, spec.gpu.milli),)
        else:
            gpus = lowest_idle_gpus(self.state, n, spec.gpu.count)
        self.state.allocate(spec, n, gpus, need=need)
        task = Task(spec, JobKey(f"default/{job}") if job else JobKey(""), started)
        self.tasks.append(task)
        return task

    def snapshot(self) -> Snapshot:
        return Snapshot(self.state, self.queues, self.jobs, self.tasks, self.now)

    def run(
        self,
        actions: Sequence[str] = ("enqueue", "allocate", "backfill", "reclaim", "preempt"),
        plugins: Sequence[str] = ("proportion", "priority", "gang", "capacity-card"),
        profile: str | Profile = "bestfit",
        args: Mapping[str, dict[str, Any]] | None = None,
    ) -> SessionResult:
        prof = load_profile(profile) if isinstance(profile, str) else profile
        config = SessionConfig(
            actions=tuple(actions), plugins=tuple(plugins), plugin_args=dict(args or {})
        )
        result = run_session(self.snapshot(), build_scheduler(prof), config)
        self.state.check_invariants()
        return result


def binds(result: SessionResult) -> list[tuple[str, str]]:
    return [(b.pod.removeprefix("default/"), b.node) for b in result.binds]


def evicted(result: SessionResult) -> list[str]:
    return sorted(e.pod.removeprefix("default/") for e in result.evictions)


def nominated(result: SessionResult) -> list[tuple[str, str]]:
    return [(n.pod.removeprefix("default/"), n.node) for n in result.nominations]


def pending(result: SessionResult) -> dict[str, str]:
    return {p.pod.removeprefix("default/"): p.message for p in result.pending}

"""Fluent builders for test objects: ``make_pod("a").gpus(2)``, ``make_node("n").gpus(8, "A100")``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from kgpu.framework.interfaces import Verdicts
from kgpu.model.devices import NodeDevices
from kgpu.model.gpu import NO_GPU, GpuRequest
from kgpu.model.node import NodeInfo, NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.taints import Effect, Taint, Toleration
from kgpu.state.cluster import ClusterState


@dataclass
class PodBuilder:
    spec: PodSpec

    def cpu(self, milli: int) -> PodBuilder:
        return PodBuilder(replace(self.spec, cpu_milli=milli))

    def memory(self, mib: int) -> PodBuilder:
        return PodBuilder(replace(self.spec, memory_mib=mib))

    def gpus(self, count: int, *models: str) -> PodBuilder:
        gpu = GpuRequest(count, 1000 if count else 0, models) if count else NO_GPU
        return PodBuilder(replace(self.spec, gpu=gpu))

    def share(self, milli: int, *models: str) -> PodBuilder:
        return PodBuilder(replace(self.spec, gpu=GpuRequest(1, milli, models)))

    def request(self, gpu: GpuRequest) -> PodBuilder:
        """Any GPU request, for the dialects that have no shortcut of their own."""
        return PodBuilder(replace(self.spec, gpu=gpu))

    def selector(self, key: str, value: str) -> PodBuilder:
        return PodBuilder(
            replace(self.spec, node_selector=(*self.spec.node_selector, (key, value)))
        )

    def tolerate(self, key: str, value: str = "", operator: str = "Equal") -> PodBuilder:
        tol = Toleration(key=key, operator=operator, value=value)
        return PodBuilder(replace(self.spec, tolerations=(*self.spec.tolerations, tol)))

    def priority(self, value: int) -> PodBuilder:
        return PodBuilder(replace(self.spec, priority=value))

    def build(self) -> PodSpec:
        return self.spec


def make_pod(name: str = "p", namespace: str = "default") -> PodBuilder:
    return PodBuilder(PodSpec(key=PodKey(f"{namespace}/{name}"), cpu_milli=1000, memory_mib=1024))


@dataclass
class NodeBuilder:
    name: str
    cpu_milli: int = 64_000
    memory_mib: int = 262_144
    gpu_count: int = 0
    gpu_model: str = ""
    gpu_memory_mib: int = 0
    max_pods: int = 110
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    gpu_replicas: int = 1
    mig: tuple[tuple[str, int], ...] = ()
    rdma: int = 0
    fpga: int = 0
    devices: NodeDevices | None = None

    def cpu(self, milli: int) -> NodeBuilder:
        return replace(self, cpu_milli=milli)

    def memory(self, mib: int) -> NodeBuilder:
        return replace(self, memory_mib=mib)

    def gpus(self, count: int, model: str = "A100", memory_mib: int = 81_920) -> NodeBuilder:
        return replace(self, gpu_count=count, gpu_model=model, gpu_memory_mib=memory_mib)

    def replicas(self, count: int) -> NodeBuilder:
        """MPS or time-sliced: each GPU split ``count`` ways."""
        return replace(self, gpu_replicas=count)

    def mig_slices(self, profile: str, count: int) -> NodeBuilder:
        return replace(self, mig=tuple(sorted({**dict(self.mig), profile: count}.items())))

    def rdma_devices(self, count: int) -> NodeBuilder:
        return replace(self, rdma=count)

    def fpga_devices(self, count: int) -> NodeBuilder:
        return replace(self, fpga=count)

    def with_devices(self, devices: NodeDevices) -> NodeBuilder:
        return replace(self, devices=devices)

    def label(self, key: str, value: str) -> NodeBuilder:
        return replace(self, labels={**self.labels, key: value})

    def taint(self, key: str, value: str = "", effect: Effect = Effect.NO_SCHEDULE) -> NodeBuilder:
        return replace(self, taints=(*self.taints, Taint(key, value, effect)))

    def cordoned(self) -> NodeBuilder:
        return replace(self, unschedulable=True)

    def max_pod_count(self, count: int) -> NodeBuilder:
        return replace(self, max_pods=count)

    def build(self) -> NodeInfo:
        return NodeInfo(
            name=NodeName(self.name),
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            gpu_count=self.gpu_count,
            gpu_model=self.gpu_model,
            gpu_memory_mib=self.gpu_memory_mib,
            max_pods=self.max_pods,
            labels=self.labels,
            taints=self.taints,
            unschedulable=self.unschedulable,
            gpu_replicas=self.gpu_replicas,
            mig=self.mig,
            rdma=self.rdma,
            fpga=self.fpga,
            devices=self.devices,
        )


def make_node(name: str = "n") -> NodeBuilder:
    return NodeBuilder(name)


def state_arrays(state: ClusterState) -> dict[str, npt.NDArray[Any]]:
    """Copies of every array of ``state``, by attribute name (``dir``, not ``vars``: a
    compiled ClusterState has no ``__dict__``)."""
    found = {name: getattr(state, name) for name in dir(state) if not name.startswith("__")}
    return {name: value.copy() for name, value in found.items() if isinstance(value, np.ndarray)}


def verdict_reasons(verdicts: Verdicts) -> list[str]:
    """Per node a filter was shown: "" if it passed, else its reason's code."""
    out = ["" if ok else "?" for ok in verdicts.ok.tolist()]
    for reason, mask in verdicts.rejected:
        for i in np.flatnonzero(mask).tolist():
            out[i] = reason.code
    return out

"""The nodes that came closest to taking a pending pod, and what each lacks, in numbers.

kube-scheduler's filters stop at a node's first failure, which is the right count for the
aggregate ("0/3 nodes are available: 2 insufficient GPU, ..."), but hides how far off a node
is: a node that lacks one GPU and one that lacks GPUs, CPU and the right label read the
same. Here every check runs on every node, so a node is ranked by how many checks it fails,
then by how much it lacks (each shortfall as a share of what the pod asks, a failed
yes/no check counting as one whole), then by its place in the node list.

Only what the profile's filters check is checked; the phrases use the units people write in
manifests (cores, Gi/Mi, GPUs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kgpu.framework.interfaces import BoolArray, FloatArray, IntArray
from kgpu.model.node import NodeInfo
from kgpu.model.pod import PodSpec
from kgpu.model.taints import untolerated
from kgpu.model.units import MILLI_PER_GPU
from kgpu.plugins.node.gpu_fit import allowed_model_mask
from kgpu.state.cluster import ClusterState

NEAR_MISSES = 3


@dataclass(frozen=True, slots=True)
class NearMiss:
    """One node: the checks it fails (``lacks``) and the resource checks it passes."""

    node: str
    lacks: tuple[str, ...]
    fine: tuple[str, ...]

    @property
    def failed(self) -> int:
        return len(self.lacks)

    def line(self) -> str:
        return f"{self.node}: " + "; ".join(self.lacks + self.fine)


def cpu_text(milli: int) -> str:
    return f"{milli / 1000:g}"


def memory_text(mib: int) -> str:
    if mib == 0:
        return "0"
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def gpu_share_text(milli: int) -> str:
    return f"{milli / MILLI_PER_GPU:g}"


def near_misses(state: ClusterState, pod: PodSpec, limit: int = NEAR_MISSES) -> list[NearMiss]:
    """The ``limit`` nodes that fail the fewest checks and lack the least."""
    n = len(state)
    if n == 0:
        return []
    failed = np.zeros(n, dtype=np.int64)
    shortfall = np.zeros(n, dtype=np.float64)
    for mask, weight in _checks(state, pod):
        failed += mask
        shortfall += np.where(mask, weight, 0.0)
    order = np.lexsort((np.arange(n), shortfall, failed))[:limit]
    return [_describe(state, pod, int(i)) for i in order]


Check = tuple[BoolArray, FloatArray | float]


def _checks(state: ClusterState, pod: PodSpec) -> list[Check]:
    """(failing nodes, how much each lacks relative to the request) per check."""
    checks: list[Check] = [
        (~state.schedulable, 1.0),
        (_selector_misses(state, pod) > 0, 1.0),
        (_untolerated(state, pod), 1.0),
        (state.pods >= state.max_pods, 1.0),
        _short(pod.cpu_milli, state.cpu_free),
        _short(pod.memory_mib, state.mem_free),
    ]
    gpu = pod.gpu
    if gpu.count:
        all_nodes = np.arange(len(state), dtype=np.int64)
        has_gpus = state.gpu_count > 0
        checks.append((~has_gpus, 1.0))
        if gpu.models:
            checks.append((~allowed_model_mask(state, gpu.models, all_nodes) & has_gpus, 1.0))
        # A node without GPUs fails once ("has no GPU"), not again for lacking idle ones.
        short, lack = (
            _short(gpu.milli, state.gpu_max_free)
            if gpu.is_shared
            else _short(gpu.count, state.gpu_idle_count)
        )
        checks.append((short & has_gpus, lack))
    return checks


def _short(need: int, have: IntArray) -> Check:
    lack = np.maximum(need - have, 0)
    return lack > 0, lack / max(need, 1)


def _selector_misses(state: ClusterState, pod: PodSpec) -> IntArray:
    misses = np.zeros(len(state), dtype=np.int64)
    for key, value in pod.node_selector:
        misses += ~state.label_mask(key, value)
    return misses


def _untolerated(state: ClusterState, pod: PodSpec) -> BoolArray:
    blocked = np.zeros(len(state), dtype=np.bool_)
    for i in np.flatnonzero(state.tainted).tolist():
        blocked[i] = untolerated(state.nodes[i].taints, pod.tolerations) is not None
    return blocked


def _describe(state: ClusterState, pod: PodSpec, i: int) -> NearMiss:
    node = state.nodes[i]
    lacks: list[str] = []
    fine: list[str] = []
    if node.unschedulable:
        lacks.append("cordoned (spec.unschedulable)")
    for key, value in pod.node_selector:
        have = node.labels.get(key)
        if have != value:
            shown = "missing" if have is None else f'"{have}"'
            lacks.append(f'label {key} is {shown}, the pod selects "{value}"')
    taint = untolerated(node.taints, pod.tolerations)
    if taint is not None:
        text = f"{taint.key}={taint.value}" if taint.value else taint.key
        lacks.append(f"taint {text}:{taint.effect} is not tolerated")
    if state.pods[i] >= state.max_pods[i]:
        lacks.append(f"at its limit of {int(state.max_pods[i])} pods")
    gpu = pod.gpu
    if gpu.count:
        _describe_gpu(state, pod, i, lacks, fine)
    cpu_free = int(state.cpu_free[i])
    if cpu_free < pod.cpu_milli:
        lacks.append(f"needs {cpu_text(pod.cpu_milli)} cpu, has {cpu_text(cpu_free)}")
    else:
        fine.append("cpu ok")
    mem_free = int(state.mem_free[i])
    if mem_free < pod.memory_mib:
        lacks.append(f"needs {memory_text(pod.memory_mib)} memory, has {memory_text(mem_free)}")
    else:
        fine.append("memory ok")
    return NearMiss(node.name, tuple(lacks), tuple(fine))


def _describe_gpu(
    state: ClusterState, pod: PodSpec, i: int, lacks: list[str], fine: list[str]
) -> None:
    gpu = pod.gpu
    node = state.nodes[i]
    if node.gpu_count == 0:
        lacks.append("has no GPU")
        return
    wrong_model = bool(gpu.models) and not gpu.allows(node.gpu_model)
    if wrong_model:
        lacks.append(f'GPU model "{node.gpu_model}" is not one of {"|".join(gpu.models)}')
    if gpu.is_shared:
        best = int(state.gpu_max_free[i])
        if best < gpu.milli:
            lacks.append(
                f"needs {gpu_share_text(gpu.milli)} of one GPU, "
                f"the freest GPU has {gpu_share_text(best)} free{_unhealthy(node)}"
            )
            return
    else:
        idle = int(state.gpu_idle_count[i])
        if idle < gpu.count:
            plural = "GPU" if gpu.count == 1 else "GPUs"
            lacks.append(f"needs {gpu.count} idle {plural}, has {idle}{_unhealthy(node)}")
            return
    if not wrong_model:  # room on GPUs of a model the pod refuses is no help
        fine.append("GPU ok")


def _unhealthy(node: NodeInfo) -> str:
    """A GPU the node's Device marks unhealthy offers nothing: say so, or the node reads as
    merely full."""
    bad = [d.minor for d in node.devices.gpus if not d.healthy] if node.devices else []
    if not bad:
        return ""
    minors = ", ".join(map(str, bad))
    return f" (GPU{'s' * (len(bad) > 1)} {minors} marked unhealthy by its Device)"

"""A built-in heterogeneous GPU cluster and pod list, in the spirit of the openb trace.

The public trace is not shipped with kgpu, so ``kgpu demo`` and tests replay this one
instead. It is generated from a seeded numpy Generator: the same (nodes, pods, seed)
always gives the same cluster and pods, and the types are those of :mod:`kgpu.sim.openb`.

Nodes (shares of the node count, rounded so they add up; order shuffled by the seed):

| model | GPUs | CPU cores | memory | GPU memory | share |
| --- | --- | --- | --- | --- | --- |
| A100 | 8 | 96 | 768 GiB | 80 GiB | 15% |
| V100 | 8 | 96 | 384 GiB | 32 GiB | 20% |
| T4 | 4 | 96 | 384 GiB | 16 GiB | 25% |
| P100 | 2 | 64 | 256 GiB | 16 GiB | 25% |
| A10 | 1 | 32 | 128 GiB | 24 GiB | 15% |

Pods (each drawn independently):

- 13% CPU-only: 8, 12.5, 16 or 32 cores.
- 37% a share of one GPU: 100..900 milli, most often 500, 810, 470 and 250.
- 45% one whole GPU; 5% whole multi-GPU: 2 (2%), 4 (1.5%) or 8 (1.5%) GPUs.
- GPU pods ask for 4, 8, 11.3 or 12 cores per GPU, scaled by their GPU share (at least
  one core, rounded to half a core), as openb's pods do; memory is 2 or 4 GiB per core
  (4 to 8 GiB for CPU-only pods).
- About 10% of GPU pods name the GPU models they accept (``gpu_spec``), always a set that
  holds a model with enough GPUs for them, so every pod fits an empty node of some kind.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kgpu.model.node import NodeInfo, NodeName
from kgpu.model.units import MILLI_PER_GPU
from kgpu.sim.openb import OPENB_MAX_PODS, TracePod


@dataclass(frozen=True, slots=True)
class NodeKind:
    model: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    gpu_memory_mib: int
    share: float


NODE_KINDS = (
    NodeKind("A100", 8, 96_000, 786_432, 81_920, 0.15),
    NodeKind("V100", 8, 96_000, 393_216, 32_768, 0.20),
    NodeKind("T4", 4, 96_000, 393_216, 15_360, 0.25),
    NodeKind("P100", 2, 64_000, 262_144, 16_384, 0.25),
    NodeKind("A10", 1, 32_000, 131_072, 24_576, 0.15),
)

# Pod classes by GPU count: 0 is CPU-only, -1 a share of one GPU.
SHARED = -1
POD_CLASSES = (0, SHARED, 1, 2, 4, 8)
POD_CLASS_P = (0.13, 0.37, 0.45, 0.02, 0.015, 0.015)

# openb's shares cluster on a few values that its inference services ask for.
SHARE_MILLI = (100, 160, 230, 250, 320, 470, 500, 650, 810, 900)
SHARE_P = (0.03, 0.04, 0.05, 0.12, 0.08, 0.15, 0.22, 0.08, 0.20, 0.03)

CPU_ONLY_MILLI = (8_000, 12_500, 16_000, 32_000)
CPU_ONLY_P = (0.25, 0.35, 0.15, 0.25)
CPU_PER_GPU = (4_000, 8_000, 11_300, 12_000)
CPU_PER_GPU_P = (0.20, 0.25, 0.30, 0.25)

SPEC_FRACTION = 0.10
SPECS = (("A100",), ("V100",), ("A100", "V100"), ("T4",), ("T4", "A10"), ("P100", "T4"))

DEFAULT_NODES = 400
DEFAULT_PODS = 2_000


def _apportion(total: int, shares: list[float]) -> list[int]:
    """Counts proportional to shares that add up to total (largest remainder)."""
    raw = np.array(shares) * total / sum(shares)
    counts = np.floor(raw).astype(np.int64)
    for i in np.argsort(-(raw - counts), kind="stable")[: total - int(counts.sum())]:
        counts[i] += 1
    return [int(c) for c in counts]


def synthetic_nodes(count: int = DEFAULT_NODES, seed: int = 0) -> list[NodeInfo]:
    if count < 1:
        raise ValueError(f"node count is {count}, expected at least 1")
    rng = np.random.default_rng([seed, 0])
    kinds = [
        kind
        for kind, n in zip(
            NODE_KINDS, _apportion(count, [k.share for k in NODE_KINDS]), strict=True
        )
        for _ in range(n)
    ]
    return [
        NodeInfo(
            name=NodeName(f"syn-node-{i:04d}"),
            cpu_milli=kind.cpu_milli,
            memory_mib=kind.memory_mib,
            gpu_count=kind.gpus,
            gpu_model=kind.model,
            gpu_memory_mib=kind.gpu_memory_mib,
            max_pods=OPENB_MAX_PODS,
            labels={
                "nvidia.com/gpu.product": kind.model,
                "nvidia.com/gpu.count": str(kind.gpus),
                "nvidia.com/gpu.memory": str(kind.gpu_memory_mib),
            },
        )
        for i, kind in enumerate(kinds[j] for j in rng.permutation(len(kinds)))
    ]


def _half_cores(milli: float) -> int:
    return max(1_000, round(milli / 500) * 500)


def synthetic_pods(count: int = DEFAULT_PODS, seed: int = 0) -> list[TracePod]:
    if count < 1:
        raise ValueError(f"pod count is {count}, expected at least 1")
    # A stream apart from the nodes' so that changing the node count keeps the pods.
    rng = np.random.default_rng([seed, 1])
    classes = rng.choice(POD_CLASSES, size=count, p=POD_CLASS_P)
    shares = rng.choice(SHARE_MILLI, size=count, p=SHARE_P)
    cpu_only = rng.choice(CPU_ONLY_MILLI, size=count, p=CPU_ONLY_P)
    cpu_per_gpu = rng.choice(CPU_PER_GPU, size=count, p=CPU_PER_GPU_P)
    gib_per_core = rng.integers(1, 3, size=count)  # 1 or 2, times 2 GiB (GPU) or 4 (CPU-only)
    constrained = rng.random(count) < SPEC_FRACTION
    spec_pick = rng.integers(0, len(SPECS), size=count)
    widest = {k.model: k.gpus for k in NODE_KINDS}
    pods = []
    for i in range(count):
        cls = int(classes[i])
        num_gpu = 1 if cls == SHARED else cls
        milli = int(shares[i]) if cls == SHARED else (MILLI_PER_GPU if num_gpu else 0)
        if num_gpu == 0:
            cpu = int(cpu_only[i])
            memory = cpu // 1000 * 4096 * int(gib_per_core[i])
        else:
            cpu = _half_cores(int(cpu_per_gpu[i]) * num_gpu * milli / MILLI_PER_GPU)
            memory = round(cpu / 1000 * 2048 * int(gib_per_core[i]))
        spec: tuple[str, ...] = ()
        if num_gpu and constrained[i]:
            fitting = [s for s in SPECS if any(widest[m] >= num_gpu for m in s)]
            spec = fitting[int(spec_pick[i]) % len(fitting)]
        pods.append(TracePod(f"syn-pod-{i:05d}", cpu, memory, num_gpu, milli, spec))
    return pods

"""Read the openb trace (Alibaba cluster-trace-gpu-v2023) into model objects.

Node list columns: sn, cpu_milli, memory_mib, gpu, model. Pod list columns: name,
cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec (allowed models, ``|``-separated), and
times that the replay does not use. Some variants of the pod list omit gpu_spec.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from kgpu.model.gpu import NO_GPU, GpuRequest
from kgpu.model.node import NodeInfo, NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.units import MILLI_PER_GPU

# The paper's simulator lets a node hold this many pods; real kubelets say 110, but the
# figures must stay comparable with the paper.
OPENB_MAX_PODS = 1001


class TraceError(ValueError):
    """A trace row that cannot be read; the message names the file, row, column and value."""


@dataclass(frozen=True, slots=True)
class TracePod:
    """A pod row of the trace, before it becomes a PodSpec."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]

    @property
    def gpu_request_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    def to_pod(self, name: str | None = None) -> PodSpec:
        if self.num_gpu == 0:
            gpu = NO_GPU
        else:
            gpu = GpuRequest(self.num_gpu, self.gpu_milli, self.gpu_spec)
        return PodSpec(
            key=PodKey(f"openb/{name or self.name}"),
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
            gpu=gpu,
        )


def _int(path: Path, row: int, column: str, value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        raise TraceError(
            f"{path.name} row {row}: column {column!r} is {value!r}, expected an integer"
        ) from None


def read_nodes(path: Path) -> list[NodeInfo]:
    """GPU and CPU nodes of a node list, in file order."""
    nodes = []
    with path.open(newline="") as f:
        for row_no, row in enumerate(csv.DictReader(f), start=2):
            gpus = _int(path, row_no, "gpu", row.get("gpu"))
            nodes.append(
                NodeInfo(
                    name=NodeName(row["sn"]),
                    cpu_milli=_int(path, row_no, "cpu_milli", row.get("cpu_milli")),
                    memory_mib=_int(path, row_no, "memory_mib", row.get("memory_mib")),
                    gpu_count=gpus,
                    gpu_model=(row.get("model") or "") if gpus else "",
                    max_pods=OPENB_MAX_PODS,
                )
            )
    return nodes


def read_pods(path: Path) -> list[TracePod]:
    pods = []
    with path.open(newline="") as f:
        for row_no, row in enumerate(csv.DictReader(f), start=2):
            num_gpu = _int(path, row_no, "num_gpu", row.get("num_gpu"))
            milli = _int(path, row_no, "gpu_milli", row.get("gpu_milli"))
            if num_gpu < 0 or not 0 <= milli <= MILLI_PER_GPU:
                raise TraceError(
                    f"{path.name} row {row_no}: num_gpu={num_gpu} gpu_milli={milli}, expected "
                    f"num_gpu >= 0 and 0 <= gpu_milli <= {MILLI_PER_GPU}"
                )
            if num_gpu > 1 and milli != MILLI_PER_GPU:
                raise TraceError(
                    f"{path.name} row {row_no}: a {num_gpu}-GPU pod with gpu_milli={milli}, "
                    f"expected whole GPUs (gpu_milli={MILLI_PER_GPU})"
                )
            spec = tuple(s for s in (row.get("gpu_spec") or "").split("|") if s)
            pods.append(
                TracePod(
                    name=row["name"],
                    cpu_milli=_int(path, row_no, "cpu_milli", row.get("cpu_milli")),
                    memory_mib=_int(path, row_no, "memory_mib", row.get("memory_mib")),
                    num_gpu=num_gpu,
                    gpu_milli=milli if num_gpu else 0,
                    gpu_spec=spec,
                )
            )
    return pods

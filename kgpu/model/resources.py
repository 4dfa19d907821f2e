"""Resource vectors: what queues are given, hold and ask for, in the core's integer units.

A vector maps a resource name to an amount; a missing name is zero. The names are ``cpu``
(milli-CPU), ``memory`` (MiB), ``gpu`` (milli-GPU: a share of one GPU counts as that share)
and card names (``NVIDIA-A100-80GB``, ``NVIDIA-A100-80GB/mps-80g*1/8``: milli-cards, 1000 =
one card, one MPS replica or one MIG instance). Plain dicts, because a session adds and
compares a few of them per placement and a class around them would only cost time.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Final

from kgpu.model.pod import PodSpec
from kgpu.model.units import MILLI_PER_GPU

CPU: Final = "cpu"
MEMORY: Final = "memory"
GPU: Final = "gpu"
BASE: Final = (CPU, MEMORY, GPU)
MILLI: Final = 1000  # milli-cards per card, as milli-GPU per GPU

Vector = dict[str, int]


def pod_vector(pod: PodSpec) -> Vector:
    """What a pod holds of the base resources while it runs."""
    return {CPU: pod.cpu_milli, MEMORY: pod.memory_mib, GPU: pod.gpu.total_milli}


def add(into: Vector, other: Mapping[str, int], sign: int = 1) -> None:
    """``into += sign × other``, in place."""
    if isinstance(other, dict):
        # Most are vectors (dicts), and the compiled build walks a dict natively, a
        # mapping through its methods: several times the cost, asked for every account.
        # Named as a Vector: narrowed by isinstance alone its amounts are Any, added as
        # objects.
        vec: Vector = other
        for name, amount in vec.items():
            if amount:
                if sign != 1:  # negated, not multiplied: a negative factor is the slow path
                    amount = -amount if sign == -1 else sign * amount
                into[name] = into.get(name, 0) + amount
        return
    for name, amount in other.items():
        if amount:
            into[name] = into.get(name, 0) + sign * amount


def total(vectors: Iterable[Mapping[str, int]]) -> Vector:
    out: Vector = {}
    for vec in vectors:
        add(out, vec)
    return out


def is_zero(vec: Mapping[str, int]) -> bool:
    return not any(vec.values())


def gpu_memory_share(memory_mib: int, gpu_memory_mib: int) -> int:
    """The milli-GPU a request of ``memory_mib`` of one GPU's memory counts as.

    Fair shares and quotas count a memory-only GPU request (KAI's ``gpu-memory``) by the
    fraction of the GPU's memory it takes, rounded up so that it is never counted as less
    than it holds: 20 GiB of an 80 GiB GPU is 250 milli.
    """
    if memory_mib <= 0:
        return 0
    if gpu_memory_mib <= 0:
        return MILLI_PER_GPU
    return min(MILLI_PER_GPU, math.ceil(memory_mib * MILLI_PER_GPU / gpu_memory_mib))


# A MIG profile names its compute slices first: "1g.10gb", "3g.40gb", "1c.3g.20gb".
_MIG_SLICES: Final = re.compile(r"(?:^|\.)(?P<slices>\d+)g\.")
# A100, H100 and H200 have seven compute slices. (An A30 has four: its 1g.6gb would count
# 143 rather than 250; profiles do not say which GPU they are carved from.)
MIG_SLICES_PER_GPU: Final = 7


def mig_share(profile: str) -> int:
    """The milli-GPU one MIG instance of ``profile`` counts as: its compute slices of the
    GPU's seven, rounded up (a ``1g.10gb`` is 143, a ``7g.80gb`` 1000). A profile whose
    slices cannot be read counts as a whole GPU, so that it is never under-counted."""
    match = _MIG_SLICES.search(profile)
    if match is None:
        return MILLI_PER_GPU
    slices = min(int(match["slices"]), MIG_SLICES_PER_GPU)
    return math.ceil(slices * MILLI_PER_GPU / MIG_SLICES_PER_GPU)


def show(resource: str, amount: int) -> str:
    """An amount as a person reads it: cores, MiB, GPUs or cards (fractions as decimals)."""
    if resource == MEMORY:
        return f"{amount}Mi"
    whole, part = divmod(abs(amount), MILLI)
    text = str(whole) if part == 0 else f"{whole}.{part:03d}".rstrip("0")
    return "-" + text if amount < 0 else text


def show_vector(vec: Mapping[str, int]) -> str:
    """``cpu 4, memory 8192Mi, gpu 2`` (zero amounts left out, base resources first)."""
    names = [n for n in BASE if vec.get(n)] + sorted(n for n in vec if n not in BASE and vec[n])
    return ", ".join(f"{n} {show(n, vec[n])}" for n in names) or "nothing"

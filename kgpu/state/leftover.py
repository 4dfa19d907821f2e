"""How much of a GPU's free share the workload is expected to leave idle to the end.

FGD asks of a partly used GPU only which typical pods fit its free share now. Where most
pods take whole GPUs or none (62% of openb's default list), any free share is fragment
for most typical pods whatever its size, so FGD can score a 320-milli share put on a GPU
with 530 free (leaving 210, which hardly any share fits) and one put on a GPU with 680
free (leaving 360, which the next 320 fits) alike. What tells them apart is whether a
later pod is likely to fill the hole.

The leftover of a free share ``f`` on a node with ``c`` milli-CPU free is the idle milli
it is expected to keep: with the chance that some typical share fitting both ``f`` and
``c`` arrives before the cluster fills, the hole takes one, drawn by frequency, and is
worth the leftover of what remains; otherwise all of ``f`` stays idle. The chance grows
with how common the fitting shares are: ``1 − exp(−CHANCES × w)``, ``w`` being their
share of the workload's pods. An idle GPU's leftover is zero: whole GPUs are FGD's
to judge.

The table is built once per cluster, by free share in steps of 10 milli-GPU and by free
CPU in steps of 100 milli-CPU, up to the cluster's largest node or the most CPU that
filling one hole can take, whichever is less.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from kgpu.model.units import MILLI_PER_GPU
from kgpu.state.cluster import IntArray
from kgpu.state.fragmentation import FloatArray, TypicalPod

MILLI_STEP = 10
CPU_STEP = 100
# How many arrivals' worth of chances a hole gets to meet a pod that fits it; 3 to 30
# place the openb traces alike (docs/POLICY.md), so the figure is not tuned.
CHANCES = 10.0


def _share_shapes(typical: list[TypicalPod]) -> list[tuple[int, int, float]]:
    """(milli steps, CPU steps, weight) of the typical shares. Requests are rounded down
    as free shares and CPU are, so a pod that exactly fits a hole still fits it."""
    return [
        (t.gpu_milli // MILLI_STEP, t.cpu_milli // CPU_STEP, t.weight)
        for t in typical
        if t.gpu_count == 1 and MILLI_STEP <= t.gpu_milli < MILLI_PER_GPU
    ]


class LeftoverModel:
    """The expected leftover (milli-GPU) of every free share and free CPU of one cluster."""

    def __init__(self, typical: list[TypicalPod], cpu_max: int) -> None:
        rows = MILLI_PER_GPU // MILLI_STEP + 1
        shapes = _share_shapes(typical)
        # Filling a hole takes at most as many shares as the smallest fits, each with at
        # most the largest CPU: more free CPU than that changes nothing, so the table stops
        # there, and a node that claims millions of cores costs no more than a big one.
        most_used = 0
        if shapes:
            most_used = (rows - 1) // min(m for m, _, _ in shapes) * max(c for _, c, _ in shapes)
        cols = min(max(cpu_max, 0) // CPU_STEP, most_used) + 1
        cpu = np.arange(cols)
        table = np.zeros((rows, cols), dtype=np.float64)
        for f in range(1, rows - 1):
            fits = np.zeros(cols)
            after = np.zeros(cols)
            for milli, cores, weight in shapes:
                if milli > f:
                    continue
                ok = cpu >= cores
                fits += weight * ok
                after[ok] += weight * table[f - milli, cpu[ok] - cores]
            chance = 1.0 - np.exp(-CHANCES * fits)
            filled = np.divide(after, fits, out=np.zeros(cols), where=fits > 0)
            table[f] = (1.0 - chance) * f * MILLI_STEP + chance * filled
        self.table = table  # the last row, idle GPUs, stays 0
        self._last_col = cols - 1
        self._cols = cols
        # The same memory seen flat, whose items are Python floats: ``leftover_of`` reads
        # one entry without making a numpy scalar. (A memoryview is typed as of ints.)
        self._flat = cast("Sequence[float]", table.reshape(-1).data)

    def leftover(self, free: IntArray, cpu_free: IntArray) -> FloatArray:
        """Expected leftover of GPUs with ``free`` milli on nodes with ``cpu_free``
        milli-CPU, element by element (the two broadcast against each other); free shares
        and CPU below zero count as none.

        No GPU has more than 1000 milli free, so a free share needs clipping only below
        (a share that does not fit goes there)."""
        f = np.maximum(free, 0) // MILLI_STEP
        c = np.minimum(np.maximum(cpu_free, 0) // CPU_STEP, self._last_col)
        return np.asarray(self.table.take(f * self._cols + c), dtype=np.float64)

    def leftover_of(self, free: int, cpu_free: int) -> float:
        """``leftover`` of one GPU with ``free`` milli on a node with ``cpu_free`` milli-CPU:
        the same entry, read without numpy's cost per call (a few shares a decision)."""
        f = max(free, 0) // MILLI_STEP
        c = min(max(cpu_free, 0) // CPU_STEP, self._last_col)
        return self._flat[f * self._cols + c]

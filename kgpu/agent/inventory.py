"""A node's GPUs as one round of discovery finds them: facts, health and the link matrix.

A GPU that stops answering, or that the library no longer lists, stays in the inventory
with its last known facts and a problem that says why, so the scheduler stops placing on it
instead of forgetting it. The link matrix is ``nvidia-smi topo -m``'s: ``NV<k>`` for ``k``
NVLinks between two GPUs (through an NVSwitch: the links they have to the switches), else
the PCIe path.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kgpu.agent.probe import ANCESTOR_KINDS, GpuFacts, GpuProbe, GpuUnreadable, NvLink
from kgpu.agent.sysfs import RdmaFacts

GONE = "no longer listed by NVML: fallen off the bus, or taken from the node"


@dataclass(frozen=True, slots=True)
class Inventory:
    """GPUs in minor order; ``links[a][b]`` the link kind between ``gpus[a]`` and
    ``gpus[b]`` ("X" on the diagonal)."""

    driver: str
    gpus: tuple[GpuFacts, ...]
    links: tuple[tuple[str, ...], ...]
    rdma: tuple[RdmaFacts, ...] | None = None  # None: not looked for, or no RDMA stack

    def peers(self, slot: int) -> list[int]:
        """Minors of the GPUs this one reaches over NVLink."""
        return [
            self.gpus[b].minor for b, kind in enumerate(self.links[slot]) if kind.startswith("NV")
        ]

    @property
    def unhealthy(self) -> list[GpuFacts]:
        return [g for g in self.gpus if g.problem]


def discover(probe: GpuProbe, previous: Inventory | None = None) -> Inventory:
    """One round: every GPU the probe lists, and those of ``previous`` it no longer can read."""
    known = {g.index: g for g in previous.gpus} if previous else {}
    read: list[GpuFacts] = []
    failed: list[GpuFacts] = []
    for index in range(probe.count()):
        try:
            read.append(probe.gpu(index))
        except GpuUnreadable as exc:
            last = known.get(index)
            if last is not None:
                failed.append(dataclasses.replace(last, problem=str(exc)))
    seen = {g.uuid for g in read + failed}
    gone = [
        g if g.problem == GONE else dataclasses.replace(g, problem=GONE)
        for g in (previous.gpus if previous else ())
        if g.uuid not in seen
    ]
    gpus = sorted(read + failed + gone, key=lambda g: g.minor)
    readable = {g.uuid for g in read}
    nvlinks = {g.index: probe.nvlinks(g.index) for g in read}
    links: list[tuple[str, ...]] = []
    for a, ga in enumerate(gpus):
        row: list[str] = []
        for b, gb in enumerate(gpus):
            if a == b:
                row.append("X")
            elif b < a:
                row.append(links[b][a])
            elif ga.uuid in readable and gb.uuid in readable:
                row.append(_kind(probe, ga, gb, nvlinks))
            else:
                row.append("SYS")  # never used: a GPU that cannot be read is not offered
        links.append(tuple(row))
    return Inventory(probe.driver_version(), tuple(gpus), tuple(links))


def _kind(probe: GpuProbe, a: GpuFacts, b: GpuFacts, nvlinks: dict[int, list[NvLink]]) -> str:
    if probe.nvlink_p2p(a.index, b.index):
        mine, theirs = nvlinks[a.index], nvlinks[b.index]
        direct = sum(1 for link in mine if link.remote_bus_id == b.bus_id)
        switched = min(
            sum(1 for link in mine if link.remote_is_switch),
            sum(1 for link in theirs if link.remote_is_switch),
        )
        # NVML can say two GPUs talk over NVLink where the link query is not supported
        # (some virtualised GPUs): that is still one link at least.
        return f"NV{max(1, min(99, direct + switched))}"
    return ANCESTOR_KINDS.get(probe.ancestor(a.index, b.index), "SYS")

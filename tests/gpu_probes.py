"""GPU probes for the agent's tests: what NVML would answer on machines we describe.

:class:`TableProbe` answers the :class:`~kgpu.agent.probe.GpuProbe` calls from a table, the
way the tests answer the Kubernetes API from :mod:`tests.kube_double`: the agent's code
under test is the code that runs on a node, only the library below it is replaced.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

from kgpu.agent.probe import GpuFacts, GpuUnreadable, NvLink, Xid

H100 = "NVIDIA H100 80GB HBM3"


def gpu(index: int, *, minor: int | None = None, numa: int = 0, **kw: object) -> GpuFacts:
    bus = f"0000:{0x18 + 0x10 * index:02x}:00.0"
    fields: dict[str, object] = {
        "index": index,
        "minor": index if minor is None else minor,
        "uuid": f"GPU-{index:08x}-0000-0000-0000-000000000000",
        "product": H100,
        "memory_mib": 81559,
        "bus_id": bus,
        "numa": numa,
    }
    fields.update(kw)
    return GpuFacts(**fields)  # type: ignore[arg-type]


class TableProbe:
    """``ancestors[(a, b)]`` NVML topology levels (default SYSTEM); ``links[i]`` each GPU's
    active NVLinks; ``p2p`` the pairs NVML says talk over NVLink."""

    def __init__(
        self,
        gpus: Iterable[GpuFacts],
        *,
        links: dict[int, list[NvLink]] | None = None,
        p2p: Iterable[tuple[int, int]] = (),
        ancestors: dict[tuple[int, int], int] | None = None,
        driver: str = "580.159.04",
    ) -> None:
        self.gpus = list(gpus)
        self.links = links or {}
        self.p2p = {frozenset(p) for p in p2p}
        self.ancestors = {frozenset(k): v for k, v in (ancestors or {}).items()}
        self.driver = driver
        self.lost: dict[int, str] = {}  # index -> NVML's error
        self.closed = False
        self.watchable = False  # whether xids() reports events (as NVML does on most GPUs)
        self.events: list[Xid] = []
        self.fail_links: set[int] = set()

    def driver_version(self) -> str:
        return self.driver

    def count(self) -> int:
        return len(self.gpus)

    def gpu(self, index: int) -> GpuFacts:
        if index in self.lost:
            raise GpuUnreadable(f"NVML cannot read GPU {index}: {self.lost[index]}")
        return self.gpus[index]

    def nvlinks(self, index: int) -> list[NvLink]:
        if index in self.fail_links:  # a GPU lost between two questions of one round
            raise GpuUnreadable(f"NVML cannot open GPU {index}: GPU is lost")
        return self.links.get(index, [])

    def nvlink_p2p(self, a: int, b: int) -> bool:
        return frozenset((a, b)) in self.p2p

    def ancestor(self, a: int, b: int) -> int:
        return self.ancestors.get(frozenset((a, b)), 50)

    def xids(self, timeout: float) -> list[Xid] | None:
        if not self.watchable:
            return None
        if not self.events:
            time.sleep(min(timeout, 0.01))  # as NVML waits, but short: the tests add events
        found, self.events = self.events, []
        return found

    def close(self) -> None:
        self.closed = True

    def set_problem(self, index: int, problem: str) -> None:
        self.gpus[index] = dataclasses.replace(self.gpus[index], problem=problem)


def hgx_h100(count: int = 8) -> TableProbe:
    """An HGX H100 board: every GPU has 18 NVLinks, all to the NVSwitches."""
    gpus = [gpu(i, numa=i // 4) for i in range(count)]
    switch = [NvLink(f"0000:{0xA0 + k:02x}:00.0", True) for k in range(18)]
    return TableProbe(
        gpus,
        links={i: list(switch) for i in range(count)},
        p2p=[(a, b) for a in range(count) for b in range(a + 1, count)],
    )


def two_islands() -> TableProbe:
    """Eight GPUs as two islands of four, each pair inside an island joined by two NVLinks
    (a DGX-1-like bridge board), and PCIe between islands: a switch within each half of
    an island, the host bridge across halves, the other NUMA node across islands."""
    gpus = [gpu(i, numa=i // 4) for i in range(8)]
    links: dict[int, list[NvLink]] = {i: [] for i in range(8)}
    p2p = []
    for a in range(8):
        for b in range(8):
            if a != b and a // 4 == b // 4:
                links[a] += [NvLink(gpus[b].bus_id, False)] * 2
                if a < b:
                    p2p.append((a, b))
    ancestors = {}
    for a in range(8):
        for b in range(a + 1, 8):
            same_switch = a // 2 == b // 2
            ancestors[(a, b)] = 10 if same_switch else 30 if a // 4 == b // 4 else 50
    return TableProbe(gpus, links=links, p2p=p2p, ancestors=ancestors)

"""Reservation pods in a snapshot: which GPU each holds, and where kgpu's books must follow.

A reservation (:mod:`kgpu.kube.objects.reservation_pod`) is made for a GPU minor of kgpu's
books; the kubelet gives it whichever GPU the device plugin picks, and the node agent
reports that GPU (the Device's checkpoint entry, by namespace and name). When the two
differ, the shares kgpu recorded on the minor the reservation was made for are on the GPU
it holds in fact: the snapshot accounts them there (a ``move``), if the books have room,
and the live loop rewrites their annotations and then the reservation's own
(:mod:`kgpu.kube.live.gpu_reservations`). A GPU that some reservation holds is that
reservation's, whichever GPU it was made for: shares recorded there stay, so two
reservations that got each other's GPU move nothing. Nothing moves on a node while one of
its reservations is not reported yet: it may be about to hold the GPU a move would take.

A reservation whose GPU holds no share (it outlived them, or its shares have not moved to
it yet) is accounted as holding that GPU whole, as the kubelet does: no whole-GPU pod is
placed where the kubelet would refuse it. One not reported yet holds nothing known.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kgpu.kube.objects.reservation_pod import reserved_minor
from kgpu.kube.snapshot.allocation_rebuild import account_unrecorded
from kgpu.kube.snapshot.conversion_cache import PodReading
from kgpu.kube.snapshot.kubelet_claims import KubeletClaims
from kgpu.model.pod import PodSpec
from kgpu.state.cluster import ClusterState


@dataclass(slots=True)
class Reservation:
    """One reservation pod, as a session sees it."""

    obj: Mapping[str, Any]
    name: str
    node: str
    index: int  # the node's index in the snapshot's state; -1 when the node is not Ready
    gone: bool  # its node no longer exists (not merely not Ready)
    spec: PodSpec | None  # None when it cannot be read
    minor: int | None  # the GPU it was made for (its annotation); None when unreadable
    slot: int | None  # the GPU slot the kubelet gave it, once the agent reports it
    held: int | None  # that GPU's minor
    phase: str
    deleting: bool
    created: str  # creationTimestamp, to keep the oldest of two for one GPU
    moved: int = 0  # pods this snapshot accounts on ``held`` instead of ``minor``

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def live(self) -> bool:
        return self.index >= 0 and not self.deleting and not self.finished

    @property
    def covers(self) -> int | None:
        """The GPU it stands for: the one it holds, else the one it was made for."""
        return self.held if self.held is not None else self.minor


@dataclass(slots=True)
class ReservationBook:
    reservations: list[Reservation] = field(default_factory=list)
    # (node index, minor recorded) -> the reservation that holds another GPU for the shares
    # recorded there.
    moves: dict[tuple[int, int], Reservation] = field(default_factory=dict)
    # Node name -> the GPU minors pods of ours hold through reservations (bound or assumed).
    backed: dict[str, set[int]] = field(default_factory=dict)

    def read(
        self,
        state: ClusterState,
        readings: list[tuple[PodReading, int]],
        claims: KubeletClaims,
        nodes: set[str],
    ) -> None:
        """Take the reservation pods ``readings`` (each with its node index, -1 when the node
        is not in the state; ``nodes`` names every node there is) and the GPU each holds."""
        for pod, index in readings:
            slot = held = None
            if index >= 0:
                slots = claims.slots(index, pod)
                if slots is not None and len(slots) == 1:
                    slot = slots[0]
                    held = state.devices[index].gpus[slot].minor
            spec = pod.spec if isinstance(pod.spec, PodSpec) else None
            self.reservations.append(
                Reservation(
                    pod.obj,
                    pod.key.partition("/")[2],
                    pod.node,
                    index,
                    pod.node not in nodes,
                    spec,
                    reserved_minor(pod.obj),
                    slot,
                    held,
                    pod.phase,
                    pod.deleting,
                    pod.order[0],
                )
            )
        live = [r for r in self.reservations if r.live]
        holding = {(r.index, r.held) for r in live if r.held is not None}
        waiting = {r.index for r in live if r.held is None}
        for r in live:
            if r.held is None or r.minor is None or r.held == r.minor or r.index in waiting:
                continue
            # Shares recorded on a GPU some reservation holds are that one's, wherever each
            # reservation was made for: two that got each other's GPU move nothing.
            if (r.index, r.minor) not in holding:
                self.moves.setdefault((r.index, r.minor), r)

    def moved(
        self, index: int, minors: tuple[int, ...]
    ) -> tuple[tuple[int, ...], list[Reservation]]:
        """Where shares recorded on ``minors`` of node ``index`` are in fact, and the
        reservations that say so (none when nothing moved)."""
        out = []
        by = []
        for m in minors:
            r = self.moves.get((index, m))
            out.append(m if r is None or r.held is None else r.held)
            if r is not None:
                by.append(r)
        return tuple(out), by

    def back(self, node: str, minors: tuple[int, ...]) -> None:
        self.backed.setdefault(node, set()).update(minors)

    def hold_idle(self, state: ClusterState) -> None:
        """Account each reservation whose GPU holds no share of ours as holding it whole."""
        for r in self.reservations:
            if not r.live or r.slot is None or r.spec is None:
                continue
            if r.held in self.backed.get(r.node, ()):
                continue
            # None: something else holds it in the books; the kubelet's checkpoint of that
            # pod corrects it, and the reservation is deleted once idle anyway.
            account_unrecorded(state, r.spec, r.index, (r.slot,))

"""DraClaims: the filter of nodes where the pod's ResourceClaims cannot be allocated.

A pod with ``spec.resourceClaims`` fits a node only if every claim it names is already
allocated there (or to no node in particular) or can be allocated now from the devices the
node reaches (:mod:`kgpu.dra.allocator`). Pods without claims pass untouched, so a cluster
without DRA decides as before.

Its verdicts depend on devices taken anywhere in the cluster (slices reachable from all
nodes, claims shared between pods), not only on the node's own state, and a pod's claims
are its own: it judges the pods with claims alone (``PodFilterPlugin.judges_alone``), so the
scheduler asks it afresh in every cycle of such a pod, over the nodes the verdicts kept per
shape let through, while pods without claims keep being served from the shape cache.

What the claims would get on each node it let through is written into the cycle (under its
name: node index to :class:`~kgpu.dra.allocator.Allocated`), for a later filter of the same
cycle that counts it (the queue's check of a pod's claims, ``kgpu.actions.claim_quota``).

Each refusal carries the allocator's own sentence (which claim, request, selector,
capacity or constraint), one :class:`Reason` per distinct sentence, so a pending pod's
message and ``kgpu explain`` name what failed.
"""

from __future__ import annotations

from typing import Final

from kgpu.dra.allocator import Allocated, Refused
from kgpu.dra.inventory import DraInventory
from kgpu.framework.cycle import CycleState
from kgpu.framework.interfaces import IntArray, PodFilterPlugin, Verdicts
from kgpu.framework.status import Reason
from kgpu.model.pod import PodSpec
from kgpu.plugins import names

CODE: Final = "DRAClaimsUnallocatable"
# Distinct sentences kept as Reasons (verdicts group nodes by Reason identity); a cluster
# shows a handful, and the table is emptied past this many.
MAX_REASONS: Final = 1024


class DraClaims:
    """Rejects nodes where the pod's resource claims cannot all be allocated."""

    name = names.DRA_CLAIMS
    static_verdicts = False

    def __init__(self, inventory: DraInventory | None = None) -> None:
        self.inventory = inventory
        self._reasons: dict[str, Reason] = {}

    def _reason(self, text: str) -> Reason:
        reason = self._reasons.get(text)
        if reason is None:
            if len(self._reasons) >= MAX_REASONS:
                self._reasons.clear()
            reason = self._reasons[text] = Reason(
                CODE, f"node(s) cannot allocate the claims: {text}"
            )
        return reason

    def judges_alone(self, pod: PodSpec) -> bool:
        return self.inventory is not None and self.inventory.asks(str(pod.key))

    def filter(self, cycle: CycleState, pod: PodSpec, nodes: IntArray) -> Verdicts:
        inventory = self.inventory
        if inventory is None or not inventory.asks(str(pod.key)):
            return Verdicts.all_pass(len(nodes))
        why: list[Reason | None] = []
        got: dict[int, Allocated] = cycle.get(self.name) or {}
        for i in nodes:
            node = cycle.state.nodes[int(i)]
            outcome = inventory.try_allocate(str(pod.key), str(node.name), node.labels)
            if isinstance(outcome, Refused):
                why.append(self._reason(outcome.reason))
            else:
                why.append(None)
                got[int(i)] = outcome
        cycle.write(self.name, got)
        return Verdicts.from_reasons(why)


_: type[PodFilterPlugin] = DraClaims

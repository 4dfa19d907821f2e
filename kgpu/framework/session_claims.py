"""A session's DRA claims: recorded as its pods are placed, put back as it undoes them.

The session places a pod with claims by allocating them in the inventory at once
(:meth:`SessionClaims.place`), so the next pod of the session, the DraClaims filter asking,
sees those devices taken; it evicts one by giving its claims back (:meth:`release`), so the
devices are free for the pod it evicts for. Each undoes with :meth:`undo`, which puts the
pod's claims back exactly as they were before (allocation, consumers, devices taken): a
discarded gang, an eviction tried and given up, and at close the nominations and evictions
that the edge, not the snapshot, carries out.

A pod's GPU claims count in its queue's account (:mod:`kgpu.dra.gpu_count`): ``milli``, and
with the cards of their devices, ``count``; ``count_on`` is what they would count allocated
on a node (the queue's check of a node, ``kgpu.actions.claim_quota``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from kgpu.dra.allocator import Refused
from kgpu.dra.gpu_count import DraGpus
from kgpu.dra.inventory import DraInventory
from kgpu.model.dra import ClaimAllocation, ResourceClaim
from kgpu.model.node import NodeInfo
from kgpu.model.resources import Vector


class SessionClaims:
    def __init__(self, inventory: DraInventory) -> None:
        self.inventory = inventory
        self.gpus = DraGpus(inventory)
        self._saved: dict[str, dict[str, ResourceClaim | None]] = {}  # pod: claims before

    def has(self, key: str) -> bool:
        return key in self.inventory.pod_claims

    def milli(self, key: str) -> int:
        """The milli-GPU the pod's claims count now (allocated ones by their devices)."""
        return self.gpus.pod_milli(key)

    def count(self, key: str) -> tuple[int, Vector]:
        """The milli-GPU and milli-cards the pod's claims count now."""
        return self.gpus.pod_count(key)

    def count_on(self, key: str, allocations: Mapping[str, ClaimAllocation]) -> tuple[int, Vector]:
        """What the pod's claims would count, allocated as ``allocations`` says."""
        return self.gpus.count_on(key, allocations)

    def place(self, key: str, node: NodeInfo) -> None:
        """Allocate the claims of the pod placed on ``node``, as its Binding will need them.
        The filters let the node through with nothing placed since, so the allocator
        agrees; were it not to, the claims stay unallocated and count by their requests."""
        inventory = self.inventory
        saved = self._saved[key] = inventory.saved(key)
        if isinstance(inventory.record(key, str(node.name), node.labels), Refused):
            inventory.restore(saved)

    def release(self, key: str) -> None:
        """The pod is evicted: its claims no other pod holds give their devices back."""
        self._saved[key] = self.inventory.saved(key)
        self.inventory.release(key)

    def undo(self, key: str) -> None:
        """The pod's claims as they were before its last ``place`` or ``release``."""
        saved = self._saved.get(key)
        if saved is not None:
            self.inventory.restore(saved)

    def of(self, key: str) -> dict[str, ClaimAllocation]:
        """The pod's allocated claims, by claim key."""
        out = {}
        for claim_key in self.inventory.claim_keys(key):
            claim = self.inventory.claims.get(claim_key)
            if claim is not None and claim.allocation is not None:
                out[claim_key] = claim.allocation
        return out

    def capacity(self, nodes: Collection[str]) -> int:
        return self.gpus.capacity(nodes)

"""How many GPUs a pod's ResourceClaims count, for queues, fair shares and the autoscaler.

Queues count DRA GPUs as they count other GPUs, in milli-GPU (1000 = one GPU). What counts
follows KAI Scheduler, which counts DRA GPU claims in its queue quotas:

- a request is a GPU request when its DeviceClass's name says so: a name with ``mig`` in it
  (NVIDIA's ``mig.nvidia.com``) asks for MIG devices, else one with ``gpu`` in it
  (``gpu.nvidia.com``; KAI's rule) for whole GPUs; other classes count nothing;
- before allocation, an ``ExactCount`` request counts ``count`` devices and an ``All``
  request one device (how many devices match is not known before a node is chosen, as KAI
  counts it); a ``firstAvailable`` request counts its largest alternative, so a pod is never
  counted as less than the alternative it will get; a whole GPU counts 1000, a MIG device
  the share of its profile when a selector pins one (``profile == '3g.20gb'``: 429, see
  :func:`~kgpu.model.resources.mig_share`), else 1000;
- once allocated (``status.allocation``, or recorded by the session), the devices the claim
  got count: 1000 each, a MIG device (attribute ``type`` ``mig``) its ``profile``'s share;
- a claim shared by several pods counts for each of them, as KAI counts it.

A session charges a placed pod what its allocation counts and takes the same back when the
pod leaves (the vector is kept with the operation), so the two cannot differ. Where the
count before a node is chosen is not what a node would give (``All``: one device before,
every matching one on the node), the session checks each node for what the claims would
get there (:meth:`DraGpus.count_on`, ``kgpu.actions.claim_quota``).

The cluster's GPU capacity (what fair shares divide) counts the devices of the published
pools that match a GPU or MIG class's selectors, each as its allocation would count it.

Queues' card quotas (capacity-card: ``kgpu.model.card``) count the same claims by card, as
they count a whole GPU request, 1000 milli-cards a device: an allocated GPU device is the
card of its ``productName`` as GPU Feature Discovery labels it (``NVIDIA-H100-80GB-HBM3``),
a MIG device ``<product>/mig-<profile>-mixed``; before allocation, a GPU request whose
selectors (the request's or its class's) pin one product counts as that product's card
(``count`` devices, one for ``All``), and one that pins several or none counts no card
until a node is chosen (:meth:`DraGpus.count_on`: what it would get there).

For the autoscaler, :func:`demand_request` turns a pod's unallocated GPU claims into the
:class:`~kgpu.model.gpu.GpuRequest` a trigger pod asks for: whole GPUs (MIG devices as
shares of one), of the products the requests' selectors pin (``productName == 'X'`` or
``productName in ['X', 'Y']``, the product written as GPU Feature Discovery labels it,
spaces as dashes).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final

from kgpu.dra.cel_selectors import SelectorError, compile_selector, device_variables, evaluate
from kgpu.dra.inventory import DraInventory
from kgpu.model.card import mig_card_name
from kgpu.model.dra import (
    AllocationMode,
    ClaimAllocation,
    ClaimSpec,
    Device,
    DeviceId,
    ExactRequest,
    ResourceClaim,
    device_id,
)
from kgpu.model.gpu import GpuRequest, gpu_share, whole_gpus
from kgpu.model.resources import Vector, mig_share
from kgpu.model.units import MILLI_PER_GPU

GPU_CLASS: Final = "gpu"
MIG_CLASS: Final = "mig"
# A selector that pins a MIG profile or a product: the forms NVIDIA's examples write.
_ATTR: Final = r"""(?:\.{name}|\[\s*['"]{name}['"]\s*\])"""
_PROFILE: Final = re.compile(_ATTR.format(name="profile") + r"""\s*==\s*['"]([^'"]{1,64})['"]""")
_PRODUCT_IS: Final = re.compile(
    _ATTR.format(name="productName") + r"""\s*==\s*['"]([^'"]{1,64})['"]"""
)
_PRODUCT_IN: Final = re.compile(
    _ATTR.format(name="productName") + r"""\s+in\s*\[([^\]]{1,1024})\]"""
)
_QUOTED: Final = re.compile(r"""['"]([^'"]{1,64})['"]""")


def class_kind(name: str) -> str:
    """``mig``, ``gpu`` or "" (not a GPU class), from the DeviceClass's name."""
    lower = name.lower()
    if MIG_CLASS in lower:
        return MIG_CLASS
    return GPU_CLASS if GPU_CLASS in lower else ""


def pinned_profile(selectors: Iterable[str]) -> str:
    for expr in selectors:
        found = _PROFILE.search(expr)
        if found:
            return found[1]
    return ""


def pinned_products(selectors: Iterable[str]) -> tuple[str, ...]:
    """The products the selectors allow (empty: any), as GFD labels write them."""
    for expr in selectors:
        found = _PRODUCT_IS.search(expr)
        if found:
            return (gfd_product(found[1]),)
        found = _PRODUCT_IN.search(expr)
        if found:
            return tuple(gfd_product(m) for m in _QUOTED.findall(found[1]))
    return ()


def gfd_product(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` as ``nvidia.com/gpu.product`` writes it."""
    return "-".join(name.split())


def device_milli(driver: str, device: Device) -> int:
    """What an allocated GPU device counts: a MIG device its profile's share, else one GPU."""
    kind = device.attributes.get(f"{driver}/type")
    profile = device.attributes.get(f"{driver}/profile")
    if kind == MIG_CLASS and isinstance(profile, str):
        return mig_share(profile)
    return MILLI_PER_GPU


def device_card(driver: str, device: Device) -> str:
    """The card an allocated GPU device counts as ("" when it names no product)."""
    product = device.attributes.get(f"{driver}/productName")
    if not isinstance(product, str) or not product.strip():
        return ""
    card = gfd_product(product)
    profile = device.attributes.get(f"{driver}/profile")
    if device.attributes.get(f"{driver}/type") == MIG_CLASS and isinstance(profile, str):
        return mig_card_name(card, profile)
    return card


def request_milli(exactly: ExactRequest) -> int:
    """What one request counts before allocation (0: not a GPU request)."""
    kind = class_kind(exactly.device_class)
    if not kind:
        return 0
    count = exactly.count if exactly.mode == AllocationMode.EXACT_COUNT else 1
    each = MILLI_PER_GPU
    if kind == MIG_CLASS:
        profile = pinned_profile(exactly.selectors)
        each = mig_share(profile) if profile else MILLI_PER_GPU
    return count * each


def spec_milli(spec: ClaimSpec) -> int:
    total = 0
    for req in spec.requests:
        if req.exactly is not None:
            total += request_milli(req.exactly)
        else:
            total += max((request_milli(s.exactly) for s in req.first_available), default=0)
    return total


def _counted(options: Sequence[ExactRequest]) -> ExactRequest:
    """The alternative a request counts as before allocation: its largest."""
    return max(options, key=request_milli)


def _options(spec: ClaimSpec) -> list[list[ExactRequest]]:
    return [
        [req.exactly] if req.exactly is not None else [s.exactly for s in req.first_available]
        for req in spec.requests
    ]


def _exact_of(spec: ClaimSpec, result_name: str) -> ExactRequest | None:
    name, _, sub = result_name.partition("/")
    for req in spec.requests:
        if req.name != name:
            continue
        if req.exactly is not None:
            return req.exactly
        return next((s.exactly for s in req.first_available if s.name == sub), None)
    return None


class DraGpus:
    """The milli-GPU of pods' claims and of the published devices, over one inventory."""

    def __init__(self, inventory: DraInventory) -> None:
        self.inventory = inventory
        self._devices: dict[DeviceId, tuple[str, Device]] | None = None
        self._pools = inventory.pools  # what ``_devices`` was made of (slices may be added)

    def _device(self, ident: DeviceId) -> tuple[str, Device] | None:
        if self._devices is None or self._pools is not self.inventory.pools:
            self._pools = self.inventory.pools
            self._devices = {
                device_id(s.driver, s.pool, d.name): (s.driver, d)
                for pool in self.inventory.pools
                for s in pool.slices
                for d in s.devices
            }
        return self._devices.get(ident)

    def claim_milli(self, claim: ResourceClaim) -> int:
        return self.claim_count(claim)[0]

    def claim_count(
        self, claim: ResourceClaim, allocation: ClaimAllocation | None = None
    ) -> tuple[int, Vector]:
        """The milli-GPU and the milli-cards the claim counts, allocated as ``allocation``
        says (default: its own, if any)."""
        allocation = allocation if allocation is not None else claim.allocation
        if allocation is None:
            return spec_milli(claim.spec), self._pending_cards(claim.spec)
        total = 0
        cards: Vector = {}
        for result in allocation.results:
            exactly = _exact_of(claim.spec, result.request)
            if exactly is None or not class_kind(exactly.device_class):
                continue
            found = self._device(result.id)
            total += device_milli(*found) if found is not None else MILLI_PER_GPU
            card = device_card(*found) if found is not None else ""
            if card:
                cards[card] = cards.get(card, 0) + MILLI_PER_GPU
        return total, cards

    def _pending_cards(self, spec: ClaimSpec) -> Vector:
        """The cards of an unallocated claim's requests whose selectors pin one product."""
        cards: Vector = {}
        for options in _options(spec):
            best = _counted(options)
            kind = class_kind(best.device_class)
            if not kind:
                continue
            cls = self.inventory.classes.get(best.device_class)
            selectors = (*best.selectors, *(cls.selectors if cls is not None else ()))
            products = pinned_products(selectors)
            if len(products) != 1:
                continue
            card = products[0]
            if kind == MIG_CLASS:
                profile = pinned_profile(selectors)
                if not profile:
                    continue
                card = mig_card_name(card, profile)
            count = best.count if best.mode == AllocationMode.EXACT_COUNT else 1
            cards[card] = cards.get(card, 0) + count * MILLI_PER_GPU
        return cards

    def pod_count(self, pod_key: str) -> tuple[int, Vector]:
        """What the pod's claims count now, in milli-GPU and by card (``pod_milli``)."""
        return self.count_on(pod_key, {})

    def count_on(
        self, pod_key: str, allocations: Mapping[str, ClaimAllocation]
    ) -> tuple[int, Vector]:
        """What the pod's claims would count allocated as ``allocations`` (claim key to
        allocation: what :meth:`DraInventory.try_allocate` gives on a node) says, the
        claims it does not name as they are now."""
        if pod_key not in self.inventory.pod_claims:
            return 0, {}
        claims = self.inventory.resolve(pod_key)
        if isinstance(claims, str):
            return 0, {}
        milli = 0
        cards: Vector = {}
        for claim in claims:
            got, by_card = self.claim_count(claim, allocations.get(claim.key))
            milli += got
            for card, units in by_card.items():
                cards[card] = cards.get(card, 0) + units
        return milli, cards

    def pod_milli(self, pod_key: str) -> int:
        """What the pod's claims count now: allocated ones by their devices, the others by
        their requests (0 for a pod without claims, or whose claims cannot be found)."""
        if pod_key not in self.inventory.pod_claims:
            return 0
        claims = self.inventory.resolve(pod_key)
        if isinstance(claims, str):
            return 0
        return sum(self.claim_milli(c) for c in claims)

    def capacity(self, nodes: Collection[str]) -> int:
        """The milli-GPU of the devices that match a GPU or MIG class, in slices of
        ``nodes`` (the schedulable ones) or reachable from more than one node."""
        programs = []
        for cls in self.inventory.classes.values():
            if not class_kind(cls.name):
                continue
            try:
                programs.append([compile_selector(e) for e in cls.selectors])
            except SelectorError:
                continue
        total = 0
        for pool in self.inventory.pools:
            for s in pool.slices:
                if s.node_name and s.node_name not in nodes:
                    continue
                for d in s.devices:
                    variables = device_variables(s.driver, d)
                    if any(
                        all(evaluate(p, variables).matched for p in selectors)
                        for selectors in programs
                    ):
                        total += device_milli(s.driver, d)
        return total

    def demand_request(self, pod_key: str) -> GpuRequest | None:
        """The GPUs a trigger pod should ask for the pod's unallocated GPU claims (None: it
        has none): whole GPUs, MIG devices as shares of one GPU."""
        claims = self.inventory.resolve(pod_key) if pod_key in self.inventory.pod_claims else []
        if isinstance(claims, str):
            return None
        whole = shares = 0
        models: tuple[str, ...] = ()
        for claim in claims:
            if claim.allocation is not None:
                continue
            for req in claim.spec.requests:
                options = (
                    [req.exactly]
                    if req.exactly is not None
                    else [s.exactly for s in req.first_available]
                )
                best = max(options, key=request_milli)
                milli = request_milli(best)
                if not milli:
                    continue
                if class_kind(best.device_class) == GPU_CLASS:
                    whole += milli // MILLI_PER_GPU
                    models = models or pinned_products(best.selectors)
                else:
                    shares += milli
        if not whole and not shares:
            return None
        if not whole and shares < MILLI_PER_GPU:
            return gpu_share(shares, models)
        return whole_gpus(whole + math.ceil(shares / MILLI_PER_GPU), models)

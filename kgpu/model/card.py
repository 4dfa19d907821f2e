"""Cards: named kinds of accelerator that queues get quotas of (Volcano's capacity-card).

A card name is read off a node's GPU Feature Discovery labels, by Volcano's rules:

- a whole GPU is its product, ``nvidia.com/gpu.product``: ``NVIDIA-A100-80GB``;
- an MPS replica (``nvidia.com/gpu.replicas`` > 1) is ``<product>/mps-<memory GiB>g*1/<replicas>``:
  ``NVIDIA-A100-80GB/mps-80g*1/8``, ``gpu.count × replicas`` of them per node;
- a MIG instance of profile ``p`` (label ``nvidia.com/mig-<p>.count``) is
  ``<product>/mig-<p>-mixed``: ``NVIDIA-A100-80GB/mig-1g.5gb-mixed``.

Queues and jobs name cards in annotations, parsed here from their text (pure functions over
strings; reading the annotation off a Kubernetes object stays at the edge):

- ``volcano.sh/card.quota`` on a queue: a JSON object of card name to whole cards;
- ``volcano.sh/card.request`` on a job: the same, where a key may list alternatives
  ``"A|B"`` (any one of them must have room);
- ``volcano.sh/card.name`` on a pod: the card it runs on, or alternatives ``A|B`` tried in
  the written order.

Amounts are counted in milli-cards (1000 = one card), so that a pod holding half a GPU
counts as half a card of that GPU's product.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kgpu.model.gpu import GpuRequest
from kgpu.model.json_text import JsonTextError, read_json
from kgpu.model.limits import MAX_CARDS, clip, show_json
from kgpu.model.resources import BASE, MILLI

PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
MEMORY_LABEL: Final = "nvidia.com/gpu.memory"
REPLICAS_LABEL: Final = "nvidia.com/gpu.replicas"
QUOTA_ANNOTATION: Final = "volcano.sh/card.quota"
REQUEST_ANNOTATION: Final = "volcano.sh/card.request"
NAME_ANNOTATION: Final = "volcano.sh/card.name"
SEPARATOR: Final = "|"

_MIG_LABEL: Final = re.compile(r"nvidia\.com/mig-(?P<profile>.+)\.count")
_MIG_PREFIX: Final = "nvidia.com/mig-"  # what every key ``_MIG_LABEL`` matches starts with
_MPS_NAME: Final = re.compile(r".+/mps-[0-9]+g\*1/(?P<replicas>[0-9]+)")
_MIG_NAME: Final = re.compile(r".+/mig-.+-mixed")
_DIGITS: Final = re.compile(r"[0-9]+")
_QUOTA_EXAMPLE: Final = '{"NVIDIA-A100-80GB": 8}'


class CardError(ValueError):
    """Card text that cannot be used: names the field, the value and what was expected."""

    def __init__(self, field: str, value: object, expected: str) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        shown = show_json(value)
        super().__init__(f"{field} is {shown}, expected {expected}")


@dataclass(frozen=True, slots=True)
class NodeCard:
    """``count`` cards named ``name`` on one node."""

    name: str
    count: int


def mps_card_name(product: str, memory_mib: int, replicas: int) -> str:
    return f"{product}/mps-{memory_mib // 1024}g*1/{replicas}"


def mig_card_name(product: str, profile: str) -> str:
    return f"{product}/mig-{profile}-mixed"


def _number(value: str) -> int:
    return int(value) if value and _DIGITS.fullmatch(value) else 0


def node_cards(labels: Mapping[str, str], gpu_count: int) -> tuple[NodeCard, ...]:
    """The cards a node offers, by Volcano's naming rules (none without a product label)."""
    product = labels.get(PRODUCT_LABEL, "")
    if not product:
        return ()
    # Only MIG labels can match, and a node carries dozens of others (its hostname, zone,
    # ...): a prefix test spares each of them the pattern, asked of every node a session.
    mig = [(k, v) for k, v in labels.items() if k.startswith(_MIG_PREFIX)]
    replicas, memory = labels.get(REPLICAS_LABEL, ""), labels.get(MEMORY_LABEL, "")
    return _cards(product, replicas, memory, tuple(sorted(mig)) if mig else (), gpu_count)


# Thousands of nodes are a few kinds: each kind's cards are worked out once (the first
# session over a cluster asks for every node's).
@functools.lru_cache(maxsize=1024)
def _cards(
    product: str, replicas_text: str, memory_text: str, mig: tuple[tuple[str, str], ...], gpus: int
) -> tuple[NodeCard, ...]:
    cards = []
    replicas = _number(replicas_text)
    if replicas > 1:
        memory = _number(memory_text)
        cards.append(NodeCard(mps_card_name(product, memory, replicas), gpus * replicas))
    elif gpus > 0:
        cards.append(NodeCard(product, gpus))
    for key, value in mig:
        match = _MIG_LABEL.fullmatch(key)
        if match is not None and _number(value) > 0:
            cards.append(NodeCard(mig_card_name(product, match["profile"]), _number(value)))
    return tuple(cards)


def mps_replicas(card: str) -> int:
    """How many replicas each GPU of an MPS card is split into (0: not an MPS card)."""
    match = _MPS_NAME.fullmatch(card)
    return int(match["replicas"]) if match is not None else 0


def card_product(card: str) -> str:
    """The GPU product a card is carved from: the name up to its first ``/``."""
    return card.split("/", 1)[0]


def card_units(card: str, gpu: GpuRequest) -> int:
    """Milli-cards of ``card`` that a pod with this GPU request holds.

    A whole card counts the GPU milli itself (half a GPU is half a card); an MPS replica is
    one card, so a share of ``1/replicas`` of a GPU counts 1000 (rounded to whole replicas,
    at least one); a MIG instance is one card per requested device.
    """
    if not gpu.count:
        return 0
    replicas = mps_replicas(card)
    if replicas:
        return max(1, round(gpu.total_milli * replicas / MILLI)) * MILLI
    if _MIG_NAME.fullmatch(card):
        return gpu.count * MILLI
    return gpu.total_milli


def counted_units(card: str, gpu: GpuRequest, milli: int) -> int:
    """Milli-cards a pod counts as ``card``, given the milli-GPU it counts: a whole card
    counts the GPU share, which for a memory-only request is ``milli`` (``card_units``
    reads only the request, where that share is 0)."""
    return card_units(card, gpu) or milli


# ---------------------------------------------------------------------------- parsing


def _check_name(field: str, name: object, what: str) -> str:
    if not isinstance(name, str) or not name.strip():
        raise CardError(field, name, f"{what}, a non-empty card name such as NVIDIA-A100-80GB")
    name = name.strip()
    if SEPARATOR in name:
        raise CardError(field, name, f"{what}, one card name without {SEPARATOR!r}")
    if name in BASE:
        raise CardError(field, name, f"{what}, a card name other than {', '.join(BASE)}")
    return name


def parse_card_name(text: str, field: str = f"annotation {NAME_ANNOTATION}") -> tuple[str, ...]:
    """``"A100|H100"`` → ``("A100", "H100")``: the alternatives in the written order."""
    names: list[str] = []
    for part in text.split(SEPARATOR):
        if not part.strip():
            raise CardError(field, text, 'card names separated by "|", such as "A100|H100"')
        name = _check_name(field, part, "card names separated by '|'")
        if name not in names:
            names.append(name)
    return tuple(names)


def _json_object(text: str, field: str, expected: str) -> dict[str, object]:
    try:
        data = read_json(text)
    except JsonTextError as exc:
        raise CardError(field, text, f"{expected} ({exc})") from None
    if not isinstance(data, dict):
        raise CardError(field, text, expected)
    return data


def _count(field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CardError(field, value, "a whole number of cards, at least 0")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise CardError(field, value, "a whole number of cards, at least 0")
    if value < 0:
        raise CardError(field, value, "a whole number of cards, at least 0")
    if value > MAX_CARDS:
        raise CardError(field, value, f"a whole number of cards, at most {MAX_CARDS}")
    return int(value)


def parse_card_quota(text: str, field: str = f"annotation {QUOTA_ANNOTATION}") -> dict[str, int]:
    """A queue's ``volcano.sh/card.quota``: card name → whole cards."""
    expected = f"a JSON object of card names to whole numbers of cards, such as {_QUOTA_EXAMPLE}"
    out: dict[str, int] = {}
    for key, value in _json_object(text, field, expected).items():
        name = _check_name(f"{field} key {clip(json.dumps(key))}", key, "a card name")
        out[name] = _count(f"{field}[{clip(json.dumps(key))}]", value)
    return out


def parse_card_request(
    text: str, field: str = f"annotation {REQUEST_ANNOTATION}"
) -> dict[tuple[str, ...], int]:
    """A job's ``volcano.sh/card.request``: card alternatives → whole cards."""
    expected = (
        "a JSON object of card names (alternatives separated by |) to whole numbers of cards, "
        f"such as {_QUOTA_EXAMPLE}"
    )
    out: dict[tuple[str, ...], int] = {}
    for key, value in _json_object(text, field, expected).items():
        names = parse_card_name(key, f"{field} key {clip(json.dumps(key))}")
        out[names] = out.get(names, 0) + _count(f"{field}[{clip(json.dumps(key))}]", value)
    return out

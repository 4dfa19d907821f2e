"""What topology a gang asks for, read from its pods' annotations.

Three dialects say the same two things, so manifests written for Kueue or KAI work
unchanged; the value names a level of the profile's topology, by its name (``rack``) or by
its node label (``cloud.provider.com/topology-rack``, as Kueue and KAI write it):

==============================================  ============================================
annotation                                       meaning
==============================================  ============================================
``kgpu.io/topology-required``                    all pods in one domain of this level
``kueue.x-k8s.io/podset-required-topology``      (the same, Kueue's)
``kai.scheduler/topology-required-placement``    (the same, KAI's)
``kgpu.io/topology-preferred``                   one domain of this level if one has room,
``kueue.x-k8s.io/podset-preferred-topology``     else one of the level above, and so on up;
``kai.scheduler/topology-preferred-placement``   else across the fewest domains
==============================================  ============================================

Both kinds on one gang (as KAI allows): start at the preferred level and go up no further
than the required one, which is then the highest level the gang may span (Volcano's
``highestTierAllowed``). KAI's ``kai.scheduler/topology`` (the name of its Topology object)
is not read: a profile has one topology.

The pods of a gang that carry annotations must agree; pods without any follow the gang.
Every value is untrusted input: one that names no level, or a preferred level above the
required one, is refused with the pod, the annotation, the value and what was expected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from kgpu.model.pod import PodSpec

REQUIRED: Final = (
    "kgpu.io/topology-required",
    "kueue.x-k8s.io/podset-required-topology",
    "kai.scheduler/topology-required-placement",
)
PREFERRED: Final = (
    "kgpu.io/topology-preferred",
    "kueue.x-k8s.io/podset-preferred-topology",
    "kai.scheduler/topology-preferred-placement",
)
# A label key is at most 253 + 1 + 63 characters; a longer value is cut in messages.
_MAX_SHOWN: Final = 320

Levels = Sequence[tuple[str, str]]  # (name, node label) of each level, highest first


class TopologyRequestError(ValueError):
    """An annotation that cannot be read; the message names pod, annotation and value."""


@dataclass(frozen=True, slots=True)
class TopologyRequest:
    """Levels by index into the profile's levels (0: the highest).

    ``required``: the highest level the gang may span (None: any, across domains).
    ``preferred``: the level to try first (None: start at ``required``).
    """

    required: int | None = None
    preferred: int | None = None

    def levels_to_try(self, count: int) -> tuple[int, ...]:
        """Levels whose single domains are tried, lowest (the start) first."""
        start = self.preferred if self.preferred is not None else self.required
        top = self.required if self.required is not None else 0
        return tuple(range(start, top - 1, -1)) if start is not None and start < count else ()

    @property
    def spreads(self) -> bool:
        """May the gang span several domains of the highest level when no one has room?"""
        return self.required is None


def _level(pod: PodSpec, key: str, value: str, levels: Levels) -> int:
    text = value.strip()
    for index, (name, label) in enumerate(levels):
        if text in (name, label):
            return index
    shown = value if len(value) <= _MAX_SHOWN else value[:_MAX_SHOWN] + "…"
    expected = ", ".join(f"{name} ({label})" for name, label in levels)
    raise TopologyRequestError(
        f"Pod {pod.key}: annotation {key} is {shown!r}; expected a topology level of the "
        f"profile, by name or node label: {expected}"
    )


def _one_of(pod: PodSpec, keys: Sequence[str], levels: Levels) -> tuple[int, str] | None:
    """The level the pod's annotations of one kind name, with the annotation that named it."""
    found: tuple[int, str] | None = None
    for key in keys:
        value = pod.annotations.get(key)
        if value is None:
            continue
        level = _level(pod, key, value, levels)
        if found is not None and found[0] != level:
            raise TopologyRequestError(
                f"Pod {pod.key}: annotations {found[1]} and {key} name different levels "
                f"({levels[found[0]][0]} and {levels[level][0]}); expected one level"
            )
        found = (level, key)
    return found


def request_of(pod: PodSpec, levels: Levels) -> TopologyRequest | None:
    """The pod's request, None if it carries none (TopologyRequestError if unreadable)."""
    annotations = pod.annotations
    if not annotations or not any(k in annotations for k in (*REQUIRED, *PREFERRED)):
        return None
    required = _one_of(pod, REQUIRED, levels)
    preferred = _one_of(pod, PREFERRED, levels)
    if required is not None and preferred is not None and preferred[0] < required[0]:
        raise TopologyRequestError(
            f"Pod {pod.key}: annotation {preferred[1]} names level {levels[preferred[0]][0]}, "
            f"above the required level {levels[required[0]][0]} ({required[1]}); expected a "
            "preferred level at or below the required one"
        )
    return TopologyRequest(
        required[0] if required is not None else None,
        preferred[0] if preferred is not None else None,
    )


def gang_request(pods: Sequence[PodSpec], levels: Levels) -> TopologyRequest | None:
    """The request the annotated pods of one gang agree on (TopologyRequestError if not)."""
    found: TopologyRequest | None = None
    first: PodSpec | None = None
    for pod in pods:
        request = request_of(pod, levels)
        if request is None:
            continue
        if found is not None and first is not None and request != found:
            raise TopologyRequestError(
                f"Pods {first.key} and {pod.key} of one gang ask for different topology "
                f"({describe(found, levels)}; {describe(request, levels)}); expected the same "
                "annotations on every pod that carries them"
            )
        found, first = request, pod
    return found


def describe(request: TopologyRequest, levels: Levels) -> str:
    """ "required level rack", "preferred level rack, required level block" """
    parts = []
    if request.preferred is not None:
        parts.append(f"preferred level {levels[request.preferred][0]}")
    if request.required is not None:
        parts.append(f"required level {levels[request.required][0]}")
    return ", ".join(parts)

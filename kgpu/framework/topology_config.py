"""The network topology a profile declares: levels of node labels, from the highest down.

As Kueue's and KAI's ``Topology`` objects, a level is a node label whose value names a
domain (a zone, a block of racks, a rack, an NVLink clique); levels are listed from the
highest (largest domains) to the lowest::

    topology:
      levels:
        - {name: zone, nodeLabel: topology.kubernetes.io/zone}
        - {name: block, nodeLabel: cloud.provider.com/topology-block}
        - {name: rack, nodeLabel: cloud.provider.com/topology-rack}
        - {name: clique, nodeLabel: nvidia.com/gpu.clique}

A domain of a level is named by its node's values of that level's label and of every label
above it (two racks called ``r1`` in two blocks are two domains, as in Kueue). Gangs ask
for a level by its name or its node label (see :mod:`kgpu.model.topology_request`).
No levels (the default): no gang is placed by topology and no annotation is read.

Every field is checked when the profile is read; a bad value is refused with the field,
the value and what was expected (pydantic's message, under the profile's name).
"""

from __future__ import annotations

import re
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# More levels than a data centre has tiers is a mistake, not a topology; the bound also
# bounds the work per gang (one pass over the nodes per level).
MAX_LEVELS: Final = 8

# A level's name: a DNS label, as users write it in annotations and read it in messages.
_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# A Kubernetes label key: an optional DNS subdomain prefix and "/", then a name of at most
# 63 characters of alphanumerics, "-", "_" and "." that starts and ends alphanumeric.
_PREFIX: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_KEY_NAME: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a Kubernetes label key, or None if it is one."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _PREFIX.fullmatch(prefix)):
        return "its prefix must be a DNS subdomain of at most 253 characters"
    if not _KEY_NAME.fullmatch(name):
        return (
            "its name must be 1-63 characters of letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit"
        )
    return None


class TopologyLevel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, strict=True)

    name: str
    node_label: str = Field(alias="nodeLabel")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError(
                f"level name {value!r} is not a DNS label (1-63 lower-case letters, digits "
                "and '-', starting and ending with a letter or digit)"
            )
        return value

    @field_validator("node_label")
    @classmethod
    def _label(cls, value: str) -> str:
        problem = label_key_problem(value)
        if problem is not None:
            raise ValueError(f"nodeLabel {value!r} is not a Kubernetes label key: {problem}")
        return value


class Topology(BaseModel):
    """The levels, highest first; none: topology-aware placement is off."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    levels: tuple[TopologyLevel, ...] = Field(default=(), max_length=MAX_LEVELS)

    @model_validator(mode="after")
    def _distinct(self) -> Topology:
        for what, values in (
            ("name", [level.name for level in self.levels]),
            ("nodeLabel", [level.node_label for level in self.levels]),
        ):
            twice = sorted({v for v in values if values.count(v) > 1})
            if twice:
                raise ValueError(
                    f"topology levels must each have their own {what}; "
                    f"{', '.join(repr(t) for t in twice)} is given more than once"
                )
        return self

    @property
    def pairs(self) -> tuple[tuple[str, str], ...]:
        """(name, node label) of each level, highest first."""
        return tuple((level.name, level.node_label) for level in self.levels)

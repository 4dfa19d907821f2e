"""A profile names the plugins of each extension point, their weights and arguments.

Profiles are plain data (validated by pydantic) so they can be written in YAML, stored
beside a replay's results and compared.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kgpu.framework.defrag_config import Defragmentation
from kgpu.framework.topology_config import Topology


class WeightedPlugin(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    weight: float = Field(default=1.0, gt=0)


class Profile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    name: str
    description: str = ""
    pre_filters: tuple[str, ...] = Field(default=(), alias="preFilters")
    filters: tuple[str, ...] = ()
    scores: tuple[WeightedPlugin, ...] = ()
    gpu_choice: str = Field(alias="gpuChoice")
    plugin_args: dict[str, dict[str, Any]] = Field(default_factory=dict, alias="pluginArgs")
    # Off unless the profile turns it on (``defragmentation: {enabled: true}``).
    defragmentation: Defragmentation = Field(default_factory=Defragmentation)
    # No levels unless the profile declares them: gangs are then placed without topology.
    topology: Topology = Field(default_factory=Topology)

"""The plugin registry: plugin names to factories, and profiles turned into schedulers.

Built by a function, never by import side effects, so a test or an embedding program can
start from ``default_registry()`` and add or replace plugins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import UnionType
from typing import Any

from kgpu.dra.inventory import DraInventory
from kgpu.framework.group_scheduler import GroupScheduler
from kgpu.framework.groups import (
    GroupFilterPlugin,
    GroupNodeFilterPlugin,
    GroupProfile,
    GroupScorePlugin,
)
from kgpu.framework.interfaces import (
    FilterPlugin,
    GpuChoicePlugin,
    PreFilterPlugin,
    ScorePlugin,
)
from kgpu.framework.profile import Profile
from kgpu.framework.scheduler import Scheduler
from kgpu.framework.session import SessionPlugin
from kgpu.plugins import names
from kgpu.plugins.group.capacity_filter import CapacityFilter
from kgpu.plugins.group.label_filter import LabelFilter
from kgpu.plugins.group.node_group_size_filter import NodeGroupSizeFilter
from kgpu.plugins.group.node_resource_filter import NodeResourceFilter
from kgpu.plugins.group.resource_utilization_scorer import ResourceUtilizationScorer
from kgpu.plugins.node.best_fit import BestFit
from kgpu.plugins.node.device_choice import DeviceChoice
from kgpu.plugins.node.dot_product import DotProduct
from kgpu.plugins.node.dra_claims import DraClaims
from kgpu.plugins.node.fgd import FgdScore
from kgpu.plugins.node.gpu_clustering import GpuClustering
from kgpu.plugins.node.gpu_fit import GpuFit
from kgpu.plugins.node.gpu_packing import GpuPacking
from kgpu.plugins.node.gpu_random import GpuRandom
from kgpu.plugins.node.gpu_request_check import GpuRequestCheck
from kgpu.plugins.node.gpu_tightest import GpuTightest
from kgpu.plugins.node.gpu_topology import GpuTopology
from kgpu.plugins.node.node_placement import NodePlacement
from kgpu.plugins.node.node_selector import NodeSelector
from kgpu.plugins.node.node_unschedulable import NodeUnschedulable
from kgpu.plugins.node.random_score import RandomScore
from kgpu.plugins.node.resource_fit import NodeResourcesFit
from kgpu.plugins.node.strand_aware_fgd import StrandAwareFgd
from kgpu.plugins.node.taint_toleration import TaintToleration
from kgpu.plugins.session.capacity_card import CapacityCard
from kgpu.plugins.session.gang import Gang
from kgpu.plugins.session.priority_order import PriorityOrder
from kgpu.plugins.session.proportion import Proportion
from kgpu.state.fragmentation import TypicalPod


@dataclass(frozen=True, slots=True)
class PluginContext:
    """What plugins may need beyond their arguments: the run's seed, the workload's
    typical pods (for fragmentation-aware scores) and the cluster's DRA objects (for
    ResourceClaims)."""

    seed: int = 0
    typical_pods: list[TypicalPod] = field(default_factory=list)
    dra: DraInventory | None = None


Factory = Callable[[Mapping[str, Any], PluginContext], object]


class UnknownPluginError(KeyError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown plugin {name!r}; known plugins: {', '.join(sorted(known))}")


def default_registry() -> dict[str, Factory]:
    return {
        names.NODE_UNSCHEDULABLE: lambda a, c: NodeUnschedulable(),
        names.NODE_SELECTOR: lambda a, c: NodeSelector(),
        names.TAINT_TOLERATION: lambda a, c: TaintToleration(),
        names.NODE_RESOURCES_FIT: lambda a, c: NodeResourcesFit(),
        names.GPU_FIT: lambda a, c: GpuFit(),
        names.GPU_TIGHTEST: lambda a, c: GpuTightest(),
        names.GPU_RANDOM: lambda a, c: GpuRandom(seed=c.seed + 1),
        names.RANDOM: lambda a, c: RandomScore(seed=c.seed),
        names.DOT_PRODUCT: lambda a, c: DotProduct(),
        names.GPU_CLUSTERING: lambda a, c: GpuClustering(),
        names.GPU_PACKING: lambda a, c: GpuPacking(),
        names.BEST_FIT: lambda a, c: BestFit(),
        names.FGD: lambda a, c: FgdScore(c.typical_pods),
        names.STRAND_AWARE_FGD: lambda a, c: StrandAwareFgd(c.typical_pods),
        names.NODE_PLACEMENT: lambda a, c: NodePlacement.from_args(a),
        names.GPU_REQUEST_CHECK: lambda a, c: GpuRequestCheck(),
        names.GPU_TOPOLOGY: lambda a, c: GpuTopology(),
        names.DRA_CLAIMS: lambda a, c: DraClaims(c.dra),
        # Node-group plugins (inference workspaces): see build_group_scheduler.
        names.LABEL_FILTER: lambda a, c: LabelFilter(),
        names.NODE_RESOURCE_FILTER: lambda a, c: NodeResourceFilter(),
        names.NODE_GROUP_SIZE_FILTER: lambda a, c: NodeGroupSizeFilter(),
        names.CAPACITY_FILTER: lambda a, c: CapacityFilter(),
        names.RESOURCE_UTILIZATION_SCORER: lambda a, c: ResourceUtilizationScorer(),
    }


class _Instances:
    """One instance per plugin name of a profile, made on first use from the registry, so a
    plugin serving several extension points (a score that also chooses GPUs) is shared."""

    def __init__(
        self,
        registry: Mapping[str, Factory],
        args: Mapping[str, Mapping[str, Any]],
        context: PluginContext,
    ) -> None:
        self.registry = registry
        self.args = args
        self.context = context
        self.made: dict[str, object] = {}

    def get(self, name: str) -> object:
        if name not in self.made:
            if name not in self.registry:
                raise UnknownPluginError(name, list(self.registry))
            self.made[name] = self.registry[name](self.args.get(name, {}), self.context)
        return self.made[name]

    def typed(self, name: str, point: type[Any] | UnionType, what: str) -> Any:
        plugin = self.get(name)
        if not isinstance(plugin, point):
            raise TypeError(f"plugin {name!r} cannot serve as {what}")
        return plugin


def build_scheduler(
    profile: Profile,
    context: PluginContext | None = None,
    registry: Mapping[str, Factory] | None = None,
) -> Scheduler:
    """Instantiate each plugin of the profile once and wire it to its extension points."""
    plugins = _Instances(
        registry if registry is not None else default_registry(),
        profile.plugin_args,
        context or PluginContext(),
    )

    def typed(name: str, point: type[Any]) -> Any:
        return plugins.typed(name, point, point.__name__)

    pre_filters: list[PreFilterPlugin] = [typed(n, PreFilterPlugin) for n in profile.pre_filters]
    filters: list[FilterPlugin] = [typed(n, FilterPlugin) for n in profile.filters]
    scores: list[tuple[ScorePlugin, float]] = [
        (typed(s.name, ScorePlugin), s.weight) for s in profile.scores
    ]
    # Every policy's pick is held to the node's devices (memory, MPS, MIG, NVLink islands).
    gpu_choice: GpuChoicePlugin = DeviceChoice(typed(profile.gpu_choice, GpuChoicePlugin))
    return Scheduler(pre_filters, filters, scores, gpu_choice)


def build_group_scheduler(
    profile: GroupProfile,
    context: PluginContext | None = None,
    registry: Mapping[str, Factory] | None = None,
) -> GroupScheduler:
    """The node-group counterpart of :func:`build_scheduler`, from the same registry.

    A name the profile lists must be a plugin of the right kind: a pod filter named as a
    group filter (or the reverse) is a ``TypeError`` here, not a surprise in a cycle.
    """
    plugins = _Instances(
        registry if registry is not None else default_registry(),
        profile.plugin_args,
        context or PluginContext(),
    )
    filters: list[GroupNodeFilterPlugin | GroupFilterPlugin] = [
        plugins.typed(name, GroupNodeFilterPlugin | GroupFilterPlugin, "a node-group filter")
        for name in profile.filters
    ]
    scores: list[tuple[GroupScorePlugin, float]] = [
        (plugins.typed(w.name, GroupScorePlugin, "a node-group score"), w.weight)
        for w in profile.scores
    ]
    return GroupScheduler(filters, scores)


# ---------------------------------------------------------------------------- session plugins

SessionFactory = Callable[[Mapping[str, Any]], SessionPlugin]


def default_session_registry() -> dict[str, SessionFactory]:
    """Session plugins (queues, jobs, victims) by name; arguments from ``pluginArgs``."""
    return {
        names.PRIORITY: lambda a: PriorityOrder(),
        names.GANG: lambda a: Gang(),
        names.PROPORTION: lambda a: Proportion(),
        names.CAPACITY_CARD: CapacityCard.from_args,
    }


def build_session_plugins(
    plugins: Sequence[str],
    args: Mapping[str, Mapping[str, Any]] | None = None,
    registry: Mapping[str, SessionFactory] | None = None,
) -> list[SessionPlugin]:
    """One instance per named session plugin, in the given order (which is the order their
    callbacks are asked in)."""
    registry = registry if registry is not None else default_session_registry()
    args = args or {}
    out = []
    for name in plugins:
        if name not in registry:
            raise UnknownPluginError(name, list(registry))
        out.append(registry[name](args.get(name, {})))
    return out

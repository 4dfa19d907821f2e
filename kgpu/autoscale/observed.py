"""What the trigger controller observes and what it asks for, as plain records.

The edge builds the observed records from the API objects (trigger Pods, Karpenter
NodeClaims, Nodes) and carries out :class:`Actions`; the simulator builds them from its
provisioner model. Times are seconds on one clock (the API server's for the live edge).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from kgpu.autoscale.demand import TriggerSpec, UnplacedPod
from kgpu.autoscale.planner import Unplannable
from kgpu.model.pod import PodKey

# Karpenter's NodeClaim conditions, in the order a launch passes them.
NODECLAIM_STAGES = ("Launched", "Registered", "Initialized", "Ready")


class Phase(StrEnum):
    """Where a trigger stands: from created to its node Ready (or failed)."""

    PENDING = "Pending"  # no NodeClaim for it yet
    LAUNCHING = "Launching"  # a NodeClaim exists; the instance is not launched yet
    LAUNCHED = "Launched"
    REGISTERED = "Registered"
    INITIALIZED = "Initialized"
    BOUND = "Bound"  # on a node that is not Ready (yet)
    READY = "Ready"  # its node is Ready: it is deleted and its pods placed
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class ObservedTrigger:
    """A trigger pod as it is: ``node`` once bound, ``failed`` when the pod itself failed
    (its deadline passed on a node, or it was evicted)."""

    name: str
    group: str
    pods: tuple[PodKey, ...]
    gpus: int
    created_at: float
    pool: str = ""
    node: str = ""
    failed: str = ""
    deleting: bool = False
    cpu_milli: int | None = None  # None: not known (an annotation edited by hand)
    memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class ObservedNodeClaim:
    """A Karpenter NodeClaim: its pool, creation time and conditions (type: "True",
    "False" or "Unknown"). ``failure``: why it will not become a node, when it says so."""

    name: str
    pool: str
    created_at: float
    conditions: Mapping[str, str] = field(default_factory=dict, hash=False)
    node: str = ""
    failure: str = ""
    deleting: bool = False

    @property
    def phase(self) -> Phase:
        reached = Phase.LAUNCHING
        for stage in NODECLAIM_STAGES[:3]:
            if self.conditions.get(stage) != "True":
                break
            reached = Phase(stage)
        return reached


@dataclass(frozen=True, slots=True)
class ObservedNode:
    name: str
    ready: bool
    pool: str = ""


@dataclass(frozen=True, slots=True)
class Observed:
    """One look at the world: the pods kgpu could not place and the autoscaling objects."""

    now: float
    pending: Sequence[UnplacedPod] = ()
    triggers: Sequence[ObservedTrigger] = ()
    claims: Sequence[ObservedNodeClaim] = ()
    nodes: Sequence[ObservedNode] = ()


@dataclass(frozen=True, slots=True)
class TriggerOutcome:
    """A trigger's end: its node became Ready (``node``), or it failed (``reason``)."""

    trigger: str
    group: str
    pool: str
    pods: tuple[PodKey, ...]
    duration_s: float
    node: str = ""
    reason: str = ""

    @property
    def succeeded(self) -> bool:
        return bool(self.node)


@dataclass(frozen=True, slots=True)
class PodEvent:
    """An event to record on an original pod."""

    pod: PodKey
    type: str  # Normal or Warning
    reason: str
    message: str


@dataclass(slots=True)
class Actions:
    """What one controller step asks the edge to do, and what it saw.

    ``retry``: pods whose new node is Ready, to be scheduled at once. ``waiting``: pods held
    back (their group is backing off, their batch is still gathering, or their node has
    just become Ready). ``wake_at``: when the controller next needs a step even if nothing
    changes (a batch closes, a back-off ends, a trigger times out); None if never.
    """

    create: list[TriggerSpec] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    retry: list[PodKey] = field(default_factory=list)
    events: list[PodEvent] = field(default_factory=list)
    outcomes: list[TriggerOutcome] = field(default_factory=list)
    phases: dict[str, Phase] = field(default_factory=dict)
    waiting: list[PodKey] = field(default_factory=list)
    unplannable: list[Unplannable] = field(default_factory=list)
    wake_at: float | None = None

    @property
    def active(self) -> int:
        """Triggers still provisioning after this step."""
        return sum(p not in (Phase.READY, Phase.FAILED) for p in self.phases.values())

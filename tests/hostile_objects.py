"""A seeded generator of hostile Kubernetes objects (issue #18, point 6), with hypothesis.

Each strategy starts from a well-formed object and applies a few mutations drawn from what an
attacker with ordinary tenant rights can write: absurd quantities (NaN, inf, 1e309, negative,
unicode digits, 5,000 digits, values of other JSON types), JSON nested 50,000 deep where kgpu
reads JSON, control characters and huge strings in names, labels and annotations, Queues whose
parents form cycles. With no mutation drawn the object is a good one, so good objects come
out of every strategy too.

Names: every hostile object's name starts with ``h`` and no queue it names is ``good`` or
``default``, so the good pods the tests mix in (in namespace ``good``, on nodes only they
tolerate, in Queue ``good``) meet the hostile objects only through the scheduler's code, never
through placement rules or quota: they must still be placed whatever else is there.

:data:`TALLY` counts, per target, the objects tried and refused; conftest.py prints it at the
end of the run, so CI shows it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

Obj = dict[str, Any]

# Deterministic and bounded: the same examples on every run, no database written, no health
# check failing a run because a 50,000-deep string is slow to build or large, and no
# shrinking (of objects this large it takes minutes; a failure shows its example unshrunk).
HOSTILE_SETTINGS = settings(
    phases=(Phase.explicit, Phase.generate),
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

DEEP_ARRAY = "[" * 50_000 + "]" * 50_000
DEEP_OBJECT = '{"a":' * 40_000 + "1" + "}" * 40_000
HUGE = "x" * 300_000  # past the 256 KiB an annotation of kgpu's may hold
ABSURD_NUMBERS = (
    "NaN", "nan", "inf", "-inf", "Infinity", "1e309", "-1e309", "1e16", "1e-400", "-1",
    "-0.5", "0", "-0", "0.0000001", "99999999999999999999", "1000000", "0x10", "1_000",
    "١٢", "１２", "²", "٣.٥", "Ⅻ", "", " ", " 1", "1 ", "1.5.5", "1Ei", "1e", "++1", "1\x00",
    "9" * 5000, "1" + "0" * 400, "0." + "0" * 4000 + "1", "1e99999999999",
)  # fmt: skip
GOOD_QUANTITIES = ("1", "2", "4", "500m", "0.5", "50", "16Gi", "80Gi", "1e3")
GPU_RESOURCES = (
    "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb",
    "nvidia.com/mig-7g.80gb", "nvidia.com/mig-", "nvidia.com/mig-0g.0gb", "kubernetes.io/gpu",
    "kubernetes.io/gpu-core", "kubernetes.io/gpu-memory", "kubernetes.io/gpu-memory-ratio",
    "koordinator.sh/gpu", "koordinator.sh/gpu-core", "koordinator.sh/gpu-memory",
    "koordinator.sh/gpu-memory-ratio", "cpu", "memory", "pods", "ephemeral-storage",
)  # fmt: skip
POD_ANNOTATIONS = (
    "gpu-fraction", "gpu-memory", "gpu-fraction-num-devices", "volcano.sh/card.name",
    "kgpu.io/device-allocation", "kgpu.io/visible-devices", "kgpu.io/admitted-queue",
    "kgpu.io/gpu-env-configmap", "kgpu.io/gpu-minor", "kgpu.io/gpu-reservation",
    "scheduling.k8s.io/group-name", "kgpu.io/pod-group",
)  # fmt: skip
NODE_LABELS = (
    "nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory",
    "nvidia.com/gpu.replicas", "nvidia.com/mps.capable", "nvidia.com/mig-1g.10gb.count",
    "nvidia.com/mig.strategy", "node.kubernetes.io/instance-type",
)  # fmt: skip
NODE_CAPACITY = (
    "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb", "cpu", "memory", "pods",
    "kubernetes.io/gpu", "kubernetes.io/gpu-core", "kubernetes.io/gpu-memory",
)  # fmt: skip
CARD_NAMES = ("NVIDIA-A100-80GB", "Tesla-T4", "NVIDIA-H100-80GB", "A100", "", "\x1b[31mred")
CHECKPOINTS = (
    "kgpu.io/devices-checkpoints",
    "node.koordinator.sh/devices-checkpoints",
    "node.koordinator.sh/gpu-checkpoints",
)
QUEUE_NAMES = ("h-a", "h-b", "h-c", "h-root")  # parents among these make cycles
PLAIN_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
# Control characters, bidi overrides, a terminal escape: what must be escaped when shown.
NASTY_TEXT = st.sampled_from(
    ("\x00", "\n", "\r\n", "\x1b[2J", "\u202e", "\t", "\x7f", "💥", "a" * 300, "/", "..")
)


@dataclass
class Tally:
    tried: int = 0
    refused: int = 0


# Per target ("webhook review", "kgpu simulate manifests", ...): written by the tests,
# printed by conftest.py's pytest_terminal_summary.
TALLY: dict[str, Tally] = {}


def tally(target: str, tried: int, refused: int) -> None:
    entry = TALLY.setdefault(target, Tally())
    entry.tried += tried
    entry.refused += refused


# ---------------------------------------------------------------------------- values


def quantities() -> st.SearchStrategy[Any]:
    """A quantity as an object may carry one: mostly strings, good or absurd, and now and
    then another JSON type."""
    return st.one_of(
        st.sampled_from(GOOD_QUANTITIES),
        st.sampled_from(ABSURD_NUMBERS),
        st.integers(-(2**70), 2**70).map(str),
        st.floats().map(repr),
        PLAIN_TEXT,
        st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats()),
        st.lists(st.integers(0, 9), max_size=2),
    )


def json_values() -> st.SearchStrategy[Any]:
    leaves = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), PLAIN_TEXT)
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(PLAIN_TEXT, inner, max_size=3)
        ),
        max_leaves=8,
    )


def json_texts() -> st.SearchStrategy[str]:
    """Text where kgpu reads JSON: nested too deep, too large, cut short, or some JSON."""
    return st.one_of(
        st.sampled_from(
            (DEEP_ARRAY, DEEP_OBJECT, "[" * 33 + "]" * 33, "[" * 20_000, '{"gpu": [' * 9000, HUGE)
        ),
        st.sampled_from(('{"gpu": [{"minor": 0}]}', '{"NVIDIA-A100-80GB": 8}', "[]", "{}", "")),
        json_values().map(json.dumps),
        st.sampled_from(ABSURD_NUMBERS),
    )


def texts() -> st.SearchStrategy[str]:
    return st.one_of(PLAIN_TEXT, NASTY_TEXT, st.just(HUGE))


def annotation_values() -> st.SearchStrategy[Any]:
    return st.one_of(
        json_texts(), texts(), st.sampled_from(ABSURD_NUMBERS), st.sampled_from(CARD_NAMES)
    )


def names(prefix: str) -> st.SearchStrategy[str]:
    """A name starting with ``prefix``: usually a plain one, now and then with control
    characters, unicode or 300 characters (the API server refuses those; kgpu sees them
    through the double and the simulator)."""
    return st.one_of(
        st.integers(0, 10**6).map(lambda i: f"{prefix}-{i}"),
        st.tuples(st.integers(0, 10**6), NASTY_TEXT).map(lambda t: f"{prefix}-{t[0]}{t[1]}"),
    )


def _mutations(
    base: st.SearchStrategy[Obj], edits: list[st.SearchStrategy[Any]]
) -> st.SearchStrategy[Obj]:
    """``base`` with up to four of ``edits`` applied (each a function of the object)."""

    def apply(pair: tuple[Obj, list[Any]]) -> Obj:
        obj, chosen = pair
        for edit in chosen:
            edit(obj)
        return obj

    return st.tuples(base, st.lists(st.one_of(edits), max_size=4)).map(apply)


def _setter(*path: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """An edit setting ``path`` (made where missing) to one of ``values``."""

    def edit_of(value: Any) -> Any:
        def edit(obj: Obj) -> None:
            target = obj
            for key in path[:-1]:
                if not isinstance(target.get(key), dict):
                    target[key] = {}
                target = target[key]
            target[path[-1]] = value

        return edit

    return values.map(edit_of)


def _keyed(*path: str, keys: st.SearchStrategy[str], values: st.SearchStrategy[Any]) -> Any:
    """An edit setting one key (of ``keys``) of the mapping at ``path``."""
    return st.tuples(keys, values).flatmap(lambda kv: _setter(*path, kv[0], values=st.just(kv[1])))


# ---------------------------------------------------------------------------- objects


def pods(
    namespaces: tuple[str, ...] = ("h-ns", "default"),
    nodes: tuple[str, ...] = ("h-node-0", "h-missing"),
    scheduler: str = "kgpu-scheduler",
) -> st.SearchStrategy[Obj]:
    """Pods of ``scheduler`` (mostly) or another, in ``namespaces``, asking GPUs in every
    dialect; some created bound to one of ``nodes``."""

    def base(args: tuple[str, str, str, str, Any]) -> Obj:
        name, namespace, owner, resource, amount = args
        resources = {"requests": {"cpu": "1"}, "limits": {resource: amount}}
        container = {"name": "main", "image": "example/train:1", "resources": resources}
        spec = {"schedulerName": owner, "containers": [container]}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": {}, "labels": {}},
            "spec": spec,
        }

    start = st.tuples(
        names("h-pod"),
        st.sampled_from(namespaces),
        st.sampled_from((scheduler, scheduler, scheduler, "default-scheduler")),
        st.sampled_from(GPU_RESOURCES),
        st.sampled_from(("1", "2", "500m")),
    ).map(base)
    container = ("spec", "containers")
    edits = [
        _keyed("metadata", "annotations", keys=st.sampled_from(POD_ANNOTATIONS),
               values=annotation_values()),
        _keyed("metadata", "labels", keys=st.sampled_from(("kgpu.io/queue", "kai.scheduler/queue")),
               values=st.one_of(st.sampled_from(QUEUE_NAMES), texts())),
        _setter("spec", "nodeName", values=st.sampled_from(nodes)),
        _setter("spec", "priority", values=quantities()),
        _setter("spec", "nodeSelector", values=st.dictionaries(PLAIN_TEXT, PLAIN_TEXT, max_size=2)),
        _setter(*container, values=st.one_of(st.none(), st.just([]), json_values())),
        st.tuples(st.sampled_from(("requests", "limits")), st.sampled_from(GPU_RESOURCES),
                  quantities()).map(_resource_edit),
        _setter("spec", "tolerations", values=st.one_of(json_values(), st.just([{"key": 1}]))),
        _setter("metadata", "annotations", values=st.one_of(st.none(), json_values())),
    ]  # fmt: skip
    return _mutations(start, edits)


def _resource_edit(args: tuple[str, str, Any]) -> Any:
    kind, resource, amount = args

    def edit(obj: Obj) -> None:
        containers = obj["spec"].get("containers")
        if isinstance(containers, list) and containers and isinstance(containers[0], dict):
            resources = containers[0].setdefault("resources", {})
            if isinstance(resources, dict) and isinstance(resources.get(kind, {}), dict):
                resources.setdefault(kind, {})[resource] = amount

    return edit


def nodes() -> st.SearchStrategy[Obj]:
    """GPU nodes, absurd in capacity or labels now and then."""

    def base(name: str) -> Obj:
        allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "4"}
        labels = {"nvidia.com/gpu.product": "NVIDIA-A100-80GB", "nvidia.com/gpu.count": "4"}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {}},
            "status": {
                "capacity": dict(allocatable),
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    keys = st.sampled_from(NODE_CAPACITY)
    edits = [
        _keyed("metadata", "labels", keys=st.sampled_from(NODE_LABELS),
               values=st.one_of(quantities(), st.sampled_from(CARD_NAMES))),
        _keyed("status", "allocatable", keys=keys, values=quantities()),
        _keyed("status", "capacity", keys=keys, values=quantities()),
        _keyed("metadata", "annotations", keys=st.sampled_from(("kgpu.io/gpu-topology", *CHECKPOINTS)),
               values=json_texts()),
        _setter("spec", "taints", values=json_values()),
        _setter("status", "conditions", values=st.one_of(json_values(), st.just([{"type": 1}]))),
    ]  # fmt: skip
    return _mutations(names("h-node").map(base), edits)


def queues() -> st.SearchStrategy[Obj]:
    """kgpu.io Queues among :data:`QUEUE_NAMES`: parents in cycles or themselves, negative
    or absurd quotas, card quotas nested deep, ``spec.namespaces`` of any shape."""

    def base(name: str) -> Obj:
        spec = {"deserved": {"gpu": "4"}, "limit": {"gpu": "8"}}
        return {"apiVersion": "kgpu.io/v1alpha1", "kind": "Queue",
                "metadata": {"name": name, "annotations": {}}, "spec": spec}  # fmt: skip

    resources = st.sampled_from(("gpu", "cpu", "memory", "nvidia.com/gpu", "NVIDIA-A100-80GB"))
    edits = [
        _setter("spec", "parent", values=st.one_of(st.sampled_from(QUEUE_NAMES), json_values())),
        _keyed("spec", "deserved", keys=resources, values=quantities()),
        _keyed("spec", "limit", keys=resources, values=quantities()),
        _setter("spec", "weight", values=quantities()),
        _setter("spec", "namespaces", values=st.one_of(
            json_values(), st.lists(st.one_of(texts(), st.integers()), max_size=4),
            st.just(["h-ns"] * 2000))),
        _keyed("metadata", "annotations", keys=st.just("volcano.sh/card.quota"), values=json_texts()),
        _setter("spec", "deserved", values=json_values()),
    ]  # fmt: skip
    return _mutations(st.sampled_from(QUEUE_NAMES).map(base), edits)


def podgroups(namespace: str = "h-ns") -> st.SearchStrategy[Obj]:
    def base(name: str) -> Obj:
        return {
            "apiVersion": "kgpu.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "annotations": {}},
            "spec": {"minMember": 2, "queue": "h-a"},
        }

    edits = [
        _setter("spec", "minMember", values=quantities()),
        _setter("spec", "maxMember", values=quantities()),
        _setter("spec", "queue", values=st.one_of(st.sampled_from(QUEUE_NAMES), texts())),
        _keyed("spec", "minResources", keys=st.sampled_from(GPU_RESOURCES), values=quantities()),
        _keyed("metadata", "annotations", keys=st.just("volcano.sh/card.request"),
               values=json_texts()),
    ]  # fmt: skip
    return _mutations(names("h-group").map(base), edits)


def workspaces(namespace: str = "h-ns") -> st.SearchStrategy[Obj]:
    def base(name: str) -> Obj:
        return {
            "apiVersion": "kgpu.io/v1alpha1",
            "kind": "Workspace",
            "metadata": {"name": name, "namespace": namespace},
            "resource": {"labelSelector": {"matchLabels": {"apps": "llm"}}},
            "inference": {"replicas": 1, "preset": {"name": "phi-4-mini-instruct"}},
        }

    edits = [
        _setter("inference", "replicas", values=quantities()),
        _setter("inference", "gpuMemoryPerReplica", values=quantities()),
        _setter("inference", "preset", values=json_values()),
        _setter("resource", "instanceType", values=st.one_of(texts(), json_values())),
        _setter("resource", "count", values=quantities()),
        _setter("resource", "labelSelector", values=json_values()),
    ]
    return _mutations(names("h-ws").map(base), edits)


def devices(node_names: tuple[str, ...] = ("h-node-0",)) -> st.SearchStrategy[Obj]:
    """kgpu.io Devices of (hostile) nodes, their checkpoint and topology annotations hostile."""

    def base(name: str) -> Obj:
        gpu = {"type": "gpu", "minor": 0, "uuid": "GPU-0", "health": True}
        return {"apiVersion": "kgpu.io/v1alpha1", "kind": "Device",
                "metadata": {"name": name, "annotations": {}}, "spec": {"devices": [gpu]}}  # fmt: skip

    edits = [
        _keyed("metadata", "annotations", keys=st.sampled_from((*CHECKPOINTS, "kgpu.io/gpu-topology")),
               values=json_texts()),
        _setter("spec", "devices", values=st.one_of(json_values(), st.just([{"minor": -1}] * 3000))),
    ]  # fmt: skip
    return _mutations(st.sampled_from(node_names).map(base), edits)


def any_object() -> st.SearchStrategy[Obj]:
    return st.one_of(pods(), nodes(), queues(), podgroups(), workspaces(), devices())


def batches(
    pod_nodes: tuple[str, ...], sizes: tuple[tuple[int, int], ...]
) -> st.SearchStrategy[list[Obj]]:
    """One list of nodes, pods (bound now and then to one of ``pod_nodes``), Queues,
    PodGroups, and Workspaces or Devices, each kind's count within its (least, most) in
    ``sizes``, in that order."""
    kinds = (
        nodes(),
        pods(nodes=pod_nodes),
        queues(),
        podgroups(),
        st.one_of(workspaces(), devices(pod_nodes)),
    )
    return st.tuples(
        *(
            st.lists(kind, min_size=least, max_size=most)
            for kind, (least, most) in zip(kinds, sizes, strict=True)
        )
    ).map(lambda drawn: [obj for kind in drawn for obj in kind])

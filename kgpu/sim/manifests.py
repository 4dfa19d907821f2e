"""Place a cluster and workload written as Kubernetes manifests (``kgpu simulate manifests``).

Every ``*.yaml`` and ``*.yml`` file of a directory (not its subdirectories, as ``kubectl
apply -f DIR``) is read in name order, each document in file order; a ``List`` (or a
``PodList``/``NodeList`` as ``kubectl get -o yaml`` writes them) stands for its items. Nodes
and Pods go through :mod:`kgpu.kube.objects.node_pod`, the parsing the live scheduler uses;
PriorityClasses give pods their priority as the admission plugin would; kgpu's Queues and
PodGroups (``kgpu.io``), and Volcano's (``scheduling.volcano.sh``), make the run a session
(:mod:`kgpu.sim.manifest_session`); a Volcano Job (``batch.volcano.sh``) stands for the
PodGroup and pods Volcano's job controller makes of it
(:mod:`kgpu.kube.anchors.volcano_job`); other kinds are skipped with a note.

Pods already bound (``spec.nodeName``) are accounted on their node first, as running. The
others are scheduled one at a time by priority, highest first, then in file order. A pod
that fails conversion is pending with the conversion error; it never stops the others.
Results come in that order too: running pods, then each scheduling attempt, then the pods
that could not be read. With Queues or PodGroups, one session places the pods instead, as
``kgpu run`` would: gangs whole or not at all, quotas, and preemption and reclaim, which
evict running pods (``Evicted``) and nominate the pods they make room for (``Nominated``:
they run there once their victims are gone).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from kgpu.config import load_profile
from kgpu.framework.cycle import CycleState
from kgpu.framework.scheduler import Placement, Scheduler
from kgpu.kube.anchors.volcano_job import expand_job, is_volcano_job
from kgpu.kube.objects.node_pod import (
    ConversionError,
    node_from_k8s,
    object_ref,
    pod_from_k8s,
    pod_node_name,
)
from kgpu.kube.snapshot.cache_snapshot import PendingPod
from kgpu.model.node import NodeInfo, NodeName
from kgpu.model.pod import PodSpec
from kgpu.plugins.node.gpu_fit import GpuFit
from kgpu.plugins.node.resource_fit import NodeResourcesFit
from kgpu.plugins.registry import PluginContext, build_scheduler
from kgpu.sim.manifest_results import ManifestRun, PodResult, PodStatus
from kgpu.sim.manifest_session import session_results
from kgpu.sim.yaml_documents import load_documents
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import typical_pods

# Every cluster has these two, whether or not the manifests define them.
BUILTIN_PRIORITY_CLASSES = {
    "system-cluster-critical": 2_000_000_000,
    "system-node-critical": 2_000_001_000,
}


class ManifestError(ValueError):
    """A directory or file that cannot be read at all (no manifests, broken YAML)."""


@dataclass(frozen=True, slots=True)
class Document:
    source: str  # "pods.yaml#2", or "list.yaml#1 items[3]"
    obj: Mapping[str, Any]

    @property
    def kind(self) -> str:
        kind = self.obj.get("kind")
        return kind if isinstance(kind, str) else ""


# ---------------------------------------------------------------------------- reading


def read_documents(directory: Path) -> list[Document]:
    files = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if not files:
        raise ManifestError(f"{directory}: no *.yaml or *.yml files")
    documents: list[Document] = []
    for path in files:
        try:
            loaded = load_documents(path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ManifestError(f"{path}: {exc}") from exc
        for i, obj in enumerate(loaded, start=1):
            if obj is not None:
                documents.extend(_expand(f"{path.name}#{i}", obj))
    return documents


def _expand(source: str, obj: Any) -> Iterator[Document]:
    kind = obj.get("kind") if isinstance(obj, Mapping) else None
    if not (isinstance(kind, str) and kind.endswith("List") and isinstance(obj.get("items"), list)):
        yield Document(source, obj if isinstance(obj, Mapping) else {"kind": None, "value": obj})
        return
    # The API server leaves kind out of the items of a PodList; a plain List keeps it.
    item_kind = kind.removesuffix("List")
    for j, item in enumerate(obj["items"]):
        if isinstance(item, Mapping) and item_kind and item.get("kind") is None:
            item = {**item, "kind": item_kind}
        yield from _expand(f"{source} items[{j}]", item)


# ---------------------------------------------------------------------------- placing


@dataclass(slots=True)
class _Pod:
    order: int
    source: str
    spec: PodSpec
    node_name: str
    obj: Mapping[str, Any]  # as read, its priority filled in


def _priority_classes(
    documents: list[Document], notes: list[str]
) -> tuple[dict[str, int], int | None]:
    classes = dict(BUILTIN_PRIORITY_CLASSES)
    default = None
    for doc in documents:
        if doc.kind != "PriorityClass":
            continue
        meta = doc.obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        value = doc.obj.get("value")
        if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, int):
            notes.append(
                f"{doc.source}: PriorityClass {name} skipped: expected metadata.name and an integer value"
            )
            continue
        classes[name] = value
        if doc.obj.get("globalDefault") is True:
            default = value
    return classes, default


def _with_priority(
    obj: Mapping[str, Any], classes: dict[str, int], default: int | None
) -> Mapping[str, Any]:
    """The pod as the Priority admission plugin leaves it: ``spec.priority`` filled in."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or spec.get("priority") is not None:
        return obj
    name = spec.get("priorityClassName")
    if name is None or name == "":
        return obj if default is None else {**obj, "spec": {**spec, "priority": default}}
    if name not in classes:
        raise ConversionError(
            object_ref("Pod", obj),
            "spec.priorityClassName",
            name,
            "the name of a PriorityClass: " + ", ".join(sorted(classes)),
        )
    return {**obj, "spec": {**spec, "priority": classes[name]}}


def _describe(doc: Document) -> str:
    if not doc.kind:
        return "a document without kind"
    meta = doc.obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = str(meta.get("name", "(no name)"))
    return (
        f"{doc.kind} {meta['namespace']}/{name}" if meta.get("namespace") else f"{doc.kind} {name}"
    )


def _no_room(state: ClusterState, pod: PodSpec, node: int) -> str:
    """Why a bound pod does not fit its node, or "" if it does (resources only, as kubelet)."""
    cycle = CycleState(state, pod)
    nodes = np.array([node], dtype=np.int64)
    for check in (NodeResourcesFit(), GpuFit()):
        verdicts = check.filter(cycle, pod, nodes)
        if verdicts.rejected:
            return verdicts.rejected[0][0].phrase
    return ""


@dataclass(slots=True)
class _Converted:
    nodes: list[NodeInfo] = field(default_factory=list)
    pods: list[_Pod] = field(default_factory=list)
    unreadable: list[PodResult] = field(default_factory=list)  # pending before any attempt
    notes: list[str] = field(default_factory=list)
    groups: list[Mapping[str, Any]] = field(default_factory=list)  # kgpu Queues and PodGroups
    classes: dict[str, int] = field(default_factory=dict)  # PriorityClass name -> value


def _convert(documents: list[Document]) -> _Converted:
    out = _Converted()
    classes, default_priority = _priority_classes(documents, out.notes)
    out.classes = classes
    seen_nodes: set[str] = set()
    seen_pods: dict[str, str] = {}
    for doc in documents:
        if doc.kind == "Node":
            try:
                node = node_from_k8s(doc.obj)
            except ConversionError as exc:
                out.notes.append(f"{doc.source}: node skipped: {exc}")
                continue
            if node.name in seen_nodes:
                out.notes.append(f"{doc.source}: Node {node.name} skipped: defined twice")
                continue
            seen_nodes.add(node.name)
            out.nodes.append(node)
        elif doc.kind == "Pod":
            _add_pod(out, doc, classes, default_priority, seen_pods)
        elif doc.kind in ("Queue", "PodGroup") and str(doc.obj.get("apiVersion")).startswith(
            ("kgpu.io/", "scheduling.volcano.sh/")
        ):
            out.groups.append(doc.obj)
        elif is_volcano_job(doc.obj):
            # What Volcano's job controller makes of it: a PodGroup and the tasks' pods.
            try:
                group, made = expand_job(doc.obj)
            except ConversionError as exc:
                out.notes.append(f"{doc.source}: {_describe(doc)} skipped: {exc}")
                continue
            out.groups.append(group)
            for pod in made:
                name = pod["metadata"]["name"]
                source = f"{doc.source} pod {name}"
                _add_pod(out, Document(source, pod), classes, default_priority, seen_pods)
        elif doc.kind != "PriorityClass":
            out.notes.append(
                # Volcano's kinds are simulated too (above); the note keeps its words, which
                # the examples' decision digests hold (tests/test_decision_digests.py).
                f"{doc.source}: {_describe(doc)} skipped: only Node, Pod, PriorityClass and "
                "kgpu.io Queue and PodGroup are simulated"
            )
    return out


def _add_pod(
    out: _Converted,
    doc: Document,
    classes: dict[str, int],
    default_priority: int | None,
    seen_pods: dict[str, str],
) -> None:
    ref = object_ref("Pod", doc.obj)
    key = ref.removeprefix("Pod ")
    try:
        obj = _with_priority(doc.obj, classes, default_priority)
        spec = pod_from_k8s(obj)
        node_name = pod_node_name(doc.obj)
    except ConversionError as exc:
        out.unreadable.append(PodResult(key, doc.source, PodStatus.PENDING, message=str(exc)))
        return
    if key in seen_pods:
        message = f"{ref} is defined twice; the first is at {seen_pods[key]}"
        out.unreadable.append(PodResult(key, doc.source, PodStatus.PENDING, message=message))
        return
    seen_pods[key] = doc.source
    out.pods.append(_Pod(len(out.pods), doc.source, spec, node_name, obj))


def simulate_manifests(directory: Path, policy: str = "kgpu") -> ManifestRun:
    converted = _convert(read_documents(directory))
    pods = converted.pods
    state = ClusterState(converted.nodes)
    context = PluginContext(typical_pods=typical_pods(p.spec for p in pods))
    profile = load_profile(policy)
    scheduler = build_scheduler(profile, context)
    run = ManifestRun(policy, state, notes=converted.notes)
    running: list[_Pod] = []
    for pod in pods:
        if pod.node_name:
            result = _account_bound(state, scheduler, pod)
            run.results.append(result)
            if result.status == PodStatus.RUNNING:
                running.append(pod)
    waiting = sorted(
        (p for p in pods if not p.node_name), key=lambda p: (-p.spec.priority, p.order)
    )
    if converted.groups:
        run.session = True
        run.results.extend(
            session_results(
                run,
                scheduler,
                profile,
                [PendingPod(p.obj, p.spec) for p in running],
                [(PendingPod(p.obj, p.spec), p.source) for p in waiting],
                converted.groups,
                converted.classes,
            )
        )
    else:
        for pod in waiting:
            run.results.append(_schedule(state, scheduler, pod))
    run.results.extend(converted.unreadable)
    return run


def _account_bound(state: ClusterState, scheduler: Scheduler, pod: _Pod) -> PodResult:
    spec = pod.spec
    node = state.index.get(NodeName(pod.node_name))
    if node is None:
        message = f'spec.nodeName is "{pod.node_name}", a node that is not in the manifests'
        return PodResult(spec.key, pod.source, PodStatus.PENDING, message=message)
    why = _no_room(state, spec, node)
    if why:
        message = f"bound to node {pod.node_name}, which has no room for it: {why}"
        return PodResult(spec.key, pod.source, PodStatus.PENDING, message=message)
    gpus = scheduler.gpu_choice.choose_gpus(state, spec, node) if spec.gpu.count else ()
    state.allocate(spec, node, gpus)
    return PodResult(
        spec.key, pod.source, PodStatus.RUNNING, pod.node_name, tuple(sorted(gpus)), spec.gpu.milli
    )


def _schedule(state: ClusterState, scheduler: Scheduler, pod: _Pod) -> PodResult:
    spec = pod.spec
    outcome = scheduler.schedule(state, spec)
    if not isinstance(outcome, Placement):
        return PodResult(spec.key, pod.source, PodStatus.PENDING, message=outcome.message)
    state.allocate(spec, outcome.node, outcome.gpus)
    name = state.nodes[outcome.node].name
    return PodResult(
        spec.key, pod.source, PodStatus.SCHEDULED, name, tuple(sorted(outcome.gpus)), spec.gpu.milli
    )

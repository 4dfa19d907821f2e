"""Place a cluster and workload written as Kubernetes manifests (``kgpu simulate manifests``).

Every ``*.yaml`` and ``*.yml`` file of a directory (not its subdirectories, as ``kubectl
apply -f DIR``) is read in name order, each document in file order; a ``List`` (or a
``PodList``/``NodeList`` as ``kubectl get -o yaml`` writes them) stands for its items. Nodes
and Pods go through :mod:`kgpu.kube.objects.node_pod`, the parsing the live scheduler uses;
PriorityClasses give pods their priority as the admission plugin would; KAITO's
Workspaces become their workload's pods or a denial (:mod:`kgpu.sim.manifest_workspaces`);
kgpu's Queues and PodGroups (``kgpu.io``), KAI Scheduler's (``scheduling.run.ai``, read as
``kgpu run`` reads them: :mod:`kgpu.kube.anchors.kai`) and Volcano's
(``scheduling.volcano.sh``) make the run a session (:mod:`kgpu.sim.manifest_session`); a
Volcano Job (``batch.volcano.sh``) stands for the PodGroup and pods Volcano's job
controller makes of it (:mod:`kgpu.kube.anchors.volcano_job`); a node's Device
(``kgpu.io``, or Koordinator's ``scheduling.koordinator.sh``; kgpu's wins where a node has
both, as live) gives its GPUs; DRA's DeviceClasses, ResourceSlices, ResourceClaims and
ResourceClaimTemplates (``resource.k8s.io/v1``) give the devices pods claim in
``spec.resourceClaims`` (:mod:`kgpu.sim.manifest_dra`); other kinds are skipped with a note. A placed pod that asked
in Koordinator's names also shows the ``scheduling.koordinator.sh/device-allocated``
annotation ``kgpu run`` would write.

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import numpy as np
import yaml

from kgpu.config import load_profile
from kgpu.dra.allocator import Refused
from kgpu.dra.inventory import DraInventory
from kgpu.framework.cycle import CycleState
from kgpu.framework.scheduler import Placement, Scheduler
from kgpu.kube.anchors.koordinator import (
    device_by_node,
    is_koordinator_device,
    koordinator_notes,
    node_info,
)
from kgpu.kube.anchors.volcano_job import expand_job, is_volcano_job
from kgpu.kube.objects.device_allocation import render_allocation
from kgpu.kube.objects.dra_claim_objects import pod_claims_from_k8s
from kgpu.kube.objects.dra_objects import is_dra
from kgpu.kube.objects.node_pod import (
    ConversionError,
    object_ref,
    pod_from_k8s,
    pod_node_name,
)
from kgpu.kube.snapshot.cache_snapshot import PendingPod
from kgpu.kube.snapshot.session_input import reads
from kgpu.model.dra import PodClaim
from kgpu.model.node import NodeInfo, NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.plugins.node.gpu_fit import GpuFit
from kgpu.plugins.node.resource_fit import NodeResourcesFit
from kgpu.plugins.registry import PluginContext
from kgpu.sim.manifest_dra import dra_inventory, dra_scheduler, render_claims
from kgpu.sim.manifest_results import ManifestRun, PodResult, PodStatus
from kgpu.sim.manifest_session import session_results
from kgpu.sim.manifest_workspaces import is_workspace, workspace_pods
from kgpu.sim.yaml_documents import load_documents
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import typical_pods

_BOUND = (PodStatus.RUNNING, PodStatus.SCHEDULED)

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


def _with_workspace_pods(documents: list[Document], notes: list[str]) -> list[Document]:
    """Each Workspace replaced by its workload's pods (:mod:`kgpu.sim.manifest_workspaces`)."""
    if not any(is_workspace(d.obj) for d in documents):
        return documents
    nodes = [d.obj for d in documents if d.kind == "Node"]
    out: list[Document] = []
    for doc in documents:
        if not is_workspace(doc.obj):
            out.append(doc)
            continue
        pods = workspace_pods(doc.obj, nodes, notes, doc.source)
        out.extend(Document(f"{doc.source} pod[{i}]", p) for i, p in enumerate(pods))
    return out


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
    dra: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)  # source, object
    pod_claims: dict[str, tuple[PodClaim, ...]] = field(default_factory=dict)  # pod key


def _convert(documents: list[Document]) -> _Converted:
    out = _Converted()
    documents = _with_workspace_pods(documents, out.notes)
    classes, default_priority = _priority_classes(documents, out.notes)
    out.classes = classes
    seen_nodes: set[str] = set()
    seen_pods: dict[str, str] = {}
    devices = _devices(documents)
    names = {_name(d.obj) for d in documents if d.kind == "Node"}
    for doc in documents:
        if doc.kind == "Node":
            try:
                node = node_info(doc.obj, devices.get(_name(doc.obj)))
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
        elif is_dra(doc.obj):
            out.dra.append((doc.source, doc.obj))
        elif reads(doc.obj):
            out.groups.append(doc.obj)  # read by the live loop's reader, each as its own
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
        elif doc.kind == "Device" and _is_device(doc.obj):
            if _name(doc.obj) not in names:
                out.notes.append(f"{doc.source}: {_describe(doc)} skipped: no Node of its name")
        elif doc.kind != "PriorityClass":
            out.notes.append(f"{doc.source}: {_describe(doc)} skipped: {_elsewhere(doc.obj)}")
    return out


def _is_device(obj: Mapping[str, Any]) -> bool:
    return str(obj.get("apiVersion")).startswith("kgpu.io/") or is_koordinator_device(obj)


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def _devices(documents: list[Document]) -> dict[str, Mapping[str, Any]]:
    """Each node's Device, as the live scheduler picks it (kgpu's over Koordinator's)."""
    found = [d.obj for d in documents if d.kind == "Device" and _is_device(d.obj)]
    return device_by_node(
        (d for d in found if not is_koordinator_device(d)),
        (d for d in found if is_koordinator_device(d)),
    )


# What the note on a skipped document says: the kinds read here, and where the kinds read
# by another simulation go.
READ_HERE: Final = (
    "simulate manifests reads Nodes, Pods, PriorityClasses, Queues and PodGroups (kgpu.io, "
    "KAI's, Volcano's), Volcano Jobs, Devices (kgpu.io, Koordinator's), KAITO Workspaces and "
    "DRA's DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates"
)
OTHER_SIMULATIONS: Final = {
    ("karpenter.sh", "NodePool"): "kgpu simulate autoscale --nodepool FILE",
    ("kgpu.io", "InstanceType"): "kgpu simulate autoscale --nodepool FILE",
    ("kgpu.io", "Workspace"): "kgpu simulate workspaces",
}


def _elsewhere(obj: Mapping[str, Any]) -> str:
    group = str(obj.get("apiVersion", "")).split("/", 1)[0]
    other = OTHER_SIMULATIONS.get((group, str(obj.get("kind", ""))))
    return f"{READ_HERE}; this kind is read by {other}" if other else READ_HERE


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
        claims = pod_claims_from_k8s(doc.obj)
    except ConversionError as exc:
        out.unreadable.append(PodResult(key, doc.source, PodStatus.PENDING, message=str(exc)))
        return
    if key in seen_pods:
        message = f"{ref} is defined twice; the first is at {seen_pods[key]}"
        out.unreadable.append(PodResult(key, doc.source, PodStatus.PENDING, message=message))
        return
    seen_pods[key] = doc.source
    if claims:
        out.pod_claims[key] = claims
    out.pods.append(_Pod(len(out.pods), doc.source, spec, node_name, obj))


def simulate_manifests(directory: Path, policy: str = "kgpu") -> ManifestRun:
    converted = _convert(read_documents(directory))
    pods = converted.pods
    specs = {str(p.spec.key): p.spec for p in pods}
    state = ClusterState(converted.nodes)
    dra = dra_inventory(converted.dra, converted.pod_claims, converted.notes)
    context = PluginContext(typical_pods=typical_pods(p.spec for p in pods), dra=dra)
    profile = load_profile(policy)
    scheduler = dra_scheduler(profile, context)
    run = ManifestRun(policy, state, notes=converted.notes, dra=dra)
    running: list[_Pod] = []
    for pod in pods:
        if pod.node_name:
            result = _account_bound(state, scheduler, pod, dra)
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
            run.results.append(_schedule(state, scheduler, pod, dra))
    run.results.extend(converted.unreadable)
    run.results = [_with_koordinator_record(state, r, specs) for r in run.results]
    return run


def _with_koordinator_record(
    state: ClusterState, result: PodResult, specs: Mapping[str, PodSpec]
) -> PodResult:
    """``result`` with the Koordinator record ``kgpu run`` would write with its Binding."""
    alloc = state.allocations.get(PodKey(result.pod))
    spec = specs.get(result.pod)
    if alloc is None or spec is None or result.status not in _BOUND:
        return result
    notes = koordinator_notes(spec, render_allocation(state, alloc))
    return replace(result, device_allocated=next(iter(notes.values()), ""))


def _record_claims(
    state: ClusterState, dra: DraInventory | None, pod: PodSpec, node: int
) -> tuple[str, ...] | str:
    """The pod's claims allocated on ``node`` (lines to show), or why they cannot be."""
    if dra is None or str(pod.key) not in dra.pod_claims:
        return ()
    info = state.nodes[node]
    outcome = dra.record(str(pod.key), str(info.name), info.labels)
    if isinstance(outcome, Refused):
        return outcome.reason
    return render_claims(outcome.allocations)


def _account_bound(
    state: ClusterState, scheduler: Scheduler, pod: _Pod, dra: DraInventory | None = None
) -> PodResult:
    spec = pod.spec
    node = state.index.get(NodeName(pod.node_name))
    if node is None:
        message = f'spec.nodeName is "{pod.node_name}", a node that is not in the manifests'
        return PodResult(spec.key, pod.source, PodStatus.PENDING, message=message)
    why = _no_room(state, spec, node)
    if why:
        message = f"bound to node {pod.node_name}, which has no room for it: {why}"
        return PodResult(spec.key, pod.source, PodStatus.PENDING, message=message)
    claims = _record_claims(state, dra, spec, node)
    if isinstance(claims, str):
        message = f"bound to node {pod.node_name}, whose devices cannot serve its claims: {claims}"
        return PodResult(spec.key, pod.source, PodStatus.PENDING, message=message)
    gpus = scheduler.gpu_choice.choose_gpus(state, spec, node) if spec.gpu.count else ()
    state.allocate(spec, node, gpus)
    return PodResult(
        spec.key,
        pod.source,
        PodStatus.RUNNING,
        pod.node_name,
        tuple(sorted(gpus)),
        spec.gpu.milli,
        resource_claims=claims,
    )


def _schedule(
    state: ClusterState, scheduler: Scheduler, pod: _Pod, dra: DraInventory | None = None
) -> PodResult:
    spec = pod.spec
    outcome = scheduler.schedule(state, spec)
    if not isinstance(outcome, Placement):
        return PodResult(spec.key, pod.source, PodStatus.PENDING, message=outcome.message)
    # DraClaims let the node through, and nothing was placed since: this allocates.
    claims = _record_claims(state, dra, spec, outcome.node)
    if isinstance(claims, str):
        return PodResult(spec.key, pod.source, PodStatus.PENDING, message=claims)
    state.allocate(spec, outcome.node, outcome.gpus)
    name = state.nodes[outcome.node].name
    return PodResult(
        spec.key,
        pod.source,
        PodStatus.SCHEDULED,
        name,
        tuple(sorted(outcome.gpus)),
        spec.gpu.milli,
        resource_claims=claims,
    )

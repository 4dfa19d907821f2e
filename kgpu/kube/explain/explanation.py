"""``kgpu explain``: where a pod runs and on which GPUs, or why it is pending.

A pending pod's answer comes in tiers, the first that explains it coming first:

1. request: the pod's own request, or what is malformed in it (the conversion error: the
   field, the value and what is expected); nothing below is checked until it can be read;
2. queue: the pod's queue and its quota and limit (with no Queue object in the cluster,
   queues hold nothing back: every pod is in the default queue, and that is said);
3. nodes: the filters' verdicts over all nodes, aggregated as the FailedScheduling event
   says them ("0/4 nodes are available: 3 insufficient GPU, 1 node(s) had no GPU.");
4. nearest nodes: the nodes that came closest and what each lacks, in numbers
   (see :mod:`kgpu.kube.explain.near_miss`).

The explanation is a pure function of a :class:`ClusterState` and the pod
(:func:`explain_pending`, :func:`explain_object`), so the same code answers for the live
cluster and for ``kgpu simulate manifests DIR --explain POD``. For the live cluster
(:func:`explain_live`: Nodes, Pods and, where served, the DRA objects read with the
official client) the state is the live scheduler's own snapshot
(:func:`explain_from_objects`, :func:`live_dra`), so the answer is what the
scheduler decides, not a second opinion; a pending pod's summary is then the verdict of the
loop's own session over the same Queues and PodGroups, kgpu's and Volcano's
(:mod:`kgpu.kube.explain.session_verdict`), in the words of the event on the pod: a
PodGroup that does not exist or cannot be read, a gang, a queue's quota.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from kgpu.actions.dra_scheduler import dra_scheduler
from kgpu.config import load_profile
from kgpu.dra.inventory import DraInventory
from kgpu.framework.scheduler import Placement, Scheduler
from kgpu.kube.anchors.volcano import VOLCANO_PODGROUPS, VOLCANO_QUEUES
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.printable import printable
from kgpu.kube.api.resource_types import (
    KAI_PODGROUPS,
    KAI_QUEUES,
    PODGROUPS,
    PRIORITY_CLASSES,
    QUEUES,
    Resource,
    uid,
)
from kgpu.kube.explain.near_miss import NearMiss, cpu_text, gpu_share_text, memory_text, near_misses
from kgpu.kube.explain.session_verdict import GroupObjects, session_verdict
from kgpu.kube.objects.device_allocation import ALLOCATION_ANNOTATION, parse
from kgpu.kube.objects.dra_claim_objects import pod_claims_from_k8s
from kgpu.kube.objects.node_pod import ConversionError, object_ref, pod_from_k8s, pod_node_name
from kgpu.kube.objects.record_signature import RecordKey, default_secret, key_of_secret
from kgpu.kube.objects.reservation_pod import RESERVATION_NAMESPACE
from kgpu.kube.snapshot.allocation_rebuild import minors_of
from kgpu.kube.snapshot.cache_snapshot import SnapshotBuilder, is_ready
from kgpu.kube.snapshot.dra_inventory import DRA_RESOURCES, DraReader
from kgpu.kube.snapshot.session_input import QueueObjects
from kgpu.model.node import NodeName
from kgpu.model.pod import PodKey, PodSpec
from kgpu.model.queue import DEFAULT_QUEUE, QueueSpec
from kgpu.model.resources import show_vector
from kgpu.model.units import MILLI_PER_GPU
from kgpu.plugins.registry import PluginContext
from kgpu.state.cluster import ClusterState
from kgpu.state.fragmentation import typical_pods

QUEUES_NOT_ENFORCED: Final = (
    "no Queue exists, so every pod is in the default queue and no quota holds it back"
)
FINISHED_PHASES: Final = ("Succeeded", "Failed")

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Explanation:
    """The answer for one pod; ``lines()`` is what ``kgpu explain`` prints."""

    pod: str  # namespace/name
    summary: str
    request: str = ""
    queue: str = ""
    nodes: str = ""
    near_misses: tuple[NearMiss, ...] = ()
    notes: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        out = [self.summary]
        tiers = (("1. request", self.request), ("2. queue", self.queue), ("3. nodes", self.nodes))
        out += [f"  {name}: {text}" for name, text in tiers if text]
        if self.near_misses:
            out.append("  4. nearest nodes:")
            out += [f"     {miss.line()}" for miss in self.near_misses]
        out += [f"  note: {note}" for note in self.notes]
        # Names, labels and messages are the objects' writers' text: escaped for the terminal.
        return [printable(line) for line in out]


# ---------------------------------------------------------------------------- pure answers


def describe_request(pod: PodSpec) -> str:
    """ "2 GPUs (A100|H100), 4 cpu, 16Gi memory" """
    parts = []
    gpu = pod.gpu
    if gpu.count:
        if gpu.is_shared:
            what = f"{gpu_share_text(gpu.milli)} of one GPU"
        else:
            what = f"{gpu.count} GPU" + ("s" if gpu.count > 1 else "")
        parts.append(what + (f" ({'|'.join(gpu.models)})" if gpu.models else ""))
    parts.append(f"{cpu_text(pod.cpu_milli)} cpu")
    parts.append(f"{memory_text(pod.memory_mib)} memory")
    if pod.node_selector:
        parts.append("node selector " + ",".join(f"{k}={v}" for k, v in pod.node_selector))
    return ", ".join(parts)


def queue_tier(pod: PodSpec, queues: Mapping[str, QueueSpec | str] | None = None) -> str:
    """The pod's queue and its quota. ``queues``: every Queue object by name, read (a
    QueueSpec) or not (why); None or empty when there is none, and queues are not enforced.
    A PodGroup's ``spec.queue`` is not read here: the pod's label is what is shown."""
    if not queues:
        if pod.queue:
            return f'queue "{pod.queue}": {QUEUES_NOT_ENFORCED}'
        return f"no queue label (kgpu.io/queue); {QUEUES_NOT_ENFORCED}"
    name = pod.queue or DEFAULT_QUEUE
    found = queues.get(name)
    if found is None and name == DEFAULT_QUEUE:
        return f'queue "{name}" (no queue label): no quota and no limit'
    if found is None:
        return f'queue "{name}" does not exist: the pod waits until it is created'
    if isinstance(found, str):
        return f'queue "{name}" cannot be used, so the pod waits: {found}'
    deserved, limit = show_vector(dict(found.deserved)), show_vector(dict(found.limit))
    limit = "no limit" if not found.limit else f"limit {limit}"
    return f'queue "{name}": deserved {deserved}, {limit}'


def explain_pending(
    state: ClusterState,
    pod: PodSpec,
    scheduler: Scheduler,
    notes: Iterable[str] = (),
    queues: Mapping[str, QueueSpec | str] | None = None,
) -> Explanation:
    """Why ``pod`` is not placed in ``state`` (which must not hold the pod itself)."""
    outcome = scheduler.schedule(state, pod)
    request, queue, notes = describe_request(pod), queue_tier(pod, queues), tuple(notes)
    if isinstance(outcome, Placement):
        node = state.nodes[outcome.node].name
        gpus = _gpus_text(outcome.gpus, pod.gpu.milli)
        return Explanation(
            pod.key,
            f"Pod {pod.key} is pending, but fits now: kgpu would place it on {node}{gpus}.",
            request,
            queue,
            f"{node} has room and scores best",
            notes=notes,
        )
    misses = tuple(near_misses(state, pod)) if outcome.node_reasons else ()
    return Explanation(
        pod.key,
        f"Pod {pod.key} is pending: no node can take it.",
        request,
        queue,
        outcome.message,
        misses,
        notes,
    )


def explain_unreadable(
    pod: str, error: ConversionError | str, notes: Iterable[str] = ()
) -> Explanation:
    return Explanation(
        pod,
        f"Pod {pod} is pending: kgpu cannot read its request.",
        request=str(error),
        notes=(*notes, "queue and nodes are not checked until the request can be read"),
    )


def explain_bound(
    pod: str, node: str, gpus: tuple[int, ...] | None, gpu_milli: int = MILLI_PER_GPU, why: str = ""
) -> Explanation:
    """A bound pod; ``gpus`` from its device-allocation annotation (None: not recorded, for
    the reason ``why``)."""
    if gpus is None:
        where = f" (GPUs not recorded: {why or f'no {ALLOCATION_ANNOTATION} annotation'})"
    else:
        where = _gpus_text(gpus, gpu_milli) or ", no GPUs"
    return Explanation(pod, f"Pod {pod} runs on node {node}{where}.")


def _gpus_text(gpus: tuple[int, ...], milli: int = MILLI_PER_GPU) -> str:
    """ ", GPUs 0,1", ", GPU 3 (0.5 of it)" or "" """
    if not gpus:
        return ""
    minors = ",".join(str(g) for g in sorted(gpus))
    if len(gpus) > 1:
        return f", GPUs {minors}"
    share = f" ({gpu_share_text(milli)} of it)" if milli < MILLI_PER_GPU else ""
    return f", GPU {minors}{share}"


def explain_object(
    state: ClusterState,
    obj: Obj,
    scheduler: Scheduler,
    scheduler_name: str | None,
    notes: Iterable[str] = (),
    queues: Mapping[str, QueueSpec | str] | None = None,
    record_key: RecordKey | None = None,
) -> Explanation:
    """The answer for a Pod as the API server returns it, against ``state`` (the cluster
    without this pod, unless it is bound). ``scheduler_name``: note when the pod belongs to
    another scheduler (None: every pod is ours, as in a simulation). With ``record_key``
    a bound pod's record is shown only if kgpu wrote it; else where kgpu counts the pod."""
    key = object_ref("Pod", obj).removeprefix("Pod ")
    notes = list(notes)
    status = obj.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    if phase in FINISHED_PHASES:
        return Explanation(key, f"Pod {key} has finished (phase {phase}); it holds nothing.")
    try:
        node = pod_node_name(obj)
        pod = pod_from_k8s(obj)
    except ConversionError as exc:
        return explain_unreadable(key, exc, notes)
    if node:
        untrusted = record_key.problem(obj) if record_key is not None else ""
        if untrusted and pod.gpu.count:
            alloc = state.allocations.get(pod.key)
            index = state.index.get(NodeName(node))
            counted = (
                _gpus_text(minors_of(state, index, alloc.gpus))
                if alloc is not None and index is not None and alloc.node == index
                else ""
            )
            return explain_bound(
                key,
                node,
                None,
                why=f"its records are not trusted, {untrusted}; kgpu counts it "
                f"{'on ' + counted.removeprefix(', ') if counted else 'as the node holding it'}",
            )
        return _explain_bound_object(key, node, obj, pod)
    spec = obj.get("spec")
    name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    if scheduler_name is not None and (name or "default-scheduler") != scheduler_name:
        notes.insert(
            0,
            f'spec.schedulerName is "{name or "default-scheduler"}", not "{scheduler_name}": '
            "kgpu does not place this pod; below is what kgpu would see",
        )
    return explain_pending(state, pod, scheduler, notes, queues)


def _explain_bound_object(key: str, node: str, obj: Obj, pod: PodSpec) -> Explanation:
    if not pod.gpu.count:
        return explain_bound(key, node, ())
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    text = annotations.get(ALLOCATION_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(text, str):
        return explain_bound(key, node, None)
    try:
        found = parse(object_ref("Pod", obj), text)
    except ConversionError as exc:
        return explain_bound(key, node, None, why=str(exc))
    return explain_bound(key, node, found.minors, found.milli)


# ---------------------------------------------------------------------------- the cluster

MAX_NOTES: Final = 5


def explain_from_objects(
    obj: Obj,
    nodes: Sequence[Obj],
    pods: Sequence[Obj],
    scheduler_name: str,
    policy: str = "kgpu",
    queues: Iterable[Obj] = (),
    reservation_namespace: str | None = RESERVATION_NAMESPACE,
    record_key: RecordKey | str | None = None,
    groups: GroupObjects | None = None,
    dra: DraInventory | None = None,
) -> Explanation:
    """The answer for ``obj`` (a Pod) in the cluster of ``nodes`` and ``pods`` (API objects),
    as the live scheduler would see it: the same snapshot (Ready nodes only, bound pods of
    every scheduler accounted, kgpu's on the GPUs their annotations record; see
    :mod:`kgpu.kube.snapshot.cache_snapshot`) and the same profile. A share the snapshot
    refuses to place (``kgpu run`` confines shares: ``reservation_namespace``; one the
    webhook did not give its GPU environment) is answered with why. ``record_key`` checks
    kgpu's records on pods as the scheduler does; a text instead says why it could not be
    read (the records are then shown as written, with that said). ``dra``: the cluster's
    DRA objects (DeviceClasses, ResourceSlices, ResourceClaims and their templates) read
    into an inventory; the pods' ``spec.resourceClaims`` are read here, the DraClaims filter
    joins the profile, and a pod whose claims cannot be allocated is told which claim,
    request, selector, capacity or constraint stopped it, on each node."""
    key = record_key if isinstance(record_key, RecordKey) else None
    builder = SnapshotBuilder(scheduler_name, reservation_namespace, record_key=key)
    snap = builder.build(nodes, pods, {})
    notes = []
    if isinstance(record_key, str):
        notes.append(f"kgpu's records on pods are shown unchecked: {record_key}")
    unready = sum(not is_ready(n) for n in nodes)
    if unready:
        notes.append(f"{unready} of {len(nodes)} nodes are not Ready: kgpu places no pod there")
    problems = [p.message for p in snap.problems]
    notes += problems[:MAX_NOTES]
    if len(problems) > MAX_NOTES:
        notes.append(
            f"… and {len(problems) - MAX_NOTES} more problems the scheduler reports as events"
        )
    target = uid(obj)
    for refused, error in snap.unreadable:
        if target and uid(refused) == target:
            return explain_unreadable(object_ref("Pod", obj).removeprefix("Pod "), error, notes)
    if dra is not None:
        _read_pod_claims(dra, [obj, *pods])
    context = PluginContext(typical_pods=typical_pods(snap.specs), dra=dra)
    profile = load_profile(policy)
    scheduler = dra_scheduler(profile, context)
    ref = object_ref("Pod", obj).removeprefix("Pod ")
    namespace = ref.split("/", 1)[0]
    groups = groups or GroupObjects(queues=queues)
    objects = groups.read()  # as the loop reads them, every group's
    known = queues_for(objects, namespace)
    answer = explain_object(snap.state, obj, scheduler, scheduler_name, notes, known, key)
    if not answer.summary.startswith(f"Pod {ref} is pending"):
        return answer
    # The loop's session over the same objects has the last word (it sees the PodGroup,
    # the gang and the queue the tiers above do not); it runs last, as it binds in the state.
    verdict = session_verdict(snap, PodKey(ref), scheduler, profile, objects, dra)
    fits = "fits now" in answer.summary
    if verdict is None or (verdict.node and fits) or verdict.message == answer.nodes:
        return answer  # the session agrees with the tiers: their words stand
    if verdict.node:
        where = "once the pods evicted for its job are gone" if verdict.nominated else "now"
        summary = f"Pod {ref} is pending; kgpu would place it on {verdict.node} {where}."
    else:
        summary = f"Pod {ref} is pending: {verdict.message}"
    return replace(answer, summary=summary)


def _read_pod_claims(dra: DraInventory, pods: Iterable[Obj]) -> None:
    """Each pod's ``spec.resourceClaims`` into ``dra``, unless ``dra`` has them already (read
    from the live cluster: :func:`live_dra`); a pod whose claims cannot be read is left
    without (its conversion error is what explain says of it)."""
    for pod in pods:
        key = object_ref("Pod", pod).removeprefix("Pod ")
        if dra.asks(key):
            continue
        try:
            claims = pod_claims_from_k8s(pod)
        except ConversionError:
            continue
        if claims:
            dra.set_pod_claims(key, claims)


def _bound(pod: Obj) -> bool:
    spec = pod.get("spec")
    return isinstance(spec, Mapping) and bool(spec.get("nodeName"))


def queues_for(objects: QueueObjects, namespace: str) -> dict[str, QueueSpec | str]:
    """Every Queue by name, as the loop read it: the spec, or why it cannot be used (by the
    pods of ``namespace``: the scheduler refuses them a queue that does not serve it)."""
    specs = {q.name: q for q in objects.queues}
    out: dict[str, QueueSpec | str] = {}
    for name in objects.queue_objs:
        why = objects.invalid.get(name) or objects.fences.refusal(namespace, name)
        found = specs.get(name)
        if why is not None:
            out[name] = why
        elif found is not None:
            out[name] = found
    return out


# ---------------------------------------------------------------------------- live


class ExplainError(RuntimeError):
    """The cluster could not be read: no kubeconfig, no API server, no such pod."""


def explain_live(
    name: str,
    namespace: str,
    kubeconfig: str | None,
    scheduler_name: str,
    policy: str = "kgpu",
) -> Explanation:
    """Read the pod, the Nodes and the unfinished Pods, and explain the pod."""
    obj, nodes, pods = read_cluster(name, namespace, kubeconfig)
    api = _api_client(kubeconfig)
    groups = GroupObjects(
        queues=[o for r in (QUEUES, KAI_QUEUES, VOLCANO_QUEUES) for o in list_of(api, r)],
        podgroups=[
            o for r in (PODGROUPS, KAI_PODGROUPS, VOLCANO_PODGROUPS) for o in list_of(api, r)
        ],
        priority_classes=list_of(api, PRIORITY_CLASSES),
    )
    dra = live_dra([list_of(api, r) for r in DRA_RESOURCES], obj, pods)
    return explain_from_objects(
        obj,
        nodes,
        pods,
        scheduler_name,
        policy,
        record_key=_record_key(api, default_secret(scheduler_name)),
        groups=groups,
        dra=dra,
    )


def live_dra(lists: Sequence[Sequence[Obj]], obj: Obj, pods: Sequence[Obj]) -> DraInventory | None:
    """The DRA objects (``lists``: DeviceClasses, ResourceSlices, ResourceClaims,
    ResourceClaimTemplates) read as ``kgpu run`` reads them
    (:class:`kgpu.kube.snapshot.dra_inventory.DraReader`): the pods' claims by the names
    the claim controller gave them, bound pods' allocated claims counting in their queues.
    None where there is none and the pod names no claim (a server without
    ``resource.k8s.io/v1``, which the scheduler too schedules without DRA)."""
    if not any(lists) and not (obj.get("spec") or {}).get("resourceClaims"):
        return None
    classes, slices, claims, templates = lists
    target = uid(obj)
    waiting = [p for p in pods if not _bound(p) and uid(p) != target]
    bound = [p for p in pods if _bound(p)]
    read = DraReader().read(classes, slices, claims, templates, [obj, *waiting], {}, bound)
    return read.inventory


def _record_key(api: Any, where: str) -> RecordKey | str:
    """The key kgpu's records are signed with, or why it could not be read (a user of
    explain may not read Secrets in kgpu's namespace)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    namespace, name = where.split("/", 1)
    try:
        secret = _json(
            client.CoreV1Api(api).read_namespaced_secret(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
            )
        )
        return key_of_secret(secret, where)
    except ApiException as exc:
        return f"Secret {where} not read ({exc.status} {exc.reason})"
    except (HTTPError, KubeError, ValueError) as exc:
        return f"Secret {where} not read ({exc})"


REQUEST_TIMEOUT_S: Final = 30
PAGE: Final = 500  # list in pages, as kubectl does, so a large cluster is not one response


def read_cluster(
    name: str, namespace: str, kubeconfig: str | None
) -> tuple[Obj, list[Obj], list[Obj]]:
    """The pod, all Nodes and all unfinished Pods, as the API server's JSON."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException
    from urllib3.exceptions import HTTPError

    try:
        core = client.CoreV1Api(_api_client(kubeconfig))
        pod = _json(
            core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
            )
        )
        nodes = _list_all(core.list_node)
        pods = _list_all(
            core.list_pod_for_all_namespaces,
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
        )
    except ApiException as exc:
        if exc.status == 404:
            raise ExplainError(f"pod {namespace}/{name} not found") from exc
        raise ExplainError(f"the API server answered {exc.status} {exc.reason}") from exc
    except ConfigException as exc:
        raise ExplainError(f"no usable kubeconfig or in-cluster config: {exc}") from exc
    except HTTPError as exc:
        raise ExplainError(f"cannot reach the API server: {exc}") from exc
    return pod, nodes, pods


def list_of(api: Any, resource: Resource) -> list[Obj]:
    """Every object of a custom resource, in all namespaces; none where it is not served or
    cannot be read (the scheduler's optional informers read such a resource as empty too;
    without Queues the answer says queues are not enforced, as the scheduler does)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        listed = client.CustomObjectsApi(api).list_cluster_custom_object(
            resource.group, resource.version, resource.plural, _request_timeout=REQUEST_TIMEOUT_S
        )
    except (ApiException, HTTPError):
        return []
    items = listed.get("items") if isinstance(listed, Mapping) else None
    return [i for i in items or [] if isinstance(i, Mapping)]


def _api_client(kubeconfig: str | None) -> Any:
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    loader: Any = config  # its functions carry no annotations; calls on Any are allowed
    if kubeconfig:
        return loader.new_client_from_config(config_file=kubeconfig)
    try:  # $KUBECONFIG or ~/.kube/config, as kubectl
        return loader.new_client_from_config()
    except ConfigException:
        configuration = client.Configuration()
        loader.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)


def _json(response: Any) -> Any:
    return json.loads(response.data)


def _list_all(list_call: Any, **params: Any) -> list[Obj]:
    items: list[Obj] = []
    token = None
    while True:
        page = _json(
            list_call(
                limit=PAGE,
                _continue=token,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_S,
                **params,
            )
        )
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items

"""What the admission webhook decides: AdmissionReview v1 in, AdmissionReview v1 out.

Checked, each with a denial that names the object, the field, the value and what is
expected (the messages of :class:`kgpu.kube.objects.node_pod.ConversionError`):

- Pods whose ``spec.schedulerName`` is ours: everything the scheduler parses (GPU requests
  in every dialect, ``gpu-fraction``, ``gpu-memory``, ``volcano.sh/card.name``, quantities,
  tolerations), through :func:`kgpu.kube.objects.node_pod.pod_from_k8s` itself, so that what the
  webhook admits is exactly what the scheduler can read. Pods of other schedulers are not
  ours to judge and are allowed.
- kgpu.io Queues and PodGroups: everything the scheduler reads of them, through its own
  converters (:func:`kgpu.kube.objects.queue_podgroup.queue_from_k8s`,
  ``podgroup_from_k8s``): quantities, card quotas and requests, a card's ``limit`` not below
  its ``deserved``, ``maxMember`` not below ``minMember``. Volcano's Queues: the
  ``volcano.sh/card.quota`` annotation only (their spec is Volcano's), by the same rule
  (``parse_card_quota``).
- Workspaces, kgpu's and KAITO's (``kaito.sh``, registered with ``--kaito-workspaces``):
  their shape (:func:`kgpu.kube.workspaces.placement_check.read_workspace`) on
  CREATE and UPDATE; on CREATE only, also that some node group of the cluster fits them
  (:func:`kgpu.kube.workspaces.placement_check.validate_workspace`), denied with KAITO's "No
  suitable node group found: ..." and every group's reason. An UPDATE never re-places: the
  group is chosen once, at creation, and raising replicas later only scales the workload.
  The groups and their reasons are shown only to a user who may list Nodes
  (``WorkspaceNodes.may_list_nodes``, :mod:`kgpu.kube.admission.node_access`).
- Devices, given ``devices``: a write by the node agents' account only from the agent pod on
  the Device's node (:mod:`kgpu.kube.admission.device_writer`); other writers are allowed.

- Who may use a queue (:mod:`kgpu.kube.admission.queue_fence`), when the webhook is given
  the Queues: a pod of ours or a PodGroup naming a queue its namespace may not use, and a
  bound pod whose queue label changes, are denied.

Everything else is allowed. An UPDATE is denied only when it breaks an object that was
valid: an object admitted before the webhook was installed may still be relabelled, or have
its finalizers removed so that it can be deleted; such an update is allowed with a warning.
(The install registers pods for CREATE and UPDATE; see :mod:`kgpu.kube.install.webhook_config`.)

When the Nodes cannot be read, a Workspace's CREATE is admitted with a warning, unless
:class:`WorkspaceNodes` says to deny: the default matches the install's default
``failurePolicy: Ignore``, under which the API server admits everything when the webhook
itself is down, so failing closed on a slow Node list alone would buy nothing; and an
admitted Workspace that fits nowhere is not lost, the controller reports it in its
``NodeGroupSelected`` condition and retries. An install with ``failurePolicy: Fail`` asks
that nothing unchecked be admitted, and runs the webhook with ``deny_when_unavailable``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kgpu.framework.group_scheduler import DENIAL
from kgpu.kube.admission.device_writer import DeviceWriters, DeviceWriterUnavailable
from kgpu.kube.admission.node_access import NodeAccess
from kgpu.kube.admission.queue_fence import QueueSource, fence_problem
from kgpu.kube.admission.record_guard import KeySource, env_configmap_problem, record_problem
from kgpu.kube.anchors.kaito import owned_by_kaito
from kgpu.kube.api.resource_types import CRD_GROUP
from kgpu.kube.objects.node_pod import ConversionError, pod_from_k8s, show
from kgpu.kube.objects.queue_podgroup import podgroup_from_k8s, queue_from_k8s
from kgpu.kube.workspaces.node_source import NodeSource, NodesUnavailable
from kgpu.kube.workspaces.placement_check import read_workspace, validate_workspace
from kgpu.model.card import (
    QUOTA_ANNOTATION,
    REQUEST_ANNOTATION,
    CardError,
    parse_card_quota,
    parse_card_request,
)
from kgpu.model.pod import PodSpec

GPU_MEMORY_ANNOTATION: Final = "gpu-memory"
REVIEW_API: Final = "admission.k8s.io/v1"
DENIED_CODE: Final = 422  # what the API server answers for objects its own schema rejects
UNAVAILABLE_CODE: Final = 503  # not the object's fault: the same request may pass later
_WHOLE: Final = re.compile(r"[0-9]+")

Obj = Mapping[str, Any]


class ReviewError(ValueError):
    """A request that is not an AdmissionReview v1 (answered with HTTP 400)."""


@dataclass(frozen=True, slots=True)
class WorkspaceNodes:
    """Where a Workspace's CREATE finds the Nodes to be placed on, and whether to deny it
    (rather than admit it with a warning) when they cannot be read."""

    source: NodeSource
    deny_when_unavailable: bool = False
    # Who sees the node groups in a denial (kgpu.kube.admission.node_access); None: all.
    may_list_nodes: NodeAccess | None = None


def review(
    body: object,
    scheduler_name: str,
    workspaces: WorkspaceNodes | None = None,
    queues: QueueSource | None = None,
    record_key: KeySource = lambda: None,
    devices: DeviceWriters | None = None,
) -> dict[str, Any]:
    """The AdmissionReview answering ``body`` (an AdmissionReview v1 request).

    Without ``workspaces`` a Workspace is checked for its shape only; without ``queues``
    no pod or PodGroup is checked for who may use its queue. ``record_key`` gives the key
    that kgpu's own changes to its records on pods are signed with (None while it cannot be
    read: no change to them is then allowed; :mod:`kgpu.kube.admission.record_guard`);
    without ``devices`` any writer of a Device is allowed
    (:mod:`kgpu.kube.admission.device_writer`)."""
    request = admission_request(body)
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    if _kind(request) == "Device":
        if devices is not None:
            _writer(response, request, devices)
        return answer(response)
    if _kind(request) == "ConfigMap":
        obj = request.get("object")
        if isinstance(obj, Mapping):
            ref = _ref("ConfigMap", named(obj, request))
            taken = env_configmap_problem(request.get("operation"), ref, obj, record_key)
            if taken is not None:
                deny(response, taken)
        return answer(response)
    problem = _problem(request, request.get("object"), scheduler_name)
    obj, old = request.get("object"), request.get("oldObject")
    forged = None
    if _kind(request) == "Pod" and isinstance(obj, Mapping):
        ref = _ref("Pod", named(obj, request))
        forged = record_problem(request.get("operation"), ref, obj, old, record_key)
    if forged is not None:
        deny(response, forged)
    elif problem is not None:
        if request.get("operation") == "UPDATE" and _problem(request, old, scheduler_name):
            response["warnings"] = [problem]
        else:
            deny(response, problem)
    elif queues is not None and isinstance(obj, Mapping):
        before = named(old, request) if isinstance(old, Mapping) else None
        denial, warning = fence_problem(
            _kind(request), named(obj, request), before, scheduler_name, queues
        )
        if denial is not None:
            deny(response, denial)
        elif warning is not None:
            response["warnings"] = [warning]
    if response["allowed"] and (
        _kind(request) == "Workspace"
        and request.get("operation") == "CREATE"
        and isinstance(request.get("object"), Mapping)
        and workspaces is not None
        and not owned_by_kaito(request["object"])
    ):
        user = request.get("userInfo")
        user = user if isinstance(user, Mapping) else {}
        _place(response, named(request["object"], request), workspaces, user)
    return answer(response)


def admission_request(body: object) -> Obj:
    """The request of an AdmissionReview v1, with a uid; ReviewError when it is none."""
    if not isinstance(body, Mapping) or body.get("kind") != "AdmissionReview":
        raise ReviewError("expected a JSON AdmissionReview")
    if body.get("apiVersion") != REVIEW_API:
        raise ReviewError(
            f"AdmissionReview apiVersion is {show(body.get('apiVersion'))}, expected {REVIEW_API}"
        )
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise ReviewError("AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("AdmissionReview request has no uid")
    return request


def answer(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": REVIEW_API, "kind": "AdmissionReview", "response": response}


def deny(response: dict[str, Any], message: str) -> None:
    response["allowed"] = False
    response["status"] = {"code": DENIED_CODE, "message": message}


def _kind(request: Obj) -> object:
    kind = request.get("kind")
    return kind.get("kind") if isinstance(kind, Mapping) else None


def _place(response: dict[str, Any], obj: Obj, workspaces: WorkspaceNodes, user: Obj) -> None:
    """Deny a well-formed Workspace that no node group fits (see the module's docstring
    for when the Nodes cannot be read), naming the groups to ``user`` if they may list
    Nodes."""
    ref = _ref("Workspace", obj)
    try:
        nodes = workspaces.source.nodes()
    except NodesUnavailable as exc:
        if workspaces.deny_when_unavailable:
            response["allowed"] = False
            response["status"] = {
                "code": UNAVAILABLE_CODE,
                "message": f"{ref}: not checked against the cluster's Nodes ({exc}); "
                "denied because the webhook admits nothing it cannot check; try again",
            }
        else:
            response["warnings"] = [
                f"{ref}: not checked against the cluster's Nodes ({exc}); the Workspace "
                "controller will place it or say why not in its NodeGroupSelected condition"
            ]
        return
    allowed, message = validate_workspace(obj, nodes)
    if allowed:
        return
    if workspaces.may_list_nodes is not None and not workspaces.may_list_nodes(user):
        # The groups are the cluster's shape, for those who may list Nodes only.
        message = (
            f"{DENIAL} {ref}: no node group of the cluster fits it; the groups and why each "
            "does not fit are shown only to users who may list nodes"
        )
    deny(response, message)


def _writer(response: dict[str, Any], request: Obj, devices: DeviceWriters) -> None:
    try:
        problem = devices.problem(request)
    except DeviceWriterUnavailable as exc:
        response["allowed"] = False
        response["status"] = {"code": UNAVAILABLE_CODE, "message": f"{exc}; try again"}
        return
    if problem is not None:
        deny(response, problem)


def _problem(request: Obj, obj: object, scheduler_name: str) -> str | None:
    """What is wrong with ``obj`` (the request's object or old object), or None."""
    if not isinstance(obj, Mapping):
        return None  # DELETE and CONNECT carry none; nothing to judge
    kind = _kind(request)
    obj = named(obj, request)
    if kind == "Pod":
        return pod_problem(obj, scheduler_name)
    if kind == "Queue":
        return queue_problem(obj)
    if kind == "PodGroup":
        return podgroup_problem(obj)
    if kind == "Job" and str(obj.get("apiVersion", "")).startswith("batch.volcano.sh/"):
        return card_request_problem("Job", obj)
    if kind == "Workspace":
        return workspace_problem(obj)
    return None


def named(obj: Obj, request: Obj) -> Obj:
    """The object with its name and namespace as the request gives them.

    A CREATE's object may lack ``metadata.namespace`` (the URL carries it), and messages
    should name the object the user sees.
    """
    meta = obj.get("metadata")
    meta = dict(meta) if isinstance(meta, Mapping) else {}
    if not meta.get("namespace") and isinstance(request.get("namespace"), str):
        meta["namespace"] = request["namespace"]
    if not meta.get("name"):
        name = request.get("name")
        generate = meta.get("generateName")
        meta["name"] = name or (f"{generate}*" if isinstance(generate, str) else "(no name)")
    return {**obj, "metadata": meta}


def _ref(kind: str, obj: Obj) -> str:
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    ns = meta.get("namespace")
    return f"{kind} {ns}/{meta.get('name')}" if ns else f"{kind} {meta.get('name')}"


# ---------------------------------------------------------------------------- kinds


def pod_problem(obj: Obj, scheduler_name: str) -> str | None:
    spec = obj.get("spec")
    if not isinstance(spec, Mapping) or spec.get("schedulerName") != scheduler_name:
        return None
    read = read_pod(obj)
    return read if isinstance(read, str) else None


def read_pod(obj: Obj) -> PodSpec | str:
    """A pod of ours as the scheduler reads it, or the message that denies it."""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    memory = annotations.get(GPU_MEMORY_ANNOTATION) if isinstance(annotations, Mapping) else None
    # The scheduler refuses gpu-memory as not supported yet; a malformed value deserves the
    # more useful message of what it should look like.
    # (Above 0 tested on the digits: Python will not turn 4,300 of them into an integer.)
    if isinstance(memory, str) and not (_WHOLE.fullmatch(memory) and memory.strip("0")):
        return str(
            ConversionError(
                _ref("Pod", obj),
                f"annotation {GPU_MEMORY_ANNOTATION}",
                memory,
                "a whole number of MiB, at least 1",
            )
        )
    try:
        return pod_from_k8s(obj)
    except ConversionError as exc:
        return str(exc)


def queue_problem(obj: Obj) -> str | None:
    """A kgpu.io Queue is judged by the converter the scheduler reads it with, so what is
    admitted is what it can use; of Volcano's Queues, whose spec is Volcano's, only the card
    quota annotation (the same rule, :func:`kgpu.model.card.parse_card_quota`)."""
    if _is_kgpu(obj):
        return _converted(queue_from_k8s, obj)
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    text = annotations.get(QUOTA_ANNOTATION) if isinstance(annotations, Mapping) else None
    if text is None:
        return None
    try:
        parse_card_quota(str(text))
    except CardError as exc:
        return str(ConversionError(_ref("Queue", obj), exc.field, exc.value, exc.expected))
    return None


def podgroup_problem(obj: Obj) -> str | None:
    """A kgpu.io PodGroup, judged by the scheduler's converter (gang sizes, card request);
    of Volcano's, whose spec is Volcano's, only the card request."""
    if _is_kgpu(obj):
        return _converted(podgroup_from_k8s, obj)
    return card_request_problem("PodGroup", obj)


def card_request_problem(kind: str, obj: Obj) -> str | None:
    """A Volcano Job's or PodGroup's ``volcano.sh/card.request``, read by the rule the
    scheduler reads it with (:func:`kgpu.model.card.parse_card_request`): the capacity-card
    seed's fast feedback, at creation rather than at enqueue. Volcano's Job controller
    copies a Job's annotations onto its PodGroup, so a bad one is refused on the Job."""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    text = annotations.get(REQUEST_ANNOTATION) if isinstance(annotations, Mapping) else None
    if text is None:
        return None
    try:
        parse_card_request(str(text))
    except CardError as exc:
        return str(ConversionError(_ref(kind, obj), exc.field, exc.value, exc.expected))
    return None


def _is_kgpu(obj: Obj) -> bool:
    return str(obj.get("apiVersion", "")).startswith(f"{CRD_GROUP}/")


def _converted(convert: Callable[[Obj], object], obj: Obj) -> str | None:
    try:
        convert(obj)
    except ConversionError as exc:
        return str(exc)
    return None


def workspace_problem(obj: Obj) -> str | None:
    """A Workspace's shape: selector, replicas, preset or GPU memory (not its placement).
    KAITO's Workspaces are read by its mapping (:mod:`kgpu.kube.anchors.kaito`), except
    those KAITO's own controller has taken, which are KAITO's to judge."""
    if owned_by_kaito(obj):
        return None
    try:
        read_workspace(obj)
    except ConversionError as exc:
        return str(exc)
    return None

"""KAITO's ``kaito.sh/v1beta1`` Workspace into kgpu's :class:`WorkspaceSpec`, and kgpu's
outcome back into the status where KAITO keeps it.

Read (the fields of KAITO's ``api/v1beta1/workspace_types.go``, as of the design of
seed 000, when ``inference.replicas`` was the replica count):

- ``metadata.name``, ``metadata.namespace``: the workspace's key.
- ``resource.labelSelector``: the nodes it may use (``matchLabels``, ``matchExpressions``).
- ``resource.instanceType``: node auto-provisioning (NAP) when set, BYO when empty.
- ``resource.count`` (deprecated by KAITO), ``resource.preferredNodes`` (deprecated):
  checked for their shape only; kgpu derives the nodes a replica needs from its memory.
- ``inference.replicas``: whole number, 0 or absent meaning 1 (KAITO's default).
- ``inference.preset.name``: a preset kgpu knows the GPU memory of.
- ``inference.preset.accessMode``: ``public`` or ``private``, as KAITO's enum.

Refused, because kgpu would otherwise run something other than what was asked (each with
the field and why): ``tuning``, ``inference.template``, ``inference.config``,
``inference.adapters``, ``inference.preset.presetOptions`` (images, pull secrets, the
model access secret): kgpu serves a preset with its own vLLM image only.

Status (:func:`kaito_status`): ``workerNodes``, ``conditions`` of KAITO's types
``ResourceReady``, ``InferenceReady`` and ``WorkspaceSucceeded`` (with KAITO's reasons
where KAITO has one for the case), and ``inference`` (``replicas`` ready, the pods'
``selector``, ``perReplicaNodeCount``, ``targetNodeCount``). kgpu writes no
``NodeClaimReady``: it creates no NodeClaims.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from kgpu.kube.objects.conditions import condition, merge_conditions
from kgpu.kube.objects.fields import ConversionError, Fields
from kgpu.kube.objects.label_selector import label_selector_from_k8s
from kgpu.kube.objects.node_pod import object_ref
from kgpu.model.presets import PRESETS, find_preset
from kgpu.model.workspace import WorkspaceKey, WorkspaceSpec

Obj = dict[str, Any]

KAITO_GROUP: Final = "kaito.sh"
KAITO_VERSION: Final = "v1beta1"
# KAITO's controller puts it on every Workspace it reconciles (pkg/utils/consts): such a
# Workspace is KAITO's, and kgpu leaves it alone.
KAITO_FINALIZER: Final = "workspace.finalizer.kaito.sh"

RESOURCE_READY: Final = "ResourceReady"
INFERENCE_READY: Final = "InferenceReady"
WORKSPACE_SUCCEEDED: Final = "WorkspaceSucceeded"

_ACCESS_MODES: Final = ("public", "private")
_NOT_RUN: Final = "absent: kgpu serves a preset with its own image only (docs/MIGRATING.md)"


def is_kaito(obj: Mapping[str, Any]) -> bool:
    """Whether ``obj`` is KAITO's Workspace (any version of the kaito.sh group)."""
    return str(obj.get("apiVersion", "")).startswith(f"{KAITO_GROUP}/")


def owned_by_kaito(obj: Mapping[str, Any]) -> bool:
    """Whether KAITO's own controller has taken the Workspace (its finalizer is on it)."""
    meta = obj.get("metadata")
    finalizers = meta.get("finalizers") if isinstance(meta, Mapping) else None
    return isinstance(finalizers, list) and KAITO_FINALIZER in finalizers


def workspace_from_kaito(obj: Mapping[str, Any]) -> WorkspaceSpec:
    """KAITO's Workspace as kgpu's model; ConversionError naming the field otherwise."""
    ref = object_ref("Workspace", obj)
    fields = Fields(ref)
    name, namespace = fields.named(obj)
    if obj.get("tuning") is not None:
        expected = "absent: kgpu runs inference Workspaces only (docs/MIGRATING.md)"
        raise ConversionError(ref, "tuning", obj["tuning"], expected)
    resource = fields.mapping(obj, "resource", "resource")
    _count(ref, resource.get("count"))
    preferred = resource.get("preferredNodes")
    if preferred is not None and (
        not isinstance(preferred, list) or not all(isinstance(n, str) and n for n in preferred)
    ):
        raise ConversionError(ref, "resource.preferredNodes", preferred, "a list of node names")
    inference = obj.get("inference")
    if not isinstance(inference, Mapping):
        expected = "a mapping with preset.name (kgpu runs inference Workspaces only)"
        raise ConversionError(ref, "inference", inference, expected)
    for field in ("template", "config", "adapters"):
        value = inference.get(field)
        if value not in (None, "", []):
            raise ConversionError(ref, f"inference.{field}", value, _NOT_RUN)
    replicas = inference.get("replicas", 0)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise ConversionError(
            ref, "inference.replicas", replicas, "a whole number, at least 0 (0 means 1)"
        )
    preset = fields.mapping(inference, "preset", "inference.preset")
    preset_name = fields.string(preset, "name", "inference.preset.name")
    known = find_preset(preset_name) if preset_name else None
    if known is None:
        raise ConversionError(
            ref, "inference.preset.name", preset.get("name"), f"one of {', '.join(sorted(PRESETS))}"
        )
    mode = preset.get("accessMode")
    if mode is not None and mode not in _ACCESS_MODES:
        raise ConversionError(ref, "inference.preset.accessMode", mode, "public or private")
    options = preset.get("presetOptions")
    if options not in (None, {}):
        raise ConversionError(ref, "inference.preset.presetOptions", options, _NOT_RUN)
    return WorkspaceSpec(
        key=WorkspaceKey(f"{namespace}/{name}"),
        selector=label_selector_from_k8s(ref, resource, "labelSelector", "resource.labelSelector"),
        replicas=replicas or 1,
        gpu_memory_mib=known.gpu_memory_mib,
        preset=known.name,
        model_id=known.model_id,
        instance_type=fields.string(resource, "instanceType", "resource.instanceType"),
    )


def _count(ref: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConversionError(ref, "resource.count", value, "a whole number, at least 1")


# ---------------------------------------------------------------------------- status


@dataclass(frozen=True, slots=True)
class KaitoOutcome:
    """What one pass of kgpu's controller found, in the terms KAITO's status needs.

    ``failed``: why the workspace cannot run (malformed, or no node group fits), or "".
    ``resources_ok``/``resources_reason``/``resources_message``: the workload applied (False
    with ``NodesToProvision`` under NAP while nodes are missing).
    """

    generation: int
    now: str
    failed: str = ""
    resources_ok: bool = False
    resources_reason: str = ""
    resources_message: str = ""
    ready: int = 0
    replicas: int = 0
    nodes_per_replica: int = 0
    worker_nodes: tuple[str, ...] = ()
    selector: str = ""


def kaito_status(old_conditions: Sequence[Mapping[str, Any]], outcome: KaitoOutcome) -> Obj:
    """The ``status`` of KAITO's Workspace after a pass of kgpu's controller."""
    o = outcome

    def cond(kind: str, ok: bool, reason: str, message: str) -> Obj:
        return condition(kind, ok, reason, message, o.generation, o.now)

    if o.failed:
        conditions = [
            cond(RESOURCE_READY, False, "workspaceResourceStatusFailed", o.failed),
            cond(INFERENCE_READY, False, "WorkspaceInferenceStatusFailed", o.failed),
            cond(WORKSPACE_SUCCEEDED, False, "workspaceFailed", o.failed),
        ]
        return {"conditions": merge_conditions(old_conditions, conditions)}
    serving = o.ready >= o.replicas
    ready = f"{o.ready}/{o.replicas} replica(s) ready"
    conditions = [
        cond(
            RESOURCE_READY,
            o.resources_ok,
            "workspaceResourceStatusSuccess" if o.resources_ok else o.resources_reason,
            o.resources_message,
        ),
        cond(
            INFERENCE_READY,
            serving,
            "WorkspaceInferenceStatusSuccess" if serving else "ReplicasNotReady",
            ready,
        ),
        cond(
            WORKSPACE_SUCCEEDED,
            serving,
            "workspaceSucceeded" if serving else "workspacePending",
            "workspace succeeds" if serving else ready,
        ),
    ]
    return {
        "workerNodes": list(o.worker_nodes),
        "conditions": merge_conditions(old_conditions, conditions),
        "inference": {
            "replicas": o.ready,
            "selector": o.selector,
            "perReplicaNodeCount": o.nodes_per_replica,
            "targetNodeCount": o.nodes_per_replica * o.replicas,
        },
    }

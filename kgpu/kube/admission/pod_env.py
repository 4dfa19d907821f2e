"""The mutating admission webhook: which GPUs a pod's containers see (``POST /mutate``).

At a pod's CREATE, for a pod whose ``spec.schedulerName`` is ours, every container and
init container gets its GPU environment from kgpu, whatever the pod or its image says
(see :mod:`kgpu.kube.objects.gpu_env` for the contract with ``kgpu run``):

- a pod whose GPUs kgpu places but the kubelet does not hand out (``gpu-fraction``,
  ``gpu-memory``, ``kubernetes.io/gpu*``): its annotation ``kgpu.io/gpu-env-configmap``
  names a fresh ConfigMap, and ``NVIDIA_VISIBLE_DEVICES`` comes from that ConfigMap's key of
  the same name, not optional, so the kubelet waits for ``kgpu run`` to write it before it
  starts the container; the MPS limits come from it too, optional (only an MPS node's
  ConfigMap has them);
- a pod that asks the device plugin (``nvidia.com/*``): the plugin's ``Allocate`` sets
  ``NVIDIA_VISIBLE_DEVICES``, but a container's own env entry would override it, so the
  pod's entries for the controlled names are dropped;
- a pod with no GPU: ``NVIDIA_VISIBLE_DEVICES=void``, so NVIDIA's container toolkit gives
  it no GPU even when its image says ``all``.

``envFrom`` cannot be overridden key by key, but a container's ``env`` wins over its
``envFrom`` (and over the image's ``ENV``), so the explicit ``env`` entries are enough.

A pod of ours that the scheduler cannot read is denied with the validating webhook's own
message (:func:`kgpu.kube.admission.review.read_pod`): its environment cannot be decided,
and the denial is the one the validating webhook would give anyway. Pods of other
schedulers, and every other operation, are allowed unchanged.

The answer is one JSONPatch operation per container (its whole ``env`` list, written anew)
plus one for the annotation: linear in the pod, whose size the server bounds
(:data:`kgpu.kube.admission.webhook_server.MAX_BODY`).
"""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Final

from kgpu.kube.admission.review import admission_request, answer, deny, named, read_pod
from kgpu.kube.objects.fields import Fields
from kgpu.kube.objects.gpu_env import (
    CONTROLLED,
    ENV_CONFIGMAP_ANNOTATION,
    ENV_CONFIGMAP_PREFIX,
    asks_device_plugin,
    webhook_env,
)
from kgpu.kube.objects.node_pod import ConversionError, object_ref
from kgpu.model.gpu import GpuRequest

CONTAINER_GROUPS: Final = ("containers", "initContainers")
# 12 hex digits: a collision between two pods of one namespace is left to chance (2**-48 per
# pair); the ConfigMap's name is never reused, as the pod's UID is not known at CREATE.
NAME_BYTES: Final = 6

Obj = Mapping[str, Any]


def mutate(
    body: object, scheduler_name: str, token: Callable[[int], str] = secrets.token_hex
) -> dict[str, Any]:
    """The AdmissionReview answering ``body``: allowed, with a JSONPatch for pods of ours.

    ``token`` makes the random part of the ConfigMap's name (tests pass their own)."""
    request = admission_request(body)
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    obj = request.get("object")
    kind = request.get("kind")
    if (
        request.get("operation") != "CREATE"
        or not isinstance(kind, Mapping)
        or kind.get("kind") != "Pod"
        or not isinstance(obj, Mapping)
    ):
        return answer(response)
    pod = named(obj, request)
    spec = pod.get("spec")
    if not isinstance(spec, Mapping) or spec.get("schedulerName") != scheduler_name:
        return answer(response)
    read = read_pod(pod)
    if not isinstance(read, str) and not isinstance(obj.get("metadata"), Mapping):
        # Never from an API server; the annotation would have nowhere to go.
        read = str(ConversionError(object_ref("Pod", pod), "metadata", None, "an object"))
    if isinstance(read, str):
        deny(response, read)
        return answer(response)
    try:
        patch = env_patch(pod, read.gpu, token)
    except ConversionError as exc:
        deny(response, str(exc))
        return answer(response)
    response["patchType"] = "JSONPatch"
    response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return answer(response)


def env_patch(
    pod: Obj, gpu: GpuRequest, token: Callable[[int], str] = secrets.token_hex
) -> list[dict[str, Any]]:
    """The JSONPatch that gives a pod of ours, which asks ``gpu``, its GPU environment.

    ConversionError when a container's ``env`` is not a list of objects."""
    ops: list[dict[str, Any]] = []
    plugin = asks_device_plugin(pod)
    share = gpu.gpu_slots > 0 and not plugin
    name = ""
    if share:
        name = ENV_CONFIGMAP_PREFIX + token(NAME_BYTES)
        ops.append(_annotation_op(pod, ENV_CONFIGMAP_ANNOTATION, name))
    # Device-plugin pods get none: the plugin's Allocate sets them (MIG instances too).
    ours = webhook_env(share, gpu.count == 0 and not plugin, name)
    fields = Fields(object_ref("Pod", pod))
    spec = pod["spec"]
    for group in CONTAINER_GROUPS:
        for i, container in enumerate(fields.items(spec, group, f"spec.{group}")):
            env = fields.items(container, "env", f"spec.{group}[{i}].env")
            kept = [entry for entry in env if entry.get("name") not in CONTROLLED]
            if len(kept) == len(env) and not ours:
                continue
            ops.append({"op": "add", "path": f"/spec/{group}/{i}/env", "value": kept + ours})
    return ops


def _annotation_op(pod: Obj, key: str, value: str) -> dict[str, Any]:
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if isinstance(annotations, Mapping):
        return {"op": "add", "path": f"/metadata/annotations/{_pointer(key)}", "value": value}
    # ``add`` of a member that exists replaces it: a user's own (or a null) value goes too.
    return {"op": "add", "path": "/metadata/annotations", "value": {key: value}}


def _pointer(token: str) -> str:
    """One reference token of a JSON pointer (RFC 6901)."""
    return token.replace("~", "~0").replace("/", "~1")

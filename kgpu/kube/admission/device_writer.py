"""One node's agent may write its own node's Device only.

Every agent pod runs as one ServiceAccount, and RBAC cannot tell one node's Device from
another's (their names are the nodes', known only when the nodes join, and ``create``
takes no ``resourceNames`` at all). What tells them apart is the token: the install mounts
each agent pod a projected service account token (TokenRequest, GA in Kubernetes 1.20),
which the API server binds to the pod, and whose user info carries the pod's name and uid
as the extras ``authentication.kubernetes.io/pod-name`` and ``.../pod-uid`` in every
AdmissionReview. The webhook reads that pod and allows a write of Device ``X`` (create,
update, delete, or its status) only when the pod is the token's (same uid, not being
deleted) and runs on node ``X``.

A write by the agent's account with no pod in its token (a legacy secret token, or one
made by hand with ``kubectl create token`` without ``--bound-object-*``) is denied: nothing
says which node it speaks for. Writes by anyone else are not this check's business (RBAC
already keeps Devices to the agent and cluster administrators).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kgpu.kube.api.errors import KubeError, NotFound
from kgpu.kube.api.printable import printable

POD_NAME_EXTRA: Final = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA: Final = "authentication.kubernetes.io/pod-uid"
SA_PREFIX: Final = "system:serviceaccount:"

# (namespace, name) -> the pod, None when there is none; KubeError when it cannot be read.
PodLookup = Callable[[str, str], Mapping[str, Any] | None]


class DeviceWriterUnavailable(Exception):
    """The agent's pod could not be read: not the request's fault, it may pass later."""


@dataclass(frozen=True, slots=True)
class DeviceWriters:
    """The agent's ServiceAccount (``namespace``, ``name``) and how to read its pods."""

    namespace: str
    name: str
    pods: PodLookup

    @property
    def username(self) -> str:
        return f"{SA_PREFIX}{self.namespace}:{self.name}"

    def problem(self, request: Mapping[str, Any]) -> str | None:
        """Why this write of a Device is denied, or None. DeviceWriterUnavailable when the
        agent's pod cannot be read."""
        user = request.get("userInfo")
        user = user if isinstance(user, Mapping) else {}
        if user.get("username") != self.username:
            return None
        device = _text(request.get("name")) or _object_name(request)
        what = f"Device {printable(device)}: {request.get('operation', 'write')} by {self.username}"
        extra = user.get("extra")
        extra = extra if isinstance(extra, Mapping) else {}
        pod_name, pod_uid = _first(extra.get(POD_NAME_EXTRA)), _first(extra.get(POD_UID_EXTRA))
        if not pod_name or not pod_uid:
            return (
                f"{what}: its token is bound to no pod ({POD_NAME_EXTRA} missing), so it says "
                "for no node; the agent must run with the install's projected token"
            )
        try:
            pod = self.pods(self.namespace, pod_name)
        except KubeError as exc:
            where = f"{self.namespace}/{printable(pod_name)}"
            raise DeviceWriterUnavailable(f"cannot read pod {where}: {exc}") from exc
        meta = pod.get("metadata") if pod is not None else None
        meta = meta if isinstance(meta, Mapping) else {}
        ref = f"pod {self.namespace}/{printable(pod_name)}"
        if pod is None or meta.get("uid") != pod_uid or meta.get("deletionTimestamp"):
            return f"{what}: the token's {ref} (uid {printable(pod_uid)}) no longer runs"
        spec = pod.get("spec")
        node = _text(spec.get("nodeName")) if isinstance(spec, Mapping) else ""
        if not node or node != device:
            return (
                f"{what}: {ref} runs on node {printable(node) or '(none)'}, and an agent may "
                f"write only the Device of its own node"
            )
        return None


def pod_reader(get: Callable[[str, str], Mapping[str, Any]]) -> PodLookup:
    """A PodLookup over ``get(namespace, name)`` that raises NotFound for a missing pod."""

    def lookup(namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return get(namespace, name)
        except NotFound:
            return None

    return lookup


def _object_name(request: Mapping[str, Any]) -> str:
    for key in ("object", "oldObject"):
        obj = request.get(key)
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if isinstance(meta, Mapping) and _text(meta.get("name")):
            return _text(meta.get("name"))
    return ""


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _first(value: object) -> str:
    """An extra's value: a list of strings in userInfo."""
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]
    return value if isinstance(value, str) else ""

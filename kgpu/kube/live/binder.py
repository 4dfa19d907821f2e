"""Carry out one bind decided by a session: one Binding that also carries the annotations.

The Binding's own ``metadata.annotations`` hold ``kgpu.io/device-allocation`` and
``kgpu.io/visible-devices``; the API server copies them onto the pod in the same write that
sets ``spec.nodeName`` (``setPodHostAndAnnotations`` in kube-apiserver's pod storage). So
a pod is never seen bound without its allocation, nor annotated without being bound, and
each bind costs the API server one write instead of an annotation patch and a Binding.

The decision is only right for the very pod version the session saw unbound: a pod deleted
and created again under the same name (a StatefulSet's, say, with a new request) must not
get it. The Binding names that version, ``metadata.uid`` and ``metadata.resourceVersion``,
and servers from v1.23 on refuse it with 409 if the pod is another. v1.20 ignores both
(checked against v1.20.2, and in its source) and binds whatever pod has the name; there the
binder first reads the pod (a consistent GET, no write) and binds only if uid and
resourceVersion are still the ones the session saw. Which kind of server it is, the client
learns once by dry runs (:meth:`KubeClient.binding_checks_preconditions`).

On v1.20 that check leaves the same gap the annotation patch with preconditions that this
replaces left: a pod deleted and created again between the read and the Binding, a few
milliseconds, is bound (and now carries the allocation decided for its predecessor, where
before it carried none). Only a server that checks the Binding's preconditions closes it.

What each outcome means for the reservation the session made:

==========  ======================================  ======================================
outcome     when                                    the reservation
==========  ======================================  ======================================
BOUND       the Binding was created                 kept until the cache shows the pod
GONE        404, or the read found another pod      released
            (another uid) under the name
REJECTED    409 (bound meanwhile, or a changed      released; the pod is retried after a
            pod: resourceVersion), 5xx, 429, 4xx,   back-off
            or the read failed (nothing is bound
            until the Binding exists)
UNCERTAIN   the Binding call timed out or lost its  kept until the cache shows the pod
            connection: it may have been applied    bound, or for a grace period if it
                                                    stays unbound
==========  ======================================  ======================================
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError, NotFound, Timeout, Unavailable
from kgpu.kube.api.resource_types import PODS, meta, resource_version, uid


class BindResult(StrEnum):
    BOUND = "bound"
    GONE = "gone"
    REJECTED = "rejected"
    UNCERTAIN = "uncertain"


@dataclass(frozen=True, slots=True)
class BindOutcome:
    result: BindResult
    message: str = ""
    check_s: float = 0.0  # the read before the Binding, where the server ignores its checks
    bind_s: float = 0.0  # the Binding; 0 when it was not sent


def bind_pod(
    client: KubeClient, pod: Mapping[str, Any], node: str, annotations: Mapping[str, str]
) -> BindOutcome:
    """Bind ``pod`` (as the session saw it) to ``node``, with ``annotations``."""
    m = meta(pod)
    namespace, name = str(m.get("namespace") or "default"), str(m.get("name"))
    pod_uid, version = uid(pod), resource_version(pod)
    started = time.perf_counter()
    if client.binding_checks_preconditions(namespace, name, pod_uid, version):
        started = checked = time.perf_counter()  # no check step (but the first dry runs)
    else:
        refused = _still_the_same(client, namespace, name, pod_uid, version)
        if refused is not None:
            return BindOutcome(refused[0], refused[1], time.perf_counter() - started)
        checked = time.perf_counter()
    try:
        client.bind(
            namespace,
            name,
            node,
            uid=pod_uid,
            resource_version=version,
            annotations=annotations,
        )
    except NotFound as exc:
        return _outcome(BindResult.GONE, str(exc), started, checked)
    except (Timeout, Unavailable) as exc:
        if exc.status:  # the server answered (429, 5xx): it did not bind
            return _outcome(BindResult.REJECTED, f"Binding: {exc}", started, checked)
        return _outcome(BindResult.UNCERTAIN, f"Binding: {exc}", started, checked)
    except KubeError as exc:
        return _outcome(BindResult.REJECTED, f"Binding: {exc}", started, checked)
    return _outcome(BindResult.BOUND, "", started, checked)


def _still_the_same(
    client: KubeClient, namespace: str, name: str, pod_uid: str, version: str
) -> tuple[BindResult, str] | None:
    """None if the pod under ``name`` is still the version the session saw; else the
    outcome, and why. Stands in for the Binding's preconditions where the server ignores
    them: the same check the server would make, a round trip earlier."""
    try:
        current = client.get(PODS, name, namespace)
    except NotFound as exc:
        return BindResult.GONE, str(exc)
    except KubeError as exc:
        return BindResult.REJECTED, f"reading the pod before its Binding: {exc}"
    if uid(current) != pod_uid:
        return BindResult.GONE, (
            f"pod {namespace}/{name} was deleted and created again (uid {uid(current)}, "
            f"expected {pod_uid}): not bound"
        )
    if resource_version(current) != version:
        return BindResult.REJECTED, (
            f"pod {namespace}/{name} changed since it was scheduled (resourceVersion "
            f"{resource_version(current)}, expected {version}): not bound"
        )
    return None


def _outcome(result: BindResult, message: str, started: float, checked: float) -> BindOutcome:
    return BindOutcome(result, message, checked - started, time.perf_counter() - checked)

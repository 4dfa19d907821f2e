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
learns once by dry runs (:meth:`KubeClient.learn_binding_preconditions`).

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from kgpu.kube.api.client import Answer, KubeClient
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
    client: KubeClient,
    pod: Mapping[str, Any],
    node: str,
    annotations: Mapping[str, str],
    then: Callable[[BindOutcome], None],
) -> None:
    """Bind ``pod`` (as the session saw it) to ``node``, with ``annotations``; the calls are
    started and not waited for (:meth:`KubeClient.request_async`): ``then`` gets the
    outcome where their answers are handled, and must not block."""
    m = meta(pod)
    namespace, name = str(m.get("namespace") or "default"), str(m.get("name"))
    pod_uid, version = uid(pod), resource_version(pod)
    started = time.perf_counter()

    def send(began: float, checked: float) -> None:
        client.bind_async(
            namespace,
            name,
            node,
            lambda answer: then(_outcome(answer, began, checked)),
            uid=pod_uid,
            resource_version=version,
            annotations=annotations,
        )

    def read(current: Answer) -> None:
        refused = _still_the_same(current, namespace, name, pod_uid, version)
        if refused is not None:
            then(BindOutcome(refused[0], refused[1], time.perf_counter() - started))
        else:
            send(started, time.perf_counter())

    def learned(checks: bool) -> None:
        if checks:
            begin = time.perf_counter()  # no check step (but the first dry runs)
            send(begin, begin)
        else:
            client.request_async("GET", PODS.path(namespace, name), read)

    client.learn_binding_preconditions(namespace, name, pod_uid, version, learned)


def _still_the_same(
    current: Answer, namespace: str, name: str, pod_uid: str, version: str
) -> tuple[BindResult, str] | None:
    """None if the pod read under ``name`` (``current``) is still the version the session
    saw; else the outcome, and why. Stands in for the Binding's preconditions where the
    server ignores them: the same check the server would make, a round trip earlier."""
    if isinstance(current, NotFound):
        return BindResult.GONE, str(current)
    if isinstance(current, KubeError):
        return BindResult.REJECTED, f"reading the pod before its Binding: {current}"
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


def _outcome(answer: Answer, started: float, checked: float) -> BindOutcome:
    """What the Binding's answer means."""
    result, message = BindResult.BOUND, ""
    if isinstance(answer, NotFound):
        result, message = BindResult.GONE, str(answer)
    elif isinstance(answer, Timeout | Unavailable) and not answer.status:
        result, message = BindResult.UNCERTAIN, f"Binding: {answer}"  # it may have landed
    elif isinstance(answer, KubeError):  # the server answered (409, 429, 5xx, 4xx): not bound
        result, message = BindResult.REJECTED, f"Binding: {answer}"
    return BindOutcome(result, message, checked - started, time.perf_counter() - checked)

"""Carry out one bind decided by a session: PreBind (annotate), then the Binding.

PreBind writes ``kgpu.io/device-allocation`` and ``kgpu.io/visible-devices`` with a merge
patch whose ``metadata.uid`` and ``metadata.resourceVersion`` are preconditions: the patch
applies only to the very pod version the session saw unbound. So a pod that was bound (or
deleted and re-created) meanwhile never gets an allocation that does not match where it
runs, and a bound pod's annotation is always the one written just before its binding.

What each outcome means for the reservation the session made:

==========  ======================================  ======================================
outcome     when                                    the reservation
==========  ======================================  ======================================
BOUND       the Binding was created                 kept until the cache shows the pod
GONE        404: the pod was deleted                released
REJECTED    409, 5xx, 429, 4xx, or any failure of   released; the pod is retried after a
            the annotation patch (nothing is bound  back-off
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

from kgpu.kube.client import KubeClient
from kgpu.kube.errors import KubeError, NotFound, Timeout, Unavailable
from kgpu.kube.resources import PODS, meta, resource_version, uid


class BindResult(StrEnum):
    BOUND = "bound"
    GONE = "gone"
    REJECTED = "rejected"
    UNCERTAIN = "uncertain"


@dataclass(frozen=True, slots=True)
class BindOutcome:
    result: BindResult
    message: str = ""
    annotate_s: float = 0.0
    bind_s: float = 0.0


def bind_pod(
    client: KubeClient, pod: Mapping[str, Any], node: str, annotations: Mapping[str, str]
) -> BindOutcome:
    """Annotate ``pod`` (as the session saw it) and bind it to ``node``."""
    m = meta(pod)
    namespace, name = str(m.get("namespace") or "default"), str(m.get("name"))
    patch: dict[str, Any] = {
        "metadata": {
            "uid": uid(pod),
            "resourceVersion": resource_version(pod),
            "annotations": dict(annotations),
        }
    }
    started = time.perf_counter()
    try:
        if annotations:
            client.patch(PODS, name, patch, namespace)
    except NotFound as exc:
        return BindOutcome(BindResult.GONE, str(exc), time.perf_counter() - started)
    except KubeError as exc:
        return BindOutcome(BindResult.REJECTED, f"PreBind: {exc}", time.perf_counter() - started)
    annotated = time.perf_counter()
    try:
        client.bind(namespace, name, uid(pod), node)
    except NotFound as exc:
        return _outcome(BindResult.GONE, str(exc), started, annotated)
    except (Timeout, Unavailable) as exc:
        if exc.status:  # the server answered (429, 5xx): it did not bind
            return _outcome(BindResult.REJECTED, f"Binding: {exc}", started, annotated)
        return _outcome(BindResult.UNCERTAIN, f"Binding: {exc}", started, annotated)
    except KubeError as exc:
        return _outcome(BindResult.REJECTED, f"Binding: {exc}", started, annotated)
    return _outcome(BindResult.BOUND, "", started, annotated)


def _outcome(result: BindResult, message: str, started: float, annotated: float) -> BindOutcome:
    return BindOutcome(result, message, annotated - started, time.perf_counter() - annotated)

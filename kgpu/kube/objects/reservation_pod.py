"""The pods that hold a shared GPU for the shares kgpu places on it (KAI's design).

NVIDIA's device plugin hands out whole GPUs, and the kubelet gives each GPU to one pod at
a time. A GPU whose capacity kgpu splits among shares (``gpu-fraction``, ``gpu-memory``,
``kubernetes.io/gpu*``) is therefore asked for by one reservation pod, ``nvidia.com/gpu:
1``, bound straight to the node (``spec.nodeName``): the kubelet never gives that GPU to a
whole-GPU pod while the reservation holds it, and the node agent reports which GPU it got
(pod-resources ``List``, on the node's Device). Its shares then see that GPU
(:mod:`kgpu.kube.objects.gpu_env`).

A reservation lives in kgpu's own namespace and carries:

- label ``kgpu.io/gpu-reservation: "true"``: the scheduler reads only pods with this label
  in that namespace as reservations, so a tenant cannot hide a GPU behind the label;
- annotation ``kgpu.io/gpu-minor``: the GPU, as kgpu's books number it, that it was made
  for. The kubelet may give it another; kgpu then moves the shares in its books to the GPU
  the reservation really holds (:mod:`kgpu.kube.snapshot.reservations`) and writes the
  annotation anew.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kgpu.kube.api.resource_types import meta

RESERVATION_NAMESPACE: Final = "kgpu-system"
RESERVATION_LABEL: Final = "kgpu.io/gpu-reservation"
MINOR_ANNOTATION: Final = "kgpu.io/gpu-minor"
NAME_PREFIX: Final = "kgpu-gpu-reservation-"
# A process that holds the container open and does nothing (Kubernetes' own pause image).
DEFAULT_IMAGE: Final = "registry.k8s.io/pause:3.9"
_MINOR: Final = re.compile(r"(0|[1-9][0-9]{0,3})")


@dataclass(frozen=True, slots=True)
class ReservationConfig:
    """Where reservation pods go and what they run."""

    namespace: str = RESERVATION_NAMESPACE
    image: str = DEFAULT_IMAGE
    command: tuple[str, ...] = ()  # the image's own entrypoint when empty
    pull_policy: str = "IfNotPresent"
    resource: str = "nvidia.com/gpu"
    # A reservation with no share left on its GPU is deleted after this many seconds (a
    # share about to be bound there keeps it).
    idle_grace_s: float = 30.0
    # A share whose GPU environment waits this long is told why (an event on the pod).
    warn_after_s: float = 30.0
    labels: Mapping[str, str] = field(default_factory=dict)


def render_reservation(config: ReservationConfig, node: str, minor: int) -> dict[str, Any]:
    """A reservation pod for GPU ``minor`` of ``node``, as kgpu's books number it."""
    container: dict[str, Any] = {
        "name": "reserve",
        "image": config.image,
        "imagePullPolicy": config.pull_policy,
        "resources": {"limits": {config.resource: "1"}, "requests": {"cpu": "1m"}},
    }
    if config.command:
        container["command"] = list(config.command)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": NAME_PREFIX,
            "namespace": config.namespace,
            "labels": {**config.labels, RESERVATION_LABEL: "true"},
            "annotations": {MINOR_ANNOTATION: str(minor)},
        },
        "spec": {
            "nodeName": node,
            "containers": [container],
            # It must stay where its GPU is: no taint moves it, nothing restarts it elsewhere.
            "tolerations": [{"operator": "Exists"}],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
        },
    }


def is_reservation(pod: Mapping[str, Any], namespace: str) -> bool:
    m = meta(pod)
    labels = m.get("labels")
    return (
        m.get("namespace") == namespace
        and isinstance(labels, Mapping)
        and labels.get(RESERVATION_LABEL) == "true"
    )


def reserved_minor(pod: Mapping[str, Any]) -> int | None:
    """The GPU minor a reservation was made for; None when the annotation is not one."""
    annotations = meta(pod).get("annotations")
    value = annotations.get(MINOR_ANNOTATION) if isinstance(annotations, Mapping) else None
    return int(value) if isinstance(value, str) and _MINOR.fullmatch(value) else None


def minor_patch(minor: int) -> dict[str, Any]:
    return {"metadata": {"annotations": {MINOR_ANNOTATION: str(minor)}}}

"""How a pod whose GPUs the kubelet does not hand out learns which GPU is its own.

A pod that asks the device plugin (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``,
``nvidia.com/mig-*``) gets ``NVIDIA_VISIBLE_DEVICES`` from the plugin's ``Allocate``. Every
other GPU request kgpu places (``gpu-fraction``, ``gpu-memory``, Koordinator's
``kubernetes.io/gpu*``) asks the kubelet for nothing; its GPU is held by a reservation pod
(:mod:`kgpu.kube.objects.reservation_pod`), and its containers read their GPU from a
ConfigMap in the pod's namespace:

- the admission webhook, at the pod's CREATE, names the ConfigMap in the pod's annotation
  ``kgpu.io/gpu-env-configmap`` and points each container's ``NVIDIA_VISIBLE_DEVICES`` (and
  the optional MPS limits) at its keys, replacing whatever the pod set; an env entry wins
  over the image's ``ENV``, so the image cannot widen it either;
- ``kgpu run`` writes the ConfigMap once the GPU the reservation holds is the one the pod's
  allocation names (:mod:`kgpu.kube.live.gpu_env_writer`). Until then the kubelet does not
  start the container (``CreateContainerConfigError``, retried): a share never runs on an
  unconfirmed GPU.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final

from kgpu.kube.api.resource_types import GPU_ENV_LABEL, meta
from kgpu.model.units import MILLI_PER_GPU

ENV_CONFIGMAP_ANNOTATION: Final = "kgpu.io/gpu-env-configmap"
ENV_CONFIGMAP_PREFIX: Final = "kgpu-gpu-env-"
# The ConfigMaps kgpu writes carry this label (value: the pod's name is too long for a
# label), so an operator can list them.
ENV_CONFIGMAP_LABEL: Final = GPU_ENV_LABEL
VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
MPS_THREADS: Final = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_MEMORY: Final = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
# What the webhook controls in every container; a pod's own values for these are dropped.
CONTROLLED: Final = (VISIBLE_DEVICES, MPS_THREADS, MPS_MEMORY)
# NVIDIA's container toolkit: "void" (or empty) means not a GPU container at all.
NO_GPU: Final = "void"
# A node whose GPUs run NVIDIA's MPS control daemon (GPU feature discovery's label).
MPS_CAPABLE_LABEL: Final = "nvidia.com/mps.capable"
DEVICE_PLUGIN_PREFIX: Final = "nvidia.com/"

_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def asks_device_plugin(pod: Mapping[str, Any]) -> bool:
    """Does any container ask an ``nvidia.com/`` resource (the device plugin's)?"""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return False
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        for container in containers if isinstance(containers, list) else ():
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for kind in ("limits", "requests"):
                amounts = resources.get(kind)
                if isinstance(amounts, Mapping) and any(
                    str(name).startswith(DEVICE_PLUGIN_PREFIX) for name in amounts
                ):
                    return True
    return False


def env_configmap(pod: Mapping[str, Any]) -> str | None:
    """The ConfigMap the webhook named for the pod; None when it named none (or the value
    is not a name the webhook would have written)."""
    annotations = meta(pod).get("annotations")
    value = annotations.get(ENV_CONFIGMAP_ANNOTATION) if isinstance(annotations, Mapping) else None
    if (
        isinstance(value, str)
        and value.startswith(ENV_CONFIGMAP_PREFIX)
        and len(value) <= 63
        and _NAME.fullmatch(value)
    ):
        return value
    return None


def configmap_env(name: str) -> list[dict[str, Any]]:
    """The env entries the webhook gives each container of a share: its GPU and MPS limits
    from the ConfigMap ``name``."""

    def ref(key: str, optional: bool) -> dict[str, Any]:
        selector: dict[str, Any] = {"name": name, "key": key}
        if optional:
            selector["optional"] = True
        return {"name": key, "valueFrom": {"configMapKeyRef": selector}}

    # Not optional: the kubelet holds the container until kgpu run has written the GPU.
    return [ref(VISIBLE_DEVICES, False), ref(MPS_THREADS, True), ref(MPS_MEMORY, True)]


def webhook_env(share: bool, no_gpu: bool, configmap: str) -> list[dict[str, Any]]:
    """The GPU env entries the webhook gives every container of a pod: a share's from its
    ConfigMap ``configmap``; ``void`` for a pod that asks no GPU (and nothing of the device
    plugin); none otherwise, the device plugin's ``Allocate`` setting them."""
    if share:
        return configmap_env(configmap)
    return [{"name": VISIBLE_DEVICES, "value": NO_GPU}] if no_gpu else []


def own_env(pod: Mapping[str, Any], share: bool, no_gpu: bool) -> tuple[str, object, str] | None:
    """Where a pod of ours sets the GPU environment otherwise than the webhook leaves it
    (:func:`webhook_env`), so that a container would see GPUs it was not given: (field,
    value, what was expected); None when it is as the webhook leaves it.

    A pod without GPUs that sets none is let through: the webhook would have written
    ``void``, but only the image can then widen what it sees (see docs/DEVICES.md)."""
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return None
    name = env_configmap(pod)
    want = webhook_env(share, no_gpu, name or "")
    if share:
        expected = f"{VISIBLE_DEVICES} and the MPS limits from ConfigMap {name}"
    elif no_gpu:
        expected = f"{VISIBLE_DEVICES}={NO_GPU} or none"
    else:
        expected = f"no {', '.join(CONTROLLED)} of the pod's own: the device plugin sets them"
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        for i, container in enumerate(containers if isinstance(containers, list) else ()):
            env = container.get("env") if isinstance(container, Mapping) else None
            env = env if isinstance(env, list) else []
            found = [e for e in env if isinstance(e, Mapping) and e.get("name") in CONTROLLED]
            if found != want and (found or not no_gpu):
                shown = found if len(str(found)) <= 200 else f"{len(found)} entries"
                return f"spec.{group}[{i}].env", shown, expected
    return None


def env_values(uuid: str, milli: int, memory_mib: int, mps: bool) -> dict[str, str]:
    """The ConfigMap's data for a pod that holds ``milli`` thousandths and ``memory_mib`` MiB
    of the GPU ``uuid``; with ``mps``, the limits NVIDIA's MPS enforces: the share of the
    GPU's threads (whole percent, rounded up so a share never gets 0) and the memory the
    client may pin on its one visible device, index 0."""
    data = {VISIBLE_DEVICES: uuid}
    if mps and milli < MILLI_PER_GPU:
        data[MPS_THREADS] = str(max(1, math.ceil(milli / 10)))
        if memory_mib > 0:
            data[MPS_MEMORY] = f"0={memory_mib}M"
    return data

"""The ConfigMaps that tell a share's containers which GPU is theirs.

For each bound pod of ours that holds GPUs through reservation pods, once every GPU its
``kgpu.io/device-allocation`` annotation names is one a reservation holds (the agent has
reported it and any correction of the annotation is done), ``kgpu run`` writes the
ConfigMap the webhook named for it (:mod:`kgpu.kube.objects.gpu_env`): in the pod's
namespace, owned by the pod (deleted with it), with ``NVIDIA_VISIBLE_DEVICES`` naming those
GPUs' UUIDs and, on a node labelled ``nvidia.com/mps.capable=true``, the MPS limits of its
share. The kubelet starts the containers only then.

A ConfigMap of that name that the pod does not own is not touched: a Warning
``GpuEnvConfigMapTaken`` says so on the pod, whose containers then wait. A share whose
environment cannot be written for ``warn_after_s`` (30 s) gets a Warning ``GpuEnvPending``
saying why (no reservation yet, one the node agent has not reported, an allocation being
corrected, a GPU without UUID), again when the reason changes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, KubeError, NotFound
from kgpu.kube.api.event_recorder import NORMAL, WARNING, EventRecorder
from kgpu.kube.api.resource_types import CONFIGMAPS, meta, uid
from kgpu.kube.objects.gpu_env import (
    ENV_CONFIGMAP_LABEL,
    MPS_CAPABLE_LABEL,
    VISIBLE_DEVICES,
    env_configmap,
    env_values,
)
from kgpu.kube.objects.record_signature import SIGNATURE_ANNOTATION, RecordKey
from kgpu.kube.snapshot.allocation_rebuild import minors_of
from kgpu.kube.snapshot.cache_snapshot import CacheSnapshot, Reservation

log = logging.getLogger(__name__)

Submit = Callable[[Callable[[], None]], object]
NodeLookup = Callable[[str], Mapping[str, Any] | None]
WRITTEN = "GpuEnvWritten"
TAKEN = "GpuEnvConfigMapTaken"
PENDING = "GpuEnvPending"


def _not_yet(
    mine: Sequence[Reservation],
    node: str,
    minors: tuple[int, ...],
    recorded: tuple[int, ...],
    uuids: list[str],
) -> str:
    """Why the environment of a share on ``minors`` of ``node`` (whose live reservations are
    ``mine``) cannot be written yet; "" when it can."""
    if minors != recorded:
        gpus = ",".join(map(str, minors))
        return f"its allocation is being corrected to GPU {gpus}, where its reservation is"
    for minor, uuid in zip(minors, uuids, strict=True):
        if any(r.held == minor for r in mine):
            if not uuid:
                return f"node {node}'s Device lists no UUID for GPU {minor}"
            continue
        waiting = [r for r in mine if r.held is None and r.minor == minor]
        if not waiting:
            return f"no reservation pod holds GPU {minor} of node {node} yet"
        r = waiting[0]
        return (
            f"the node agent has not reported which GPU reservation pod {r.name} (phase "
            f"{r.phase or 'Pending'}) holds: is `kgpu agent` running on node {node}, "
            "reading the kubelet's pod-resources socket?"
        )
    return ""


def _subset(notes: Mapping[str, str], kept: object) -> bool:
    return isinstance(kept, Mapping) and all(kept.get(k) == v for k, v in notes.items())


class GpuEnvWriter:
    def __init__(
        self,
        client: KubeClient,
        recorder: EventRecorder,
        submit: Submit,
        is_leader: Callable[[], bool],
        node: NodeLookup,
        warn_after_s: float = 30.0,
        record_key: RecordKey | None = None,  # None: written unsigned (tests of the loop)
    ) -> None:
        self.client = client
        self.record_key = record_key
        self.recorder = recorder
        self.submit = submit
        self.is_leader = is_leader
        self.node = node
        self._lock = threading.Lock()
        self._written: dict[str, dict[str, str]] = {}  # pod uid -> data written or in flight
        # Pod uid -> since when its environment waits, and the reason last said.
        self._waiting: dict[str, tuple[float, str]] = {}
        self.warn_after_s = warn_after_s
        self.writes = 0

    def act(self, snap: CacheSnapshot, now: float) -> None:
        if not self.is_leader():
            return
        state = snap.state
        on_node: dict[str, list[Reservation]] = {}
        for r in snap.reservations.reservations:
            if r.live:
                on_node.setdefault(r.node, []).append(r)
        todo = []
        current = set()
        waiting: set[str] = set()
        for pod, node, recorded in snap.backed:
            alloc = state.allocations.get(pod.spec.key)
            name = env_configmap(pod.obj)
            if alloc is None or name is None:
                continue
            minors = minors_of(state, alloc.node, alloc.gpus)
            gpus = state.devices[alloc.node].gpus
            uuids = [gpus[s].uuid for s in alloc.gpus]
            why = _not_yet(on_node.get(node, []), node, minors, tuple(sorted(recorded)), uuids)
            if why:
                waiting.add(uid(pod.obj))
                self._still_waiting(pod.obj, why, now)
                continue
            labels = meta(self.node(node) or {}).get("labels")
            mps = isinstance(labels, Mapping) and labels.get(MPS_CAPABLE_LABEL) == "true"
            mib = alloc.gpu_memory[0] if alloc.gpu_memory else 0
            data = env_values(",".join(uuids), alloc.gpu_milli, mib, mps)
            pod_uid = uid(pod.obj)
            current.add(pod_uid)
            with self._lock:
                if self._written.get(pod_uid) == data:
                    continue
                self._written[pod_uid] = data
            todo.append(partial(self._write, pod.obj, name, data))
        with self._lock:
            for gone in [u for u in self._written if u not in current]:
                del self._written[gone]
            for gone in [u for u in self._waiting if u not in waiting]:
                del self._waiting[gone]
        for task in todo:
            self.submit(task)

    def due(self, now: float) -> bool:
        """Is a share's wait long enough to be said (a session should run to say it)?"""
        with self._lock:
            return any(
                not said and now - since >= self.warn_after_s
                for since, said in self._waiting.values()
            )

    def _still_waiting(self, pod: Mapping[str, Any], why: str, now: float) -> None:
        """Say once, after ``warn_after_s``, why a share's containers are not started yet."""
        with self._lock:
            since, said = self._waiting.get(uid(pod), (now, ""))
            self._waiting[uid(pod)] = (since, said)
            if now - since < self.warn_after_s or said == why:
                return
            self._waiting[uid(pod)] = (since, why)
        self.recorder.emit(
            pod,
            WARNING,
            PENDING,
            f"the containers wait for their GPU environment (ConfigMap {env_configmap(pod)}): "
            f"{why}",
        )

    def _write(self, pod: Mapping[str, Any], name: str, data: dict[str, str]) -> None:
        m = meta(pod)
        namespace, pod_name, pod_uid = str(m.get("namespace")), str(m.get("name")), uid(pod)
        notes = {}
        if self.record_key is not None:
            # The webhook lets no one else write it (kgpu.kube.admission.record_guard).
            signature = self.record_key.sign_env(namespace, name, pod_uid, data)
            notes = {SIGNATURE_ANNOTATION: signature}
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {ENV_CONFIGMAP_LABEL: "true"},
                "annotations": notes,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid}
                ],
            },
            "data": data,
        }
        try:
            try:
                self.client.create(CONFIGMAPS, body, namespace)
            except Conflict:  # it exists: ours to update only if the pod owns it
                existing = self.client.get(CONFIGMAPS, name, namespace)
                owners = meta(existing).get("ownerReferences")
                if not any(
                    isinstance(o, Mapping) and o.get("uid") == pod_uid
                    for o in (owners if isinstance(owners, list) else ())
                ):
                    self.recorder.emit(
                        pod,
                        WARNING,
                        TAKEN,
                        f"ConfigMap {namespace}/{name}, which the pod's containers read their "
                        "GPU from, exists and is not this pod's; kgpu does not write it, and "
                        "the containers wait until it is deleted",
                    )
                    return
                kept = meta(existing).get("annotations")
                if existing.get("data") != data or not _subset(notes, kept):
                    # PUT: a key no longer wanted goes too.
                    m2 = {**meta(existing), "annotations": {**(kept or {}), **notes}}
                    replaced = {**existing, "metadata": m2, "data": data}
                    self.client.replace(CONFIGMAPS, name, replaced, namespace)
        except NotFound:
            return  # the namespace went with the pod
        except KubeError as exc:
            log.warning(
                "%s/%s: GPU env ConfigMap %s not written: %s", namespace, pod_name, name, exc
            )
            with self._lock:
                if self._written.get(pod_uid) == data:
                    del self._written[pod_uid]  # the next session tries again
            return
        self.writes += 1
        self.recorder.emit(
            pod,
            NORMAL,
            WRITTEN,
            f"the pod's containers see {VISIBLE_DEVICES}={data[VISIBLE_DEVICES]} "
            f"(ConfigMap {name}" + (", with MPS limits" if len(data) > 1 else "") + ")",
        )

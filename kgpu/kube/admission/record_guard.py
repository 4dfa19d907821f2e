"""The webhook's guard on kgpu's records: only kgpu writes them on a pod.

kgpu writes ``kgpu.io/device-allocation``, ``kgpu.io/visible-devices``,
``kgpu.io/admitted-queue`` and ``kgpu.io/record-signature`` in the Binding (a ``pods/binding``
CREATE, which the pods rule does not match) and corrects them by a patch signed the same way
(:mod:`kgpu.kube.objects.record_signature`). So:

- a pod's CREATE that carries any of them is denied: kgpu never creates a pod with them (its
  reservation pods carry ``kgpu.io/gpu-minor`` only, its trigger pods none);
- an UPDATE that adds, changes or removes any of them is denied unless the new values carry
  a signature that verifies for the pod's UID and node: that is kgpu's own correction;
- an UPDATE that changes ``kgpu.io/gpu-env-configmap`` (the mutating webhook names the
  share's GPU-environment ConfigMap at CREATE) is denied: the name is fixed with the pod.

A share's GPU-environment ConfigMap (``kgpu-gpu-env-…``, labelled ``kgpu.io/gpu-env``), which
``kgpu run`` writes signed, may be created or changed only with a signature that verifies
for its data and owner pod: a tenant who may edit ConfigMaps in its namespace cannot point
its share's containers at another GPU.

The scheduler does not count on this (the webhook may be off): it also refuses records
whose signature does not verify. The webhook only stops them from being written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kgpu.kube.objects.gpu_env import (
    ENV_CONFIGMAP_ANNOTATION,
    ENV_CONFIGMAP_LABEL,
    ENV_CONFIGMAP_PREFIX,
)
from kgpu.kube.objects.record_signature import RECORDS, RecordKey, record_changes

Obj = Mapping[str, Any]
KeySource = Callable[[], RecordKey | None]


def _notes(obj: object) -> Mapping[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    return notes if isinstance(notes, Mapping) else {}


def record_problem(
    operation: object, ref: str, obj: Obj, old: object, record_key: KeySource
) -> str | None:
    """Why this pod CREATE or UPDATE may not write what it writes of kgpu's records."""
    notes = _notes(obj)
    if operation == "CREATE":
        written = [n for n in RECORDS if n in notes]
        if not written:
            return None
        return (
            f"{ref}: annotation {', '.join(written)} is written only by kgpu, as it binds the "
            "pod; remove it (a pod is created without kgpu's records)"
        )
    if operation != "UPDATE" or not isinstance(old, Mapping):
        return None
    before = _notes(old)
    if before.get(ENV_CONFIGMAP_ANNOTATION) != notes.get(ENV_CONFIGMAP_ANNOTATION):
        return (
            f"{ref}: annotation {ENV_CONFIGMAP_ANNOTATION} may not change (from "
            f"{before.get(ENV_CONFIGMAP_ANNOTATION)!r} to {notes.get(ENV_CONFIGMAP_ANNOTATION)!r}): "
            "kgpu's mutating webhook names the pod's GPU environment when it is created"
        )
    changed = record_changes(before, notes)
    if not changed:
        return None
    key = record_key()
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    spec = obj.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    why = (
        "kgpu's record key could not be read to check them"
        if key is None
        else key.problem_of(str(meta.get("uid") or ""), str(node or ""), notes)
    )
    if not why:
        return None
    return (
        f"{ref}: annotation {', '.join(changed)} is written only by kgpu (the change is not "
        f"signed by kgpu: {why}); leave kgpu's records as they are"
    )


def env_configmap_problem(
    operation: object, ref: str, obj: Obj, record_key: KeySource
) -> str | None:
    """Why this ConfigMap CREATE or UPDATE may not write a share's GPU environment."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    labels = meta.get("labels")
    name = str(meta.get("name") or "")
    # The hook is called for a ConfigMap labelled so before or after the write; one named so
    # is a share's too, whatever its labels say.
    ours = name.startswith(ENV_CONFIGMAP_PREFIX) or (
        isinstance(labels, Mapping) and ENV_CONFIGMAP_LABEL in labels
    )
    if operation not in ("CREATE", "UPDATE") or not ours:
        return None
    key = record_key()
    why = "kgpu's record key could not be read to check it" if key is None else key.env_problem(obj)
    if not why:
        return None
    return (
        f"{ref}: a share's GPU environment is written only by kgpu ({why}); leave it as kgpu "
        "wrote it"
    )

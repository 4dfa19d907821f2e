"""The signature that makes kgpu's records on a pod kgpu's: nobody else can write them.

kgpu writes records on the pods it binds (``kgpu.io/device-allocation``,
``kgpu.io/visible-devices``, ``kgpu.io/admitted-queue``) and reads them back to rebuild its
books. A pod's owner may edit its own pod's annotations, and a pod may be created already
bound (``spec.nodeName``) with any annotations, so the scheduler cannot take a record at its
word, and it cannot count on the admission webhook to stop such writes (it may be off, or
unreachable under ``failurePolicy: Ignore``). So every record kgpu writes goes with one
more annotation, ``kgpu.io/record-signature``: an HMAC-SHA256 over the pod's UID, its node
and the values of the records (absent ones included, as absent), keyed by a secret only
kgpu holds (:mod:`kgpu.kube.live.record_key`). A record whose signature does not verify for
that pod UID and node was not written by kgpu for this pod there: the scheduler does not
use it, and the webhook denies writing it.

The UID and node in the signed text mean a record cannot be copied: not onto another pod
(a new UID), nor kept by a pod created again under the same name, nor moved to a node.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.resource_types import meta
from kgpu.kube.objects.device_allocation import ALLOCATION_ANNOTATION, VISIBLE_DEVICES_ANNOTATION
from kgpu.kube.objects.queue_tenancy import ADMITTED_QUEUE_ANNOTATION

SIGNATURE_ANNOTATION: Final = "kgpu.io/record-signature"
# What the signature covers, in the order it is computed over.
SIGNED: Final = (ALLOCATION_ANNOTATION, VISIBLE_DEVICES_ANNOTATION, ADMITTED_QUEUE_ANNOTATION)
# Annotations only kgpu writes on a pod: the signed records and the signature itself.
RECORDS: Final = (*SIGNED, SIGNATURE_ANNOTATION)
KEY_BYTES: Final = 32  # HMAC-SHA256's block-size-safe key length; what kgpu makes
DATA_KEY: Final = "key"  # the field of the key's Secret that holds it, base64-encoded


def default_secret(scheduler_name: str, namespace: str = "kgpu-system") -> str:
    """``NAMESPACE/NAME`` of a scheduler's key Secret where no option names it."""
    return f"{namespace}/{scheduler_name}-record-key"


def key_of_secret(secret: Mapping[str, Any], where: str) -> RecordKey:
    """The key a Secret holds; KubeError naming the Secret, field and what was expected."""
    data = secret.get("data")
    text = data.get(DATA_KEY) if isinstance(data, Mapping) else None
    try:
        raw = base64.b64decode(str(text), validate=True) if isinstance(text, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) < KEY_BYTES:
        raise KubeError(
            f"Secret {where}: data.{DATA_KEY} is not {KEY_BYTES} or more base64-encoded bytes; "
            "expected the key kgpu run made (delete the Secret to have a new one made)"
        )
    return RecordKey(raw)


@dataclass(frozen=True, slots=True)
class RecordKey:
    """The secret that signs kgpu's records."""

    secret: bytes

    def sign(self, pod_uid: str, node: str, notes: Mapping[str, object]) -> str:
        """The signature of the records in ``notes`` for the pod ``pod_uid`` on ``node``."""
        parts = [pod_uid, node]
        for name in SIGNED:
            value = notes.get(name)
            # "=" marks a present value; a lone name an absent one: "" and absent differ.
            parts.append(f"{name}={value}" if isinstance(value, str) else name)
        text = "\0".join(parts).encode()
        return hmac.new(self.secret, text, hashlib.sha256).hexdigest()

    def signed(self, pod_uid: str, node: str, notes: Mapping[str, str]) -> dict[str, str]:
        """``notes`` with their signature added."""
        return {**notes, SIGNATURE_ANNOTATION: self.sign(pod_uid, node, notes)}

    def sign_env(self, namespace: str, name: str, pod_uid: str, data: Mapping[str, str]) -> str:
        """The signature of a share's GPU-environment ConfigMap (kgpu.kube.live.gpu_env_writer):
        its namespace, name, owner pod and every key and value of its data."""
        parts = ["ConfigMap", namespace, name, pod_uid]
        parts += [f"{k}={data[k]}" for k in sorted(data)]
        text = "\0".join(parts).encode()
        return hmac.new(self.secret, text, hashlib.sha256).hexdigest()

    def env_problem(self, configmap: Mapping[str, Any]) -> str:
        """Why a GPU-environment ConfigMap is not as kgpu wrote it ("" when it is)."""
        m = meta(configmap)
        owners = m.get("ownerReferences")
        pods = [
            str(o.get("uid") or "")
            for o in (owners if isinstance(owners, list) else ())
            if isinstance(o, Mapping) and o.get("kind") == "Pod"
        ]
        data = configmap.get("data")
        data = data if isinstance(data, Mapping) else {}
        notes = m.get("annotations")
        given = notes.get(SIGNATURE_ANNOTATION) if isinstance(notes, Mapping) else None
        if len(pods) != 1 or not all(isinstance(v, str) for v in data.values()):
            return "expected one owner pod and string data, as kgpu writes it"
        want = self.sign_env(str(m.get("namespace") or ""), str(m.get("name") or ""), pods[0], data)
        if not isinstance(given, str) or not hmac.compare_digest(given, want):
            return (
                f"annotation {SIGNATURE_ANNOTATION} does not match its data and owner: only "
                "kgpu writes a share's GPU environment"
            )
        return ""

    def problem(self, pod: Mapping[str, Any]) -> str:
        """Why the records on ``pod`` are not kgpu's ("" when they are, or there are none):
        the text says which annotation and what was expected."""
        m = meta(pod)
        notes = m.get("annotations")
        notes = notes if isinstance(notes, Mapping) else {}
        present = [n for n in RECORDS if n in notes]
        if not present:
            return ""
        spec = pod.get("spec")
        node = spec.get("nodeName") if isinstance(spec, Mapping) else None
        return self.problem_of(str(m.get("uid") or ""), str(node or ""), notes)

    def problem_of(self, pod_uid: str, node: str, notes: Mapping[str, Any]) -> str:
        """Why the records in ``notes`` are not kgpu's for pod ``pod_uid`` on ``node``."""
        written = ", ".join(n for n in SIGNED if n in notes) or "no record"
        given = notes.get(SIGNATURE_ANNOTATION)
        if given is None:
            return (
                f"annotations {written} carry no {SIGNATURE_ANNOTATION}: kgpu did not write "
                "them (or a kgpu from before signatures did)"
            )
        if not node:
            return f"annotations {written} are on a pod with no node: kgpu writes them as it binds"
        if not isinstance(given, str) or not hmac.compare_digest(
            given, self.sign(pod_uid, node, notes)
        ):
            return (
                f"annotation {SIGNATURE_ANNOTATION} does not match {written} for this pod "
                f"(uid {pod_uid}) on node {node}: they were not written by kgpu for it there, "
                "expected the values kgpu wrote as it bound the pod"
            )
        return ""


def record_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The reserved annotations whose value differs between two annotation maps."""
    return [n for n in RECORDS if old.get(n) != new.get(n)]

"""The Secret that holds the key signing kgpu's records (:mod:`kgpu.kube.objects.record_signature`).

``kgpu run`` reads it at start and creates it, with 32 random bytes, when it is absent; a
restarted scheduler, its standby and the webhook (``kgpu webhook``) read the same one, so a
record signed before a restart verifies after it. It lives in kgpu's namespace
(``--record-key``, ``NAMESPACE/NAME``), where tenants have no access: reading it would let
anyone sign a record. Losing it (deleting the Secret) only makes the records written so far
untrusted: the pods are then accounted as pods with no record, each with a Warning.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import secrets
from collections.abc import Mapping
from typing import Any, Final

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, KubeError, NotFound
from kgpu.kube.api.resource_types import NAMESPACES, SECRETS
from kgpu.kube.objects.record_signature import KEY_BYTES, RecordKey

DATA_KEY: Final = "key"


def default_secret(scheduler_name: str, namespace: str = "kgpu-system") -> str:
    """``NAMESPACE/NAME`` of a scheduler's key Secret where no option names it."""
    return f"{namespace}/{scheduler_name}-record-key"


def split(where: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` as a pair; ValueError naming the value otherwise."""
    namespace, _, name = where.partition("/")
    if not namespace or not name or "/" in name:
        raise ValueError(f"record key Secret {where!r}: expected NAMESPACE/NAME")
    return namespace, name


def read_key(client: KubeClient, where: str) -> RecordKey:
    """The key in the Secret ``where``; NotFound if there is none; KubeError if it holds
    no usable key (the message names the Secret, the field and what was expected)."""
    namespace, name = split(where)
    return _key_of(client.get(SECRETS, name, namespace), where)


def ensure_key(client: KubeClient, where: str) -> RecordKey:
    """The key in the Secret ``where``, made first if there is none (and its namespace,
    outside the cluster where nothing made it); two schedulers starting at once both end
    with the one that was created first."""
    namespace, name = split(where)
    try:
        return read_key(client, where)
    except NotFound:
        pass
    # There already, or not ours to create: the Secret's create then says which.
    with contextlib.suppress(KubeError):
        client.create(NAMESPACES, {"metadata": {"name": namespace}})
    secret = base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "data": {DATA_KEY: secret},
    }
    try:
        return _key_of(client.create(SECRETS, body, namespace), where)
    except Conflict:  # another scheduler made it first: use that one
        return read_key(client, where)


def _key_of(secret: Mapping[str, Any], where: str) -> RecordKey:
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

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
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Final

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, KubeError, NotFound
from kgpu.kube.api.resource_types import SECRETS
from kgpu.kube.objects.record_signature import (
    DATA_KEY,
    KEY_BYTES,
    RecordKey,
    default_secret,
    key_of_secret,
)

__all__ = ["DATA_KEY", "KeyReader", "default_secret", "ensure_key", "read_key", "split"]

log = logging.getLogger(__name__)

RETRY_S: Final = 10.0  # how often the webhook tries again to read a key it could not


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
    return key_of_secret(client.get(SECRETS, name, namespace), where)


def ensure_key(
    client: KubeClient,
    where: str,
    make_namespace: Callable[[KubeClient, str], None] | None = None,
) -> RecordKey:
    """The key in the Secret ``where``, made first if there is none (and its namespace by
    ``make_namespace``, outside the cluster where nothing made it); two schedulers starting
    at once both end with the one that was created first."""
    namespace, name = split(where)
    try:
        return read_key(client, where)
    except NotFound:
        pass
    secret = base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "data": {DATA_KEY: secret},
    }
    try:
        try:
            made = client.create(SECRETS, body, namespace)
        except NotFound:  # no namespace yet: a workstation run makes it as registration does
            if make_namespace is None:
                raise
            make_namespace(client, namespace)
            made = client.create(SECRETS, body, namespace)
    except Conflict:  # another scheduler made it first: use that one
        return read_key(client, where)
    return key_of_secret(made, where)


class KeyReader:
    """The webhook's view of the key: read at first need, kept once read, and while it
    cannot be read (not made yet: the scheduler makes it at start), tried again at most
    every ``retry_s``; None meanwhile."""

    def __init__(self, client: KubeClient, where: str, retry_s: float = RETRY_S) -> None:
        self.client, self.where, self.retry_s = client, where, retry_s
        self._lock = threading.Lock()
        self._key: RecordKey | None = None
        self._next = 0.0

    def __call__(self) -> RecordKey | None:
        with self._lock:
            now = time.monotonic()
            if self._key is None and now >= self._next:
                self._next = now + self.retry_s
                try:
                    self._key = read_key(self.client, self.where)
                except KubeError as exc:
                    log.warning("record key Secret %s not read: %s", self.where, exc)
            return self._key

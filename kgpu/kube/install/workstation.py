"""What ``kgpu run`` registers when it serves the admission webhook itself (outside the
cluster, ``--serve-webhook``): the namespace for reservation pods, and a Validating- and a
MutatingWebhookConfiguration that call this machine at a URL with a fresh CA.

Both configurations are named ``<scheduler>-workstation`` (apart from an install's
``<scheduler>-webhook``) and carry the rules the install's do
(:mod:`kgpu.kube.install.webhook_config`). Each start writes them anew (create, or replace
what a previous run left), so a restart, with its new CA and maybe a new address, takes over.

Failure policies: both ``Ignore``, so a workstation that is off, or a ``kgpu run`` being
restarted, never stops the cluster from creating pods. A share admitted meanwhile has no
GPU environment, and the scheduler does not place it (it says why); a malformed pod pends
with the validating hook's message as an event. A clean stop removes both configurations
(a killed ``kgpu run`` leaves them until it starts again, or ``kubectl delete
mutatingwebhookconfiguration,validatingwebhookconfiguration <scheduler>-workstation``).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Final

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import Conflict, NotFound
from kgpu.kube.api.resource_types import (
    MUTATING_WEBHOOKS,
    NAMESPACES,
    VALIDATING_WEBHOOKS,
    Resource,
)
from kgpu.kube.install.options import Obj
from kgpu.kube.install.webhook_config import (
    SKIP_LABEL,
    configuration,
    mutating_webhooks,
    url_client,
    validating_webhooks,
)
from kgpu.kube.objects.reservation_pod import RESERVATION_NAMESPACE

log = logging.getLogger(__name__)

MUTATING_FAILURE_POLICY: Final = "Ignore"
VALIDATING_FAILURE_POLICY: Final = "Ignore"
_MANAGED: Final = {"app.kubernetes.io/managed-by": "kgpu-run"}


def registration_name(scheduler_name: str) -> str:
    return f"{scheduler_name}-workstation"


def render_registration(
    scheduler_name: str, base_url: str, ca_pem: bytes, *, kaito: bool = False
) -> list[Obj]:
    """The two configurations calling ``base_url`` ("https://HOST:PORT"), validating first;
    ``kaito``: KAITO's Workspaces are kgpu's (``--kaito-workspaces``), so they are sent too."""
    client = url_client(base_url, ca_pem)
    meta = {"name": registration_name(scheduler_name), "labels": dict(_MANAGED)}
    return [
        configuration(
            VALIDATING_WEBHOOKS.kind,
            meta,
            validating_webhooks(client, VALIDATING_FAILURE_POLICY, kaito=kaito),
        ),
        configuration(
            MUTATING_WEBHOOKS.kind,
            dict(meta),
            mutating_webhooks(client, MUTATING_FAILURE_POLICY),
        ),
    ]


def register(
    client: KubeClient, scheduler_name: str, base_url: str, ca_pem: bytes, *, kaito: bool = False
) -> list[Obj]:
    """Create kgpu's namespace if missing, then create or replace both configurations;
    KubeError when the API server refuses."""
    ensure_namespace(client, RESERVATION_NAMESPACE)
    objects = render_registration(scheduler_name, base_url, ca_pem, kaito=kaito)
    resources = (VALIDATING_WEBHOOKS, MUTATING_WEBHOOKS)
    written = [_apply(client, r, obj) for r, obj in zip(resources, objects, strict=True)]
    log.info("webhook registered as %s at %s", registration_name(scheduler_name), base_url)
    return written


def unregister(client: KubeClient, scheduler_name: str) -> None:
    """Delete both configurations (absent ones are fine)."""
    for resource in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
        with contextlib.suppress(NotFound):
            client.delete(resource, registration_name(scheduler_name))


def ensure_namespace(client: KubeClient, name: str) -> None:
    """Create the namespace, labelled like the install's own (not sent to the webhook, so
    reservation pods start whatever the webhook's state), unless it exists."""
    obj = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {**_MANAGED, SKIP_LABEL: "skip"}},
    }
    try:
        client.get(NAMESPACES, name)
    except NotFound:
        try:
            client.create(NAMESPACES, obj)
            log.info("created namespace %s", name)
        except Conflict:
            pass  # made meanwhile


def _apply(client: KubeClient, resource: Resource, obj: Obj) -> Obj:
    name = obj["metadata"]["name"]
    try:
        current = client.get(resource, name)
    except NotFound:
        return client.create(resource, obj)
    version = current.get("metadata", {}).get("resourceVersion")
    return client.replace(
        resource, name, {**obj, "metadata": {**obj["metadata"], "resourceVersion": version}}
    )

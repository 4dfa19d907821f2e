"""What the API server sends to kgpu's admission webhook, for both ways of running it: the
install's (the webhook Service, :mod:`kgpu.kube.install.bundle`) and ``kgpu run``'s own on a
workstation (a URL, :mod:`kgpu.kube.install.workstation`). One list of rules, so the two
cannot drift.

- Validating (``/validate``): pods at CREATE and UPDATE (UPDATE: a pod may not move to a
  queue its namespace may not use, nor a bound pod change its queue label; status writes go
  to ``pods/status``, which this rule does not match, so the kubelet's updates do not call
  the webhook), kgpu's and Volcano's Queues, PodGroups and Workspaces at CREATE and UPDATE
  (and KAITO's ``kaito.sh`` Workspaces, with ``--kaito-workspaces``).
- Validating: ConfigMaps labelled ``kgpu.io/gpu-env`` (a share's GPU environment) at CREATE
  and UPDATE, written only by kgpu (:mod:`kgpu.kube.admission.record_guard`).
- Validating, with the node agent: kgpu.io Devices at CREATE, UPDATE and DELETE, and their
  status, so that each agent writes its own node's Device only
  (:mod:`kgpu.kube.admission.device_writer`), with ``failurePolicy: Fail`` always.
- Mutating (``/mutate``): pods at CREATE, which get their GPU environment
  (:mod:`kgpu.kube.admission.pod_env`).

Namespaces labelled ``kgpu.io/admission: skip`` (kgpu's own) are not sent, so the webhook's
own pods and the reservation pods can always start.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Final

from kgpu.kube.api.resource_types import GPU_ENV_LABEL, MUTATE_PATH, WEBHOOK_PATH
from kgpu.kube.install.crds import GROUP, VERSION
from kgpu.kube.install.options import Obj

SKIP_LABEL: Final = "kgpu.io/admission"
KAITO_GROUP: Final = "kaito.sh"  # KAITO's Workspaces (kgpu.kube.anchors.kaito)
ADMISSION_API: Final = "admissionregistration.k8s.io/v1"

# The clientConfig for a path: a Service's or a URL's, with the caBundle.
ClientFor = Callable[[str], Obj]


def service_client(namespace: str, name: str, ca_pem: bytes) -> ClientFor:
    def client(path: str) -> Obj:
        service = {"namespace": namespace, "name": name, "path": path, "port": 443}
        return {"service": service, "caBundle": b64(ca_pem)}

    return client


def url_client(base_url: str, ca_pem: bytes) -> ClientFor:
    return lambda path: {"url": base_url + path, "caBundle": b64(ca_pem)}


def validating_webhooks(
    client_for: ClientFor, failure_policy: str, *, devices: bool = False, kaito: bool = False
) -> list[Obj]:
    """``devices``: the install's node agents write Devices, each its own node's only.
    ``kaito``: KAITO's Workspaces are kgpu's to place (``--kaito-workspaces``)."""
    client = client_for(WEBHOOK_PATH)
    ops = ["CREATE", "UPDATE"]
    hooks = [
        {
            **_hook("pods.kgpu.io", client, failure_policy),
            "namespaceSelector": _skip(),
            "rules": [_rule("", "v1", ops, "pods")],
        },
        {
            # A share's GPU environment: only kgpu writes it (kgpu.kube.admission.record_guard).
            # The selector is matched against the object before and after an UPDATE, so a
            # write that drops the label is still sent.
            **_hook("gpu-env.configmaps.kgpu.io", client, failure_policy),
            "namespaceSelector": _skip(),
            "objectSelector": {"matchExpressions": [{"key": GPU_ENV_LABEL, "operator": "Exists"}]},
            "rules": [_rule("", "v1", ops, "configmaps")],
        },
        {
            **_hook("queues.kgpu.io", client, failure_policy),
            # Volcano's queues carry the same card quota annotation.
            "rules": [
                _rule(GROUP, VERSION, ops, "queues"),
                _rule("scheduling.volcano.sh", "*", ops, "queues"),
            ],
        },
        {
            **_hook("podgroups.kgpu.io", client, failure_policy),
            "namespaceSelector": _skip(),
            # Volcano's PodGroups and Jobs: their volcano.sh/card.request.
            "rules": [
                _rule(GROUP, VERSION, ops, "podgroups"),
                _rule("scheduling.volcano.sh", "*", ops, "podgroups"),
                _rule("batch.volcano.sh", "*", ops, "jobs"),
            ],
        },
        {
            **_hook("workspaces.kgpu.io", client, failure_policy),
            "namespaceSelector": _skip(),
            # CREATE is placed on a node group; UPDATE is checked for its shape only (the
            # group is chosen once, at creation).
            "rules": [_rule(GROUP, VERSION, ops, "workspaces")],
        },
    ]
    if kaito:
        hooks.append(
            {
                # The same checks as kgpu's own, through KAITO's mapping
                # (kgpu.kube.anchors.kaito): the seed's denial, word for word.
                **_hook("workspaces.kaito.sh", client, failure_policy),
                "namespaceSelector": _skip(),
                "rules": [_rule(KAITO_GROUP, "v1beta1", ops, "workspaces")],
            }
        )
    if devices:
        hooks.append(
            {
                # Fail whatever the install's policy: only agents write Devices, and an
                # agent refused while the webhook is down writes again next round; Ignore
                # would let any node's agent rewrite every Device then.
                **_hook("devices.kgpu.io", client, "Fail"),
                "rules": [_rule(GROUP, VERSION, [*ops, "DELETE"], "devices"),
                          _rule(GROUP, VERSION, ["UPDATE"], "devices/status")],
            }
        )  # fmt: skip
    return hooks


def mutating_webhooks(client_for: ClientFor, failure_policy: str) -> list[Obj]:
    return [
        {
            **_hook("env.pods.kgpu.io", client_for(MUTATE_PATH), failure_policy),
            "namespaceSelector": _skip(),
            "rules": [_rule("", "v1", ["CREATE"], "pods")],
            # Other mutating webhooks that add containers later are rare; a second call
            # would give the pod a second ConfigMap name, so the hook runs once.
            "reinvocationPolicy": "Never",
        }
    ]


def configuration(kind: str, meta: Obj, webhooks: list[Obj]) -> Obj:
    """A ``ValidatingWebhookConfiguration`` or ``MutatingWebhookConfiguration``."""
    return {"apiVersion": ADMISSION_API, "kind": kind, "metadata": meta, "webhooks": webhooks}


def _skip() -> Obj:
    return {"matchExpressions": [{"key": SKIP_LABEL, "operator": "NotIn", "values": ["skip"]}]}


def _rule(group: str, version: str, operations: list[str], resource: str) -> Obj:
    return {
        "apiGroups": [group],
        "apiVersions": [version],
        "operations": operations,
        "resources": [resource],
    }


def _hook(name: str, client: Obj, failure_policy: str) -> Obj:
    return {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": failure_policy,
        "matchPolicy": "Equivalent",
        "timeoutSeconds": 5,
        "clientConfig": client,
    }


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")

"""The install, as the objects that ``kubectl apply -f`` of ``kgpu manifests`` creates.

What each option of :class:`InstallOptions` (``kgpu manifests`` flag) sets:

- ``namespace`` (``--namespace``, default kgpu-system): the Namespace object, where every
  namespaced object goes, the scheduler's leader-election Lease (a Role there allows just
  that Lease), and the webhook Service the API server calls.
- ``image`` (``--image``): the image of both Deployments (scheduler and webhook).
- ``scheduler_name`` (``--scheduler-name``, default kgpu-scheduler): the ``spec.schedulerName``
  the scheduler claims and the webhook validates, the Lease name, and the name (or name
  prefix) of every other object, so two installs with different names can share a cluster
  (they share the CRDs, which are the same for all).
- ``webhook`` (``--webhook/--no-webhook``): whether the admission webhook is installed: its
  ServiceAccount, a Secret with a certificate made now (see
  :mod:`kgpu.kube.install.webhook_certs`), a Service, a Deployment of ``kgpu webhook`` and
  the Validating- and MutatingWebhookConfiguration whose ``caBundle`` is the certificate's
  CA (what each sends: :mod:`kgpu.kube.install.webhook_config`).
- ``failure_policy`` (``--webhook-failure-policy``, default Ignore): what the API server does
  when the webhook cannot be reached. Ignore keeps pods flowing while the webhook restarts
  (a malformed pod then pends with the same message as an event); Fail guarantees that no
  malformed pod is admitted, and that no pod of kgpu's starts without the GPU environment
  the mutating hook gives it (under Ignore, a share created while the webhook is down keeps
  whatever ``NVIDIA_VISIBLE_DEVICES`` its image sets). The webhook follows the same choice when it cannot read the
  Nodes a new Workspace is placed on (``kgpu webhook --on-nodes-unavailable``).
- ``replicas`` (``--replicas``, default 2): scheduler replicas; one leads, the others wait on
  the Lease, so a lost node costs seconds of scheduling, not a reschedule of the scheduler.
- ``workspaces`` (``--workspaces/--no-workspaces``, default on): the Workspace controller in
  the scheduler, and the role for its workloads; ``kaito_workspaces``
  (``--kaito-workspaces``, with ``workspaces``): KAITO's ``kaito.sh`` Workspaces reconciled
  and admitted too (the webhook's rule, the scheduler's flag and rights on them);
  ``autoscale`` (``--autoscale``): trigger
  pods in the install's namespace, their PriorityClass, and NodeClaims read;
  ``tenant_namespaces`` (``--tenant-namespaces``): where the scheduler may write (every
  role, and why: :mod:`kgpu.kube.install.rbac`).
- ``crds_only`` (``--crds-only``): just the four CRDs (for ``kgpu run --kubeconfig`` from a
  workstation, or a cluster where another tool manages the rest).

Namespaces labelled ``kgpu.io/admission: skip`` (the install's own is) are not sent to the
webhook, so the webhook's own pods can always start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Final

import yaml

from kgpu.kube.install.agent_daemonset import agent_name, agent_objects
from kgpu.kube.install.crds import GROUP, custom_resource_definitions
from kgpu.kube.install.options import (
    InstallOptions,
    Obj,
    cluster_identity,
    component_labels,
    container_security,
    field_env,
    namespaced_identity,
    object_meta,
    rbac_rule,
)
from kgpu.kube.install.rbac import scheduler_rbac, trigger_priority_class
from kgpu.kube.install.webhook_certs import WebhookTls, generate_tls, service_dns_names
from kgpu.kube.install.webhook_config import (
    SKIP_LABEL,
    b64,
    configuration,
    mutating_webhooks,
    service_client,
    validating_webhooks,
)

METRICS_PORT: Final = 10251  # `kgpu run`'s default, kube-scheduler's old port
WEBHOOK_PORT: Final = 8443
TLS_DIR: Final = "/etc/kgpu/tls"
POD_IP: Final = "POD_IP"


def scheduler_args(opts: InstallOptions) -> list[str]:
    """The scheduler container's command line (``kgpu run`` in the cluster); the Lease is
    named after the scheduler, in the install's namespace, and so are the reservation pods
    of shared GPUs. Without the webhook no share would get its GPU environment (and none
    would be placed): shares are then only accounted."""
    args = [
        "run",
        f"--scheduler-name={opts.scheduler_name}",
        "--leader-elect",
        f"--namespace-for-lease={opts.namespace}",
        f"--record-key={record_secret(opts)}",
        f"--metrics-port={METRICS_PORT}",
        # The pod's IP (the kubelet's probes and Prometheus reach it there), not every
        # interface: the kubelet expands $(POD_IP) from the container's environment.
        f"--metrics-address=$({POD_IP})",
        f"--reservation-namespace={opts.namespace}" if opts.webhook else "--no-confine-shares",
        "--workspaces" if opts.workspaces else "--no-workspaces",
    ]
    if opts.workspaces and opts.kaito_workspaces:
        args.append("--kaito-workspaces")
    if opts.autoscale:
        # Trigger pods where the scheduler may create pods: the install's namespace.
        args += ["--autoscale", f"--trigger-namespace={opts.namespace}"]
    return args


def record_secret(opts: InstallOptions) -> str:
    """The Secret with the key that signs kgpu's records on pods: in the install's
    namespace, made by the scheduler at its first start, kept across re-renders (a new key
    would make every record written so far untrusted)."""
    return f"{opts.namespace}/{opts.scheduler_name}-record-key"


def webhook_args(opts: InstallOptions) -> list[str]:
    """``kgpu webhook`` in the cluster; it reads Nodes (for Workspaces) and Queues (for who may
    use them) as its service account."""
    unavailable = "deny" if opts.failure_policy == "Fail" else "admit"
    args = [
        "webhook",
        f"--address=$({POD_IP})",
        f"--port={WEBHOOK_PORT}",
        f"--cert={TLS_DIR}/tls.crt",
        f"--key={TLS_DIR}/tls.key",
        f"--scheduler-name={opts.scheduler_name}",
        f"--record-key={record_secret(opts)}",
        f"--on-nodes-unavailable={unavailable}",
    ]
    if opts.agent:
        # A Device is written only by the agent on its node (docs/SECURITY.md).
        args.append(f"--agent-service-account={opts.namespace}:{agent_name(opts)}")
    return args


def render_objects(opts: InstallOptions, tls: WebhookTls | None = None) -> list[Obj]:
    """Every object of the install, in an order ``kubectl apply`` can create them in.

    ``tls`` is the webhook's certificate; by default a new one is made for the Service.
    """
    opts.check()
    crds = custom_resource_definitions()
    if opts.crds_only:
        return crds
    objects = [_namespace(opts), *crds, *_scheduler(opts)]
    if opts.agent:
        objects += agent_objects(opts)
    if opts.webhook:
        webhook_name = f"{opts.scheduler_name}-webhook"
        if tls is None:
            tls = generate_tls(service_dns_names(webhook_name, opts.namespace))
        objects += _webhook(opts, tls)
    return objects


class _NoAliases(yaml.SafeDumper):
    """Objects share label dicts; YAML anchors for them would puzzle a person reading."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(objects: Iterable[Obj], header: str = "") -> str:
    body = yaml.dump_all(
        list(objects), Dumper=_NoAliases, sort_keys=False, explicit_start=True, width=100
    )
    return header + body


# ---------------------------------------------------------------------------- pieces


def _namespace(opts: InstallOptions) -> Obj:
    meta = object_meta(opts, opts.namespace, "namespace", namespaced=False)
    meta["labels"][SKIP_LABEL] = "skip"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def _scheduler(opts: InstallOptions) -> list[Obj]:
    name = opts.scheduler_name
    meta = object_meta(opts, name, "scheduler")
    pod_spec: Obj = {
        "serviceAccountName": name,
        "priorityClassName": "system-cluster-critical",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
        "containers": [
            {
                "name": "scheduler",
                "image": opts.image,
                "args": scheduler_args(opts),
                "env": [
                    field_env("POD_NAME", "metadata.name"),
                    field_env("POD_NAMESPACE", "metadata.namespace"),
                    field_env(POD_IP, "status.podIP"),
                ],
                "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
                "livenessProbe": _probe("/healthz", "metrics", "HTTP", period=10, failures=3),
                "readinessProbe": _probe("/readyz", "metrics", "HTTP", period=5, failures=2),
                "resources": {
                    "requests": {"cpu": "500m", "memory": "512Mi"},
                    "limits": {"memory": "2Gi"},
                },
                "securityContext": container_security(),
            }
        ],
        # Replicas on different nodes, or a node failure takes the standby with the leader.
        "affinity": _spread(opts, "scheduler"),
    }
    return [
        *scheduler_rbac(opts),
        *([trigger_priority_class(opts)] if opts.autoscale else []),
        _deployment(opts, meta, "scheduler", opts.replicas, pod_spec),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                **object_meta(opts, f"{name}-metrics", "scheduler"),
                "annotations": {
                    "prometheus.io/scrape": "true",
                    "prometheus.io/port": str(METRICS_PORT),
                    "prometheus.io/path": "/metrics",
                },
            },
            "spec": {
                "selector": component_labels(opts, "scheduler"),
                "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}],
            },
        },
    ]


def _webhook(opts: InstallOptions, tls: WebhookTls) -> list[Obj]:
    name = f"{opts.scheduler_name}-webhook"
    meta = object_meta(opts, name, "webhook")
    secret = f"{name}-tls"
    pod_spec: Obj = {
        "serviceAccountName": name,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532},
        "containers": [
            {
                "name": "webhook",
                "image": opts.image,
                "args": webhook_args(opts),
                "env": [field_env(POD_IP, "status.podIP")],
                "ports": [{"name": "https", "containerPort": WEBHOOK_PORT, "protocol": "TCP"}],
                "livenessProbe": _probe("/healthz", "https", "HTTPS", period=10, failures=3),
                "readinessProbe": _probe("/healthz", "https", "HTTPS", period=5, failures=2),
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi"},
                    "limits": {"memory": "256Mi"},
                },
                "securityContext": container_security(),
                "volumeMounts": [{"name": "tls", "mountPath": TLS_DIR, "readOnly": True}],
            }
        ],
        "volumes": [{"name": "tls", "secret": {"secretName": secret}}],
        "affinity": _spread(opts, "webhook"),
    }
    deployment = _deployment(opts, meta, "webhook", 2, pod_spec)
    # A re-render makes a new certificate: the checksum changes, so the pods restart and
    # serve it, in step with the new caBundle.
    checksum = hashlib.sha256(tls.cert_pem).hexdigest()
    deployment["spec"]["template"]["metadata"]["annotations"] = {"kgpu.io/tls-sha256": checksum}
    client = service_client(opts.namespace, name, tls.ca_pem)
    config_meta = object_meta(opts, name, "webhook", namespaced=False)
    return [
        *cluster_identity(opts, name, "webhook", webhook_rules()),
        *_webhook_pod_reader(opts, name),
        *_key_reader(opts, name),
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": object_meta(opts, secret, "webhook"),
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": b64(tls.cert_pem),
                "tls.key": b64(tls.key_pem),
                "ca.crt": b64(tls.ca_pem),
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {
                "selector": component_labels(opts, "webhook"),
                "ports": [{"name": "https", "port": 443, "targetPort": "https"}],
            },
        },
        deployment,
        configuration(
            "ValidatingWebhookConfiguration",
            config_meta,
            validating_webhooks(
                client,
                opts.failure_policy,
                devices=opts.agent,
                kaito=opts.workspaces and opts.kaito_workspaces,
            ),
        ),
        configuration(
            "MutatingWebhookConfiguration",
            config_meta,
            mutating_webhooks(client, opts.failure_policy),
        ),
    ]


def webhook_rules() -> list[Obj]:
    """Nodes listed, to place Workspaces; Queues listed, to know who may use the queue a
    pod names; SubjectAccessReviews, to ask whether the creator of a Workspace that fits
    nowhere may see the cluster's node groups in the denial."""
    return [
        rbac_rule([""], ["nodes"], ["list"]),
        rbac_rule([GROUP], ["queues"], ["list"]),
        rbac_rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
    ]


def _webhook_pod_reader(opts: InstallOptions, name: str) -> list[Obj]:
    """With the agent: pods get in the install's namespace, where the agent pods run, to
    learn which node the pod behind a Device write runs on."""
    if not opts.agent:
        return []
    return namespaced_identity(opts, f"{name}-agent-pods", name, "webhook", [
        rbac_rule([""], ["pods"], ["get"])
    ])  # fmt: skip


def _key_reader(opts: InstallOptions, name: str) -> list[Obj]:
    """The webhook's Role: read the record key (it checks kgpu's own changes to its records
    on pods against it), that one Secret only."""
    key = record_secret(opts).split("/", 1)[1]
    rules = [{**rbac_rule([""], ["secrets"], ["get"]), "resourceNames": [key]}]
    return namespaced_identity(opts, f"{name}-record-key", name, "webhook", rules)


def _deployment(opts: InstallOptions, meta: Obj, component: str, replicas: int, pod: Obj) -> Obj:
    labels = component_labels(opts, component)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def _probe(path: str, port: str, scheme: str, *, period: int, failures: int) -> Obj:
    return {
        "httpGet": {"path": path, "port": port, "scheme": scheme},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 2,
    }


def _spread(opts: InstallOptions, component: str) -> Obj:
    term = {
        "weight": 100,
        "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": component_labels(opts, component)},
        },
    }
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [term]}}

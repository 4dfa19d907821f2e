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

from kgpu.kube.install.agent_daemonset import agent_objects
from kgpu.kube.install.crds import GROUP, custom_resource_definitions
from kgpu.kube.install.options import (
    RBAC,
    InstallOptions,
    Obj,
    cluster_identity,
    component_labels,
    container_security,
    field_env,
    object_meta,
    rbac_rule,
)
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


def scheduler_args(opts: InstallOptions) -> list[str]:
    """The scheduler container's command line (``kgpu run`` in the cluster); the Lease is
    named after the scheduler, in the install's namespace, and so are the reservation pods
    of shared GPUs. Without the webhook no share would get its GPU environment (and none
    would be placed): shares are then only accounted."""
    return [
        "run",
        f"--scheduler-name={opts.scheduler_name}",
        "--leader-elect",
        f"--namespace-for-lease={opts.namespace}",
        f"--record-key={record_secret(opts)}",
        f"--metrics-port={METRICS_PORT}",
        f"--reservation-namespace={opts.namespace}" if opts.webhook else "--no-confine-shares",
    ]


def record_secret(opts: InstallOptions) -> str:
    """The Secret with the key that signs kgpu's records on pods: in the install's
    namespace, made by the scheduler at its first start, kept across re-renders (a new key
    would make every record written so far untrusted)."""
    return f"{opts.namespace}/{opts.scheduler_name}-record-key"


def webhook_args(opts: InstallOptions) -> list[str]:
    """``kgpu webhook`` in the cluster; it reads Nodes (for Workspaces) and Queues (for who may
    use them) as its service account."""
    unavailable = "deny" if opts.failure_policy == "Fail" else "admit"
    return [
        "webhook",
        f"--port={WEBHOOK_PORT}",
        f"--cert={TLS_DIR}/tls.crt",
        f"--key={TLS_DIR}/tls.key",
        f"--scheduler-name={opts.scheduler_name}",
        f"--record-key={record_secret(opts)}",
        f"--on-nodes-unavailable={unavailable}",
    ]


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


def _scheduler_rules() -> list[Obj]:
    """Only what ``kgpu run`` does: read pods, bind them (the Binding carries the device
    annotations), correct those annotations to the GPUs the kubelet gave, delete preempted and reclaimed ones, read nodes, record
    events, read kgpu's custom resources and write the status of those it reports on; run
    the Workspace controller (:mod:`kgpu.kube.workspaces.controller`); with ``--autoscale``,
    create and delete trigger pods, install their PriorityClass and read Karpenter's
    NodeClaims."""
    crs = ["queues", "podgroups", "devices", "workspaces"]
    return [
        # delete: the victims of preemption and reclaim, and --autoscale's trigger pods;
        # create: those trigger pods (cluster-wide: their namespace is an option of `kgpu run`);
        # patch: the device annotations of a pod the kubelet gave other GPUs;
        # create, delete and patch: the reservation pods that hold shared GPUs (in the
        # install's namespace, covered by the cluster-wide rule)
        rbac_rule([""], ["pods"], ["get", "list", "watch", "create", "delete", "patch"]),
        # A share's GPU environment, in the share's own namespace (kgpu.kube.objects.gpu_env)
        rbac_rule([""], ["configmaps"], ["get", "create", "update", "patch"]),
        rbac_rule([""], ["pods/binding"], ["create"]),
        rbac_rule([""], ["nodes"], ["get", "list", "watch"]),
        # core/v1 Events: what `kubectl describe` shows on every version; patch counts repeats
        rbac_rule([""], ["events"], ["create", "patch"]),
        rbac_rule([GROUP], crs, ["get", "list", "watch"]),
        rbac_rule([GROUP], ["queues/status", "podgroups/status"], ["update", "patch"]),
        # The Workspace controller: it finds a workspace's workload by listing with a label
        # selector, creates what is missing, patches replicas to scale, deletes the
        # StatefulSets of replicas scaled away, and patches the Workspace's status. Whether
        # the LeaderWorkerSet CRD is installed it learns by listing LeaderWorkerSets.
        rbac_rule([GROUP], ["workspaces/status"], ["patch"]),
        # The workload's owner reference blocks the Workspace's deletion until it is gone;
        # where OwnerReferencesPermissionEnforcement is on, that takes update on finalizers.
        rbac_rule([GROUP], ["workspaces/finalizers"], ["update"]),
        rbac_rule([""], ["services"], ["list", "create"]),
        rbac_rule(["apps"], ["deployments"], ["list", "create", "patch"]),
        rbac_rule(["apps"], ["statefulsets"], ["list", "create", "patch", "delete"]),
        rbac_rule(["leaderworkerset.x-k8s.io"], ["leaderworkersets"], ["list", "create", "patch"]),
        # PriorityClasses, cached: a PodGroup's spec.priorityClassName ranks its job.
        # --autoscale: the trigger pods' PriorityClass, installed at start; Karpenter's
        # NodeClaims, read to follow each trigger's node.
        rbac_rule(["scheduling.k8s.io"], ["priorityclasses"], ["get", "list", "watch", "create"]),
        rbac_rule(["karpenter.sh"], ["nodeclaims"], ["get", "list", "watch"]),
    ]


def _scheduler(opts: InstallOptions) -> list[Obj]:
    name = opts.scheduler_name
    meta = object_meta(opts, name, "scheduler")
    lease_meta = object_meta(opts, f"{name}-leader-election", "scheduler")
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": opts.namespace}]
    # Leases are namespaced: a Role in the install's namespace, not a ClusterRole.
    lease_rules = [
        rbac_rule(["coordination.k8s.io"], ["leases"], ["create"]),
        {
            **rbac_rule(["coordination.k8s.io"], ["leases"], ["get", "update"]),
            "resourceNames": [name],
        },
        # The record key (kgpu.kube.live.record_key): made at the first start, read after.
        # create cannot be limited by name (the name is not known to RBAC before the object).
        rbac_rule([""], ["secrets"], ["create"]),
        {**rbac_rule([""], ["secrets"], ["get"]), "resourceNames": [f"{name}-record-key"]},
    ]
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
        *cluster_identity(opts, name, "scheduler", _scheduler_rules()),
        *_role(lease_meta, lease_rules, subject),
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
        # Its token lists Nodes (to place Workspaces) and nothing else.
        *cluster_identity(
            opts,
            name,
            "webhook",
            # Nodes: where a new Workspace fits; Queues: who may use the queue a pod names.
            [rbac_rule([""], ["nodes"], ["list"]), rbac_rule([GROUP], ["queues"], ["list"])],
        ),
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
            validating_webhooks(client, opts.failure_policy),
        ),
        configuration(
            "MutatingWebhookConfiguration",
            config_meta,
            mutating_webhooks(client, opts.failure_policy),
        ),
    ]


def _key_reader(opts: InstallOptions, name: str) -> list[Obj]:
    """The webhook's Role: read the record key (it checks kgpu's own changes to its records
    on pods against it), that one Secret only."""
    meta = object_meta(opts, f"{name}-record-key", "webhook")
    key = record_secret(opts).split("/", 1)[1]
    rules = [{**rbac_rule([""], ["secrets"], ["get"]), "resourceNames": [key]}]
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": opts.namespace}]
    return _role(meta, rules, subject)


def _role(meta: Obj, rules: list[Obj], subjects: list[Obj]) -> list[Obj]:
    """A Role and the RoleBinding that gives it to ``subjects``, both named by ``meta``."""
    return [
        {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": meta, "rules": rules},
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": meta["name"]},
            "subjects": subjects,
        },
    ]


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

"""The node agent's part of the install: a DaemonSet of ``kgpu agent`` on the GPU nodes.

Each agent pod reads its node's GPUs through NVML, which the NVIDIA container runtime
mounts into a container that asks for the driver's utility libraries
(``NVIDIA_DRIVER_CAPABILITIES=utility``, ``NVIDIA_VISIBLE_DEVICES=all``) without taking
any GPU from the device plugin, as NVIDIA's own feature discovery does. It asks the
kubelet's pod-resources API on its socket, and reads the kubelet's device checkpoint,
through read-only host mounts (a unix socket is connected to on a read-only mount too),
and may write only Devices (and read the Node it owns its Device by).
"""

from __future__ import annotations

from kgpu.kube.install.crds import GROUP
from kgpu.kube.install.options import (
    InstallOptions,
    Obj,
    cluster_identity,
    component_labels,
    container_security,
    field_env,
    object_meta,
    rbac_rule,
)

# Where the kubelet keeps its device checkpoint (`kgpu agent --kubelet-checkpoint`).
DEVICE_PLUGINS_DIR = "/var/lib/kubelet/device-plugins"
# Where the kubelet serves its pod-resources API (`kgpu agent --pod-resources-socket`).
POD_RESOURCES_DIR = "/var/lib/kubelet/pod-resources"


AGENT_METRICS_PORT = 10261  # `kgpu agent`'s default


def agent_args() -> list[str]:
    """The agent container's command line; the node comes from NODE_NAME."""
    return [
        "agent",
        "--interval=10",
        f"--metrics-port={AGENT_METRICS_PORT}",
        "--metrics-address=$(POD_IP)",  # the pod's IP, where the probe and Prometheus reach
    ]


def agent_rules() -> list[Obj]:
    """Only what ``kgpu agent`` does: read its Device, create it, replace it, patch its
    status; read its Node for the owner reference; tell a GPU's health as an Event."""
    return [
        rbac_rule([GROUP], ["devices"], ["get", "create", "update"]),
        rbac_rule([GROUP], ["devices/status"], ["patch"]),
        rbac_rule([""], ["nodes"], ["get"]),
        rbac_rule([""], ["events"], ["create"]),
    ]


# Where every client library looks for a pod's service account token.
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TOKEN_SECONDS = 3607  # an hour, as the API server's own projected tokens; the client rereads


def agent_name(opts: InstallOptions) -> str:
    return f"{opts.scheduler_name}-agent"


def bound_token_volume() -> Obj:
    """The service account token as a projected volume (TokenRequest, GA in Kubernetes
    1.20) rather than the legacy Secret: the API server binds it to the pod, and tells the
    pod's name and uid in every request's user info, by which the webhook lets an agent
    write its own node's Device only (kgpu.kube.admission.device_writer). The CA and the
    namespace are where the legacy Secret put them."""
    sources = [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_SECONDS}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]  # fmt: skip
    return {"name": "token", "projected": {"sources": sources, "defaultMode": 0o444}}


def agent_objects(opts: InstallOptions) -> list[Obj]:
    name = agent_name(opts)
    meta = object_meta(opts, name, "agent")
    labels = component_labels(opts, "agent")
    container: Obj = {
        "name": "agent",
        "image": opts.image,
        "args": agent_args(),
        "env": [
            field_env("NODE_NAME", "spec.nodeName"),
            field_env("POD_IP", "status.podIP"),
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        ],
        "resources": {
            "requests": {"cpu": "10m", "memory": "64Mi"},
            "limits": {"memory": "256Mi"},
        },
        # Root, to read the kubelet's checkpoint and reach its socket (both root's alone);
        # nothing else: no capabilities, no writes but to the API.
        "securityContext": container_security(),
        "ports": [{"name": "metrics", "containerPort": AGENT_METRICS_PORT, "protocol": "TCP"}],
        # 503 once no round has ended for 300 s: an NVML call hung on a GPU in a bad state.
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics", "scheme": "HTTP"},
            "periodSeconds": 30,
            "failureThreshold": 3,
            "timeoutSeconds": 2,
        },
        "volumeMounts": [
            {"name": "device-plugins", "mountPath": DEVICE_PLUGINS_DIR, "readOnly": True},
            {"name": "pod-resources", "mountPath": POD_RESOURCES_DIR, "readOnly": True},
            {"name": "token", "mountPath": TOKEN_DIR, "readOnly": True},
        ],
    }
    pod: Obj = {
        "serviceAccountName": name,
        # Not the legacy token, which names no pod: the bound one below.
        "automountServiceAccountToken": False,
        "priorityClassName": "system-node-critical",
        "nodeSelector": opts.agent_selector(),
        # GPU nodes are often tainted for GPU work only; the agent must run there anyway.
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "CriticalAddonsOnly", "operator": "Exists"},
        ],
        "containers": [container],
        **({"runtimeClassName": opts.agent_runtime_class} if opts.agent_runtime_class else {}),
        "volumes": [
            {"name": "device-plugins", "hostPath": {"path": DEVICE_PLUGINS_DIR}},
            {"name": "pod-resources", "hostPath": {"path": POD_RESOURCES_DIR}},
            bound_token_volume(),
        ],
    }
    return [
        *cluster_identity(opts, name, "agent", agent_rules()),
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": meta,
            "spec": {
                "selector": {"matchLabels": labels},
                "updateStrategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": "10%"},
                },
                "template": {
                    "metadata": {
                        "labels": labels,
                        "annotations": {
                            "prometheus.io/scrape": "true",
                            "prometheus.io/port": str(AGENT_METRICS_PORT),
                            "prometheus.io/path": "/metrics",
                        },
                    },
                    "spec": pod,
                },
            },
        },
    ]

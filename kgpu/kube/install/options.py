"""What every piece of the install shares: its options, names, labels and RBAC rules."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

Obj = dict[str, Any]

DEFAULT_NAMESPACE: Final = "kgpu-system"
DEFAULT_IMAGE: Final = "ghcr.io/kgpu/kgpu:0.1.0"
DEFAULT_SCHEDULER_NAME: Final = "kgpu-scheduler"
_LABEL_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class RenderError(ValueError):
    """An option that would render objects the API server refuses."""


@dataclass(frozen=True, slots=True)
class InstallOptions:
    namespace: str = DEFAULT_NAMESPACE
    image: str = DEFAULT_IMAGE
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    webhook: bool = True
    failure_policy: str = "Ignore"
    replicas: int = 2
    crds_only: bool = False
    agent: bool = True
    agent_node_selector: str = "nvidia.com/gpu.present=true"
    agent_runtime_class: str = ""  # "" : the nodes' default runtime gives the agent NVML
    workspaces: bool = True  # the Workspace controller in `kgpu run`, and its role
    # KAITO's kaito.sh Workspaces too (with workspaces): the webhook's rule, the runner's
    # informer and the rights on them (docs/MIGRATING.md, "From KAITO")
    kaito_workspaces: bool = False
    autoscale: bool = False  # trigger pods in the install's namespace, and their role
    # Where the scheduler may write (bind, delete, patch pods; ConfigMaps; workloads):
    # () is every namespace (docs/SECURITY.md)
    tenant_namespaces: tuple[str, ...] = ()

    def check(self) -> None:
        # Both names end up as object names and label values: DNS-1123 labels, 63 at most
        # (less the "-webhook" suffix some objects add).
        for flag, value, longest in (
            ("--namespace", self.namespace, 63),
            ("--scheduler-name", self.scheduler_name, 63 - len("-webhook")),
        ):
            if not _LABEL_NAME.fullmatch(value) or len(value) > longest:
                raise RenderError(
                    f'{flag} is "{value}", expected lower-case letters, digits and "-", '
                    f"starting and ending with a letter or digit, at most {longest} characters"
                )
        if not self.image or any(c.isspace() for c in self.image):
            raise RenderError(f'--image is "{self.image}", expected an image reference')
        if self.failure_policy not in ("Ignore", "Fail"):
            raise RenderError(
                f'--webhook-failure-policy is "{self.failure_policy}", expected Ignore or Fail'
            )
        for ns in self.tenant_namespaces:
            if not _LABEL_NAME.fullmatch(ns) or len(ns) > 63:
                raise RenderError(
                    f'--tenant-namespaces names "{ns}", expected namespace names separated by ","'
                )
        if self.replicas < 1:
            raise RenderError(f"--replicas is {self.replicas}, expected at least 1")
        if self.agent:
            self.agent_selector()
            name = self.agent_runtime_class
            if name and (not _LABEL_NAME.fullmatch(name) or len(name) > 63):
                raise RenderError(
                    f'--agent-runtime-class is "{name}", expected the name of a RuntimeClass, '
                    'such as "nvidia"'
                )

    def agent_selector(self) -> dict[str, str]:
        """``--agent-node-selector`` as a nodeSelector: ``key=value`` pairs, comma-separated."""
        out = {}
        for pair in filter(None, self.agent_node_selector.split(",")):
            key, sep, value = pair.strip().partition("=")
            if not sep or not key:
                raise RenderError(
                    f'--agent-node-selector is "{self.agent_node_selector}", expected '
                    'label=value pairs separated by ",", such as "nvidia.com/gpu.present=true"'
                )
            out[key] = value
        return out


def component_labels(opts: InstallOptions, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "kgpu",
        "app.kubernetes.io/instance": opts.scheduler_name,
        "app.kubernetes.io/component": component,
    }


def object_meta(opts: InstallOptions, name: str, component: str, namespaced: bool = True) -> Obj:
    meta: Obj = {"name": name}
    if namespaced:
        meta["namespace"] = opts.namespace
    meta["labels"] = {**component_labels(opts, component), "app.kubernetes.io/part-of": "kgpu"}
    return meta


def rbac_rule(groups: list[str], resources: list[str], verbs: list[str]) -> Obj:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


def field_env(name: str, path: str) -> Obj:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def container_security() -> Obj:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


RBAC: Final = "rbac.authorization.k8s.io"


def cluster_identity(
    opts: InstallOptions, name: str, component: str, rules: list[Obj]
) -> list[Obj]:
    """A ServiceAccount ``name`` in the install's namespace, and a ClusterRole of ``rules``
    bound to it."""
    meta = object_meta(opts, name, component)
    cluster_meta = object_meta(opts, name, component, namespaced=False)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRole",
            "metadata": cluster_meta,
            "rules": rules,
        },
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": cluster_meta,
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": opts.namespace}],
        },
    ]


def namespaced_identity(
    opts: InstallOptions, role: str, account: str, component: str, rules: list[Obj]
) -> list[Obj]:
    """A Role ``role`` of ``rules`` in the install's namespace, bound to the ServiceAccount
    ``account`` there."""
    meta = object_meta(opts, role, component)
    return [
        {"apiVersion": f"{RBAC}/v1", "kind": "Role", "metadata": meta, "rules": rules},
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": opts.namespace}],
        },
    ]

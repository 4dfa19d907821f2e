"""Against a real kube-apiserver (``KGPU_E2E_KUBECONFIG``): the install's RBAC, as the API
server's own authorizer applies it. The scheduler's account, impersonated, is refused what
the issue's attacker did with it: a privileged hostNetwork pod and a Deployment in
kube-system, a globalDefault PriorityClass; and may still create the pods of its own
namespace. The webhook's SubjectAccessReview answers for an administrator and a tenant."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kgpu.kube.admission.node_access import subject_access
from kgpu.kube.api.client import KubeClient
from kgpu.kube.install.bundle import render_objects
from kgpu.kube.install.options import InstallOptions
from tests.inputs import e2e_kubeconfig
from tests.test_e2e_webhook import collection, request

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
RUN = uuid.uuid4().hex[:8]
NAME = f"kgpu-lp-{RUN}"
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@pytest.fixture(scope="module")
def api() -> Iterator[Any]:
    from kubernetes import config

    loader: Any = config
    client = loader.new_client_from_config(config_file=e2e_kubeconfig())
    yield client
    client.close()


@pytest.fixture(scope="module")
def installed(api: Any) -> Iterator[str]:
    """The RBAC of an install whose scheduler may write in its own namespace only."""
    opts = InstallOptions(namespace=NAME, scheduler_name=NAME, tenant_namespaces=(NAME,))
    objects = [o for o in render_objects(opts) if o["kind"] in ("Namespace", *RBAC_KINDS)]
    made = []
    try:
        for obj in objects:
            request(api, "POST", collection(obj), obj)
            made.append(obj)
        yield f"system:serviceaccount:{NAME}:{NAME}"
    finally:
        for obj in reversed(made):
            if obj["kind"].startswith("Cluster"):
                request(api, "DELETE", f"{collection(obj)}/{obj['metadata']['name']}")
        if made:
            request(api, "DELETE", f"/api/v1/namespaces/{NAME}")
            ns = request(api, "GET", f"/api/v1/namespaces/{NAME}")
            ns["spec"]["finalizers"] = []
            request(api, "PUT", f"/api/v1/namespaces/{NAME}/finalize", ns)


def as_user(api: Any, user: str, method: str, path: str, body: Obj) -> int:
    """The HTTP status of a dry run of ``method path`` made as ``user`` (impersonated)."""
    url = f"{api.configuration.host}{path}?dryRun=All"
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "Impersonate-User": user,
        "Impersonate-Group": "system:serviceaccounts",
    }
    api.update_params_for_auth(headers, None, ["BearerToken"], url, method, body)
    response = api.call_api(method, url, header_params=headers, body=body, _request_timeout=30)
    response.read()
    return int(response.status)


def pod(namespace: str, **spec: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"probe-{RUN}", "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}], **spec},
    }


def test_the_scheduler_account_is_refused_a_privileged_pod_in_kube_system(
    api: Any, installed: str
) -> None:
    privileged = pod("kube-system", hostNetwork=True)
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert as_user(api, installed, "POST", "/api/v1/namespaces/kube-system/pods", privileged) == 403
    # and in any tenant namespace too: pods are created in the install's namespace only
    assert as_user(api, installed, "POST", "/api/v1/namespaces/default/pods", pod("default")) == 403
    assert as_user(api, installed, "POST", f"/api/v1/namespaces/{NAME}/pods", pod(NAME)) == 201


def test_the_scheduler_account_is_refused_workloads_and_priority_classes_elsewhere(
    api: Any, installed: str
) -> None:
    deployment: Obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"probe-{RUN}", "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "probe"}},
            "template": {"metadata": {"labels": {"app": "probe"}}, "spec": pod("x")["spec"]},
        },
    }
    path = "/apis/apps/v1/namespaces/kube-system/deployments"
    assert as_user(api, installed, "POST", path, deployment) == 403
    deployment["metadata"]["namespace"] = NAME
    assert (
        as_user(api, installed, "POST", f"/apis/apps/v1/namespaces/{NAME}/deployments", deployment)
        == 201
    )
    priority = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": f"probe-{RUN}"},
        "value": 1_000_000_000,
        "globalDefault": True,
    }
    assert (
        as_user(api, installed, "POST", "/apis/scheduling.k8s.io/v1/priorityclasses", priority)
        == 403
    )


def test_the_webhook_asks_who_may_list_nodes(installed: str) -> None:
    client = KubeClient.from_kubeconfig(e2e_kubeconfig())
    try:
        may_list_nodes = subject_access(client)
        assert may_list_nodes({"username": "admin", "groups": ["system:masters"]}) is True
        tenant = {"username": "alice", "groups": ["system:authenticated"]}
        assert may_list_nodes(tenant) is False
        # the scheduler reads nodes; it may list them
        assert may_list_nodes({"username": installed, "groups": ["system:serviceaccounts"]})
    finally:
        client.close()


def test_impersonated_answers_are_json(api: Any, installed: str) -> None:
    """The refusals above are RBAC's, not a malformed request's: the API server says so."""
    url = f"{api.configuration.host}/api/v1/namespaces/kube-system/pods?dryRun=All"
    headers = {"Content-Type": "application/json", "Impersonate-User": installed}
    api.update_params_for_auth(headers, None, ["BearerToken"], url, "POST", None)
    response = api.call_api("POST", url, header_params=headers, body=pod("kube-system"))
    response.read()
    status = json.loads(response.data)
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    assert f'User "{installed}" cannot create resource "pods"' in status["message"]

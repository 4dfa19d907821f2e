"""KAITO's Workspace against a real kube-apiserver (``KGPU_E2E_KUBECONFIG``): KAITO's CRD
(the structural one of tests/anchor_crds/kaito.py), kgpu's webhook registered as the install
registers it with ``--kaito-workspaces``; the seed's denial case is refused with the seed's
text, the seed's Workspace is admitted, and kgpu's controller creates its workload and writes
its status where KAITO keeps it.

Everything is named with a per-run suffix, in a namespace of its own; what the test creates
it deletes (the CRD only if it created it)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.resource_types import KAITO_WORKSPACES
from kgpu.kube.install.options import InstallOptions
from kgpu.kube.workspaces.controller import REQUEUE_NOT_READY_S, WorkspaceController
from tests.anchor_crds.kaito import SEED_DENIAL, seed_workspace, workspace_crd
from tests.inputs import e2e_kubeconfig
from tests.test_anchor_kaito import seed_nodes
from tests.test_e2e_webhook import (
    _wait_established,
    _wait_gone,
    create_until_denied,
    registered_webhook,
    request,
)

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
RUN = uuid.uuid4().hex[:8]
LABEL = {"kgpu-e2e-kaito": RUN}
NAMESPACE = f"kaito-e2e-{RUN}"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@pytest.fixture(scope="module")
def api() -> Any:
    from kubernetes import config

    loader: Any = config
    client = loader.new_client_from_config(config_file=e2e_kubeconfig())
    yield client
    client.close()


@pytest.fixture(scope="module")
def kaito_crd(api: Any) -> Iterator[None]:
    from kubernetes.client.exceptions import ApiException

    crd = workspace_crd()
    name = crd["metadata"]["name"]
    created = False
    try:
        request(api, "POST", CRDS, crd)
        created = True
    except ApiException as exc:
        if exc.status != 409:
            raise
    _wait_established(api, f"{CRDS}/{name}")
    request(api, "POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
    try:
        yield
    finally:
        request(api, "DELETE", f"/api/v1/namespaces/{NAMESPACE}")
        # No namespace controller runs beside this server: finalize the namespace.
        ns = request(api, "GET", f"/api/v1/namespaces/{NAMESPACE}")
        ns["spec"]["finalizers"] = []
        request(api, "PUT", f"/api/v1/namespaces/{NAMESPACE}/finalize", ns)
        if created:
            request(api, "DELETE", f"{CRDS}/{name}")
            _wait_gone(api, f"{CRDS}/{name}")


class SeedNodes:
    """The seed's cluster as the webhook's node source, not Nodes in the shared server
    (other tests' schedulers would take them for capacity)."""

    def nodes(self) -> list[Obj]:
        return seed_nodes()


@pytest.fixture(scope="module")
def webhook(api: Any, kaito_crd: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The install's own hook for KAITO's Workspaces, called here, for this run's objects."""
    folder: Path = tmp_path_factory.mktemp("kaito-tls")
    options = InstallOptions(failure_policy="Fail", kaito_workspaces=True)
    hooks = {"workspaces.kaito.sh"}
    with registered_webhook(
        api, folder, SeedNodes(), options, f"kgpu-e2e-kaito-{RUN}", LABEL, hooks
    ):
        yield


def test_the_seed_workspace_is_admitted_and_reconciled_and_its_denial_refused(
    api: Any, webhook: None
) -> None:
    path = f"/apis/kaito.sh/v1beta1/namespaces/{NAMESPACE}/workspaces"
    big = seed_workspace(f"too-big-{RUN}", NAMESPACE, replicas=3, labels=LABEL)
    code, message = create_until_denied(api, path, big)
    assert code == 422
    assert message.startswith(
        f'admission webhook "workspaces.kaito.sh" denied the request: {SEED_DENIAL} '
        "{A10, 1, 24576} (1 node): NodeGroupSizeFilter: node group had too few nodes"
    )
    name = f"phi-{RUN}"
    created = request(api, "POST", path, seed_workspace(name, NAMESPACE, labels=LABEL))
    assert created["inference"] == {"replicas": 2, "preset": {"name": "phi-4-mini-instruct"}}
    client = KubeClient.from_kubeconfig(e2e_kubeconfig())
    try:
        controller = WorkspaceController(
            client, resource=KAITO_WORKSPACES, nodes=seed_nodes, clock=lambda: 0.0
        )
        assert controller.reconcile(NAMESPACE, name) == REQUEUE_NOT_READY_S
        deployment = request(api, "GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}")
        assert deployment["spec"]["replicas"] == 2
        pod = deployment["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"apps": "phi-4-mini", "nvidia.com/gpu.product": "A100"}
        assert pod["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "4"}
        owner = deployment["metadata"]["ownerReferences"][0]
        assert (owner["apiVersion"], owner["kind"], owner["uid"]) == (
            "kaito.sh/v1beta1",
            "Workspace",
            created["metadata"]["uid"],
        )
        request(api, "GET", f"/api/v1/namespaces/{NAMESPACE}/services/{name}")
        status = request(api, "GET", f"{path}/{name}")["status"]
        assert status["workerNodes"] == ["a100-4-a", "a100-4-b"]
        assert {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]} == {
            "ResourceReady": ("True", "workspaceResourceStatusSuccess"),
            "InferenceReady": ("False", "ReplicasNotReady"),
            "WorkspaceSucceeded": ("False", "workspacePending"),
        }
        assert status["inference"] == {
            "replicas": 0,
            "selector": f"kgpu.io/workspace={name}",
            "perReplicaNodeCount": 1,
            "targetNodeCount": 2,
        }
        # A second pass finds the workload by the group on it and creates nothing more.
        assert controller.reconcile(NAMESPACE, name) == REQUEUE_NOT_READY_S
    finally:
        client.close()
        # No garbage collector beside this server: the workload goes by hand.
        request(api, "DELETE", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}")
        request(api, "DELETE", f"/api/v1/namespaces/{NAMESPACE}/services/{name}")
        request(api, "DELETE", f"{path}/{name}")

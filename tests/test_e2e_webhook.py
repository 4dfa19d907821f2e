"""Against a real kube-apiserver (``KGPU_E2E_KUBECONFIG``): the CRDs of ``kgpu manifests
--crds-only`` are accepted and reject a malformed Queue, the rest of the install passes the
server's own validation (dry run), and the admission webhook denies a malformed pod with
our message when the real server calls it over TLS, and a Workspace that no node group
fits with KAITO's denial (while one that fits is created).

Everything is named with a per-run suffix and selected by a per-run label, so the test
shares the server with others; what it creates it deletes (CRDs only if it created them).
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
import uuid
from collections.abc import Container, Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.admission.review import WorkspaceNodes
from kgpu.kube.admission.webhook_server import WebhookServer, tls_context
from kgpu.kube.install.bundle import render_objects
from kgpu.kube.install.options import InstallOptions
from kgpu.kube.install.webhook_certs import generate_tls
from tests.inputs import e2e_kubeconfig
from tests.workspace_fixtures import k8s_gpu_node, k8s_workspace

pytestmark = pytest.mark.e2e

Obj = dict[str, Any]
RUN = uuid.uuid4().hex[:8]
LABEL = {"kgpu-e2e-webhook": RUN}
GROUP, VERSION = "kgpu.io", "v1alpha1"


@pytest.fixture(scope="module")
def api() -> Any:
    path = e2e_kubeconfig()
    from kubernetes import config

    loader: Any = config
    client = loader.new_client_from_config(config_file=path)
    yield client
    client.close()


def request(api: Any, method: str, path: str, body: Obj | None = None, **query: str) -> Any:
    """One call to the API server; raises ApiException on an error status."""
    from kubernetes.client.exceptions import ApiException

    url = api.configuration.host + path
    if query:
        url += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    api.update_params_for_auth(headers, None, ["BearerToken"], url, method, body)
    response = api.call_api(method, url, header_params=headers, body=body, _request_timeout=30)
    response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
    return json.loads(response.data) if response.data else None


def status_of(exc: Exception) -> tuple[int, str]:
    """(HTTP status, message) of an ApiException."""
    body = json.loads(exc.body)  # type: ignore[attr-defined]
    return exc.status, body.get("message", "")  # type: ignore[attr-defined]


PLURALS = {
    "ServiceAccount": "serviceaccounts",
    "Secret": "secrets",
    "Service": "services",
    "Deployment": "deployments",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "DaemonSet": "daemonsets",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "CustomResourceDefinition": "customresourcedefinitions",
    "Namespace": "namespaces",
}


def collection(obj: Obj) -> str:
    version = obj["apiVersion"]
    prefix = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    namespace = obj["metadata"].get("namespace")
    middle = f"/namespaces/{namespace}" if namespace else ""
    return f"{prefix}{middle}/{PLURALS[obj['kind']]}"


# ---------------------------------------------------------------------------- CRDs


@pytest.fixture(scope="module")
def crds(api: Any) -> Iterator[None]:
    """The CRDs of ``kgpu manifests --crds-only``, created or brought up to date."""
    from kubernetes.client.exceptions import ApiException

    created = []
    for crd in render_objects(InstallOptions(crds_only=True)):
        path = collection(crd)
        name = crd["metadata"]["name"]
        try:
            request(api, "POST", path, crd)
            created.append(name)
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = request(api, "GET", f"{path}/{name}")
            crd = {
                **crd,
                "metadata": {
                    **crd["metadata"],
                    "resourceVersion": current["metadata"]["resourceVersion"],
                },
            }
            request(api, "PUT", f"{path}/{name}", crd)
        _wait_established(api, f"{path}/{name}")
    yield
    for name in created:  # only ours: another test may rely on CRDs it made
        request(api, "DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    # Deletion finishes in the background; a later test creating the CRDs must not meet
    # ours still terminating.
    for name in created:
        _wait_gone(api, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")


def _wait_gone(api: Any, path: str) -> None:
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            request(api, "GET", path)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(0.1)
    raise AssertionError(f"{path} still there 30 s after its deletion")


def _wait_established(api: Any, path: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        conditions = (request(api, "GET", path).get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} not Established after 30 s")


def queue(name: str, spec: Obj, annotations: dict[str, str] | None = None) -> Obj:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Queue",
        "metadata": {"name": name, "labels": LABEL, "annotations": annotations or {}},
        "spec": spec,
    }


QUEUES = f"/apis/{GROUP}/{VERSION}/queues"


def test_crd_schema_rejects_a_malformed_queue_naming_the_field(api: Any, crds: None) -> None:
    from kubernetes.client.exceptions import ApiException

    bad = queue(
        f"bad-{RUN}",
        {
            "deserved": {"cpu": "lots"},
            "cards": {"A100": {"deserved": -1}},
            "overQuotaWeight": "heavy",
        },
    )
    with pytest.raises(ApiException) as caught:
        request(api, "POST", QUEUES, bad)
    code, message = status_of(caught.value)
    assert code == 422
    assert f'Queue.kgpu.io "bad-{RUN}" is invalid' in message
    assert 'spec.deserved.cpu: Invalid value: "lots"' in message
    assert "spec.cards.A100.deserved: Invalid value: -1" in message
    assert 'spec.overQuotaWeight: Invalid value: "string"' in message

    good = queue(
        f"good-{RUN}",
        {"deserved": {"cpu": "100", "nvidia.com/gpu": 8}, "cards": {"A100": {"deserved": 8}}},
    )
    try:
        stored = request(api, "POST", QUEUES, good)
        assert stored["spec"]["overQuotaWeight"] == 1  # the schema's default
    finally:
        request(api, "DELETE", f"{QUEUES}/good-{RUN}")


def test_crd_schema_rejects_a_malformed_podgroup_and_workspace(api: Any, crds: None) -> None:
    from kubernetes.client.exceptions import ApiException

    group = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": f"pg-{RUN}", "namespace": "default"},
        "spec": {"minMember": 0},
    }
    with pytest.raises(ApiException) as caught:
        request(api, "POST", f"/apis/{GROUP}/{VERSION}/namespaces/default/podgroups", group)
    assert "spec.minMember: Invalid value: 0" in status_of(caught.value)[1]
    workspace = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Workspace",
        "metadata": {"name": f"ws-{RUN}", "namespace": "default"},
        "resource": {"labelSelector": {"matchLabels": {"apps": "llm"}}},
        "inference": {"replicas": 1},
    }
    with pytest.raises(ApiException) as caught:
        request(api, "POST", f"/apis/{GROUP}/{VERSION}/namespaces/default/workspaces", workspace)
    assert "inference.preset: Required value" in status_of(caught.value)[1]


def test_the_rendered_install_passes_the_servers_validation(api: Any, crds: None) -> None:
    """Namespace for real (it must exist for the rest), everything else as a dry run."""
    namespace = f"kgpu-e2e-{RUN}"
    objects = render_objects(InstallOptions(namespace=namespace, scheduler_name=f"kgpu-e2e-{RUN}"))
    assert objects[0]["kind"] == "Namespace"
    request(api, "POST", collection(objects[0]), objects[0])
    try:
        for obj in objects[1:]:
            if obj["kind"] == "CustomResourceDefinition":
                # the same objects the crds fixture applied: a create would be a conflict
                assert obj in render_objects(InstallOptions(crds_only=True))
                continue
            request(api, "POST", collection(obj), obj, dryRun="All")
    finally:
        request(api, "DELETE", f"/api/v1/namespaces/{namespace}")
        # No namespace controller runs beside this server: finalize the (empty) namespace.
        ns = request(api, "GET", f"/api/v1/namespaces/{namespace}")
        ns["spec"]["finalizers"] = []
        request(api, "PUT", f"/api/v1/namespaces/{namespace}/finalize", ns)


# ---------------------------------------------------------------------------- the webhook


class DesignNodes:
    """The KAITO design's cluster as the webhook's node source. Not Nodes created in the
    shared server: other tests' schedulers would see them as capacity. (Listing Nodes over
    HTTP is tested against the API double in test_webhook.py.)"""

    def nodes(self) -> list[Obj]:
        return [
            k8s_gpu_node("a100-4-a", "A100", 4, 40960),
            k8s_gpu_node("a100-4-b", "A100", 4, 40960),
            k8s_gpu_node("a100-8-a", "A100", 8, 81920),
            k8s_gpu_node("a10-a", "A10", 1, 24576),
        ]


@contextlib.contextmanager
def registered_webhook(
    api: Any,
    folder: Path,
    nodes: Any,
    options: InstallOptions,
    name: str,
    label: dict[str, str],
    hooks: Container[str] | None = None,
) -> Iterator[None]:
    """Our webhook on 127.0.0.1, with ``nodes`` for its Workspace checks, registered as the
    install registers it (``options``; of its hooks those named in ``hooks``, or all),
    called at our address instead of the in-cluster Service, failing closed (an
    unreachable webhook fails the test), and only for objects labelled ``label``."""
    tls = generate_tls(["localhost"], ["127.0.0.1"])
    (folder / "tls.crt").write_bytes(tls.cert_pem)
    (folder / "tls.key").write_bytes(tls.key_pem)
    server = WebhookServer(
        ("127.0.0.1", 0),
        tls_context(folder / "tls.crt", folder / "tls.key"),
        "kgpu-scheduler",
        WorkspaceNodes(nodes),
    )
    thread = server.start_background()
    rendered = render_objects(options)
    config = next(o for o in rendered if o["kind"] == "ValidatingWebhookConfiguration")
    if hooks is not None:
        config["webhooks"] = [h for h in config["webhooks"] if h["name"] in hooks]
    config["metadata"] = {"name": name}
    for hook in config["webhooks"]:
        hook["clientConfig"] = {
            "url": f"https://127.0.0.1:{server.port}/validate",
            "caBundle": base64.b64encode(tls.ca_pem).decode(),
        }
        hook["objectSelector"] = {"matchLabels": label}
    path = collection(config)
    request(api, "POST", path, config)
    try:
        yield
    finally:
        request(api, "DELETE", f"{path}/{name}")
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def webhook(api: Any, crds: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Our webhook, every hook of the install, for this run's objects only; yields the
    namespace to create pods in."""
    folder: Path = tmp_path_factory.mktemp("webhook-tls")
    options = InstallOptions(failure_policy="Fail")
    with registered_webhook(api, folder, DesignNodes(), options, f"kgpu-e2e-{RUN}", LABEL):
        yield "default"


def pod(name: str, annotations: dict[str, str], scheduler: str = "kgpu-scheduler") -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": LABEL, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
            ],
        },
    }


def create_until_denied(api: Any, path: str, obj: Obj) -> tuple[int, str]:
    """Create ``obj`` until the server calls the webhook: a new configuration takes the
    server a moment to pick up, and an object admitted meanwhile is deleted again."""
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            request(api, "POST", path, obj)
        except ApiException as exc:
            return status_of(exc)
        request(api, "DELETE", f"{path}/{obj['metadata']['name']}")
        time.sleep(0.2)
    raise AssertionError(f"{obj['kind']} {obj['metadata']['name']} was never denied")


def test_the_real_server_denies_a_malformed_pod_with_our_message(api: Any, webhook: str) -> None:
    pods = f"/api/v1/namespaces/{webhook}/pods"
    code, message = create_until_denied(api, pods, pod(f"bad-{RUN}", {"gpu-fraction": "abc"}))
    assert code == 422
    assert message == (
        'admission webhook "pods.kgpu.io" denied the request: '
        f'Pod default/bad-{RUN}: annotation gpu-fraction is "abc", expected a number with 0 < f <= 1'
    )
    admitted = []
    try:
        for name, annotations, scheduler in [
            (f"good-{RUN}", {"gpu-fraction": "0.5"}, "kgpu-scheduler"),
            (f"other-{RUN}", {"gpu-fraction": "abc"}, "default-scheduler"),
        ]:
            created = request(api, "POST", pods, pod(name, annotations, scheduler))
            admitted.append(name)
            assert created["metadata"]["annotations"] == annotations
        # Pods are reviewed on UPDATE too: an unsigned write of kgpu's record is denied
        # (kgpu.kube.admission.record_guard); the pod's own annotations may change.
        from kubernetes.client.exceptions import ApiException

        patch = {"metadata": {"annotations": {"kgpu.io/device-allocation": '{"gpu": []}'}}}
        with pytest.raises(ApiException) as denied:
            _merge_patch(api, f"{pods}/good-{RUN}", patch)
        code, message = status_of(denied.value)
        assert code == 422
        assert "annotation kgpu.io/device-allocation is written only by kgpu" in message
        _merge_patch(api, f"{pods}/good-{RUN}", {"metadata": {"annotations": {"team": "a"}}})
    finally:
        for name in admitted:
            request(api, "DELETE", f"{pods}/{name}")


def test_the_real_server_denies_a_malformed_card_quota(api: Any, webhook: str) -> None:
    bad = queue(f"quota-{RUN}", {}, {"volcano.sh/card.quota": '{"A100": "eight"}'})
    code, message = create_until_denied(api, QUEUES, bad)
    assert code == 422
    assert message == (
        'admission webhook "queues.kgpu.io" denied the request: '
        f'Queue quota-{RUN}: annotation volcano.sh/card.quota["A100"] is "eight", '
        "expected a whole number of cards, at least 0"
    )
    good = queue(f"quota-ok-{RUN}", {}, {"volcano.sh/card.quota": '{"A100": 8}'})
    request(api, "POST", QUEUES, good)
    request(api, "DELETE", f"{QUEUES}/quota-ok-{RUN}")


def test_the_real_server_denies_a_podgroup_smaller_than_its_gang(api: Any, webhook: str) -> None:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{webhook}/podgroups"
    group = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": f"pg-{RUN}", "labels": LABEL},
        "spec": {"minMember": 4, "maxMember": 2},
    }
    code, message = create_until_denied(api, path, group)
    assert (code, message) == (
        422,
        'admission webhook "podgroups.kgpu.io" denied the request: '
        f"PodGroup default/pg-{RUN}: spec.maxMember is 2, "
        "expected a whole number, at least minMember (4)",
    )


def test_the_real_server_denies_a_workspace_no_node_group_fits(api: Any, webhook: str) -> None:
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{webhook}/workspaces"

    def workspace(name: str, replicas: int) -> Obj:
        obj = k8s_workspace(name, replicas=replicas)
        obj["metadata"] = {"name": name, "labels": LABEL}
        return obj

    code, message = create_until_denied(api, path, workspace(f"ws-big-{RUN}", 3))
    assert code == 422
    assert message.startswith(
        'admission webhook "workspaces.kgpu.io" denied the request: No suitable node group '
        "found: insufficient capacity or no matching configurations after filtering. "
        "{A10, 1, 24576} (1 node): NodeGroupSizeFilter: node group had too few nodes"
    )
    assert "{A100, 4, 40960} (2 nodes): NodeGroupSizeFilter: " in message
    created = request(api, "POST", path, workspace(f"ws-{RUN}", 2))
    try:
        assert created["inference"]["replicas"] == 2
        # Raising replicas is an UPDATE: checked for its shape, never placed again.
        created["inference"]["replicas"] = 3
        updated = request(api, "PUT", f"{path}/ws-{RUN}", created)
        assert updated["inference"]["replicas"] == 3
    finally:
        request(api, "DELETE", f"{path}/ws-{RUN}")


def _merge_patch(api: Any, path: str, patch: Obj) -> Any:
    from kubernetes.client.exceptions import ApiException

    url = api.configuration.host + path
    headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
    api.update_params_for_auth(headers, None, ["BearerToken"], url, "PATCH", patch)
    response = api.call_api("PATCH", url, header_params=headers, body=patch, _request_timeout=30)
    response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
    return json.loads(response.data)

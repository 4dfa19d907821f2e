"""The admission webhook over real HTTPS on 127.0.0.1, with AdmissionReview v1 payloads as
the API server sends them: the verdicts, the exact denial messages, and the HTTP edge."""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.kube.admission.queue_fence import QueueSource
from kgpu.kube.admission.review import WorkspaceNodes
from kgpu.kube.admission.webhook_server import MAX_BODY, WebhookServer, tls_context
from kgpu.kube.api.client import KubeClient, Timeouts
from kgpu.kube.install.webhook_certs import generate_tls
from kgpu.kube.workspaces.node_source import ListedNodes
from tests.kube_double import KubeDouble
from tests.workspace_fixtures import k8s_gpu_node, k8s_workspace

Obj = dict[str, Any]
SCHEDULER = "kgpu-scheduler"


@contextlib.contextmanager
def serve(
    folder: Path, workspaces: WorkspaceNodes | None = None, queues: QueueSource | None = None
) -> Iterator[tuple[WebhookServer, ssl.SSLContext]]:
    tls = generate_tls(["localhost"], ["127.0.0.1"])
    (folder / "tls.crt").write_bytes(tls.cert_pem)
    (folder / "tls.key").write_bytes(tls.key_pem)
    webhook = WebhookServer(
        ("127.0.0.1", 0),
        tls_context(folder / "tls.crt", folder / "tls.key"),
        SCHEDULER,
        workspaces,
        queues,
    )
    thread = webhook.start_background()
    client = ssl.create_default_context(cadata=tls.ca_pem.decode())
    try:
        yield webhook, client
    finally:
        webhook.shutdown()
        webhook.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[WebhookServer, ssl.SSLContext]]:
    with serve(tmp_path_factory.mktemp("tls")) as served:
        yield served


def connect(server: tuple[WebhookServer, ssl.SSLContext]) -> http.client.HTTPSConnection:
    webhook, context = server
    return http.client.HTTPSConnection("127.0.0.1", webhook.port, context=context, timeout=5)


def post(
    server: tuple[WebhookServer, ssl.SSLContext], body: bytes, path: str = "/validate?timeout=10s"
) -> tuple[int, bytes]:
    conn = connect(server)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def admit(server: tuple[WebhookServer, ssl.SSLContext], review: Obj) -> Obj:
    status, body = post(server, json.dumps(review).encode())
    assert status == 200, body
    answer: Obj = json.loads(body)
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == review["request"]["uid"]
    response: Obj = answer["response"]
    return response


def pod(name: str = "p", annotations: dict[str, str] | None = None, **requests: Any) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi", **requests}},
                }
            ],
        },
    }


def queue(annotations: dict[str, str] | None = None, spec: Obj | None = None) -> Obj:
    return {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "team-a", "annotations": annotations or {}},
        "spec": spec or {},
    }


def review(obj: Obj, operation: str = "CREATE", old: Obj | None = None) -> Obj:
    """An AdmissionReview as kube-apiserver 1.20 sends it."""
    group, _, version = obj["apiVersion"].rpartition("/")
    kind = {"group": group, "version": version, "kind": obj["kind"]}
    plural = obj["kind"].lower() + "s"
    meta = obj["metadata"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": kind,
            "resource": {"group": group, "version": version, "resource": plural},
            "requestKind": kind,
            "requestResource": {"group": group, "version": version, "resource": plural},
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "operation": operation,
            "userInfo": {"username": "admin", "groups": ["system:masters"]},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


# ---------------------------------------------------------------------------- pods

DENIED_PODS = [
    (
        pod("bad", {"gpu-fraction": "abc"}),
        'Pod default/bad: annotation gpu-fraction is "abc", expected a number with 0 < f <= 1',
    ),
    (
        pod("big", {"gpu-fraction": "1.5"}),
        'Pod default/big: annotation gpu-fraction is "1.5", expected a number with 0 < f <= 1',
    ),
    (
        pod("mem", {"gpu-memory": "lots"}),
        'Pod default/mem: annotation gpu-memory is "lots", expected a whole number of MiB, at least 1',
    ),
    (
        pod("mem0", {"gpu-memory": "0"}),
        'Pod default/mem0: annotation gpu-memory is "0", expected a whole number of MiB, at least 1',
    ),
    (
        pod("card", {"volcano.sh/card.name": "A100|"}, **{"nvidia.com/gpu": "1"}),
        'Pod default/card: annotation volcano.sh/card.name is "A100|", '
        'expected GPU product names separated by "|", such as "A100|H100"',
    ),
    (
        pod("both", {"gpu-fraction": "0.5"}, **{"nvidia.com/gpu": "2"}),
        'Pod default/both: annotation gpu-fraction is "0.5", '
        "expected no gpu-fraction on a pod that requests nvidia.com/gpu: 2",
    ),
    (
        pod("cpu", cpu="two"),
        'Pod default/cpu: spec.containers[0].resources.requests[cpu] is "two", '
        "expected a quantity such as 500m, 4, 1.5, 8Gi or 1e3",
    ),
]


@pytest.mark.parametrize(
    ("obj", "message"), DENIED_PODS, ids=[p["metadata"]["name"] for p, _ in DENIED_PODS]
)
def test_malformed_pods_are_denied_naming_field_value_and_expectation(
    server: tuple[WebhookServer, ssl.SSLContext], obj: Obj, message: str
) -> None:
    response = admit(server, review(obj))
    assert response == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": False,
        "status": {"code": 422, "message": message},
    }


@pytest.mark.parametrize(
    "obj",
    [
        pod("share", {"gpu-fraction": "0.5", "volcano.sh/card.name": "A100|H100"}),
        pod("whole", None, **{"nvidia.com/gpu": "4"}),
        pod("cpu-only"),
    ],
    ids=["share", "whole", "cpu-only"],
)
def test_good_pods_are_allowed(server: tuple[WebhookServer, ssl.SSLContext], obj: Obj) -> None:
    assert admit(server, review(obj)) == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
    }


def test_pods_of_other_schedulers_are_not_ours_to_judge(
    server: tuple[WebhookServer, ssl.SSLContext],
) -> None:
    obj = pod("other", {"gpu-fraction": "abc"})
    obj["spec"]["schedulerName"] = "default-scheduler"
    assert admit(server, review(obj))["allowed"] is True
    del obj["spec"]["schedulerName"]
    assert admit(server, review(obj))["allowed"] is True


def test_the_message_names_the_pod_as_the_request_does(
    server: tuple[WebhookServer, ssl.SSLContext],
) -> None:
    # On CREATE the object may carry neither namespace nor (with generateName) a name.
    obj = pod("", {"gpu-fraction": "abc"})
    del obj["metadata"]["namespace"]
    obj["metadata"]["generateName"] = "job-"
    request = review(obj)
    request["request"]["namespace"] = "team"
    message = admit(server, request)["status"]["message"]
    assert message.startswith('Pod team/job-*: annotation gpu-fraction is "abc"')


def test_an_update_is_denied_only_when_it_breaks_a_valid_pod(
    server: tuple[WebhookServer, ssl.SSLContext],
) -> None:
    good = pod("u", {"gpu-fraction": "0.5"})
    bad = pod("u", {"gpu-fraction": "abc"})
    breaking = admit(server, review(bad, "UPDATE", good))
    assert breaking["allowed"] is False
    # Admitted before the webhook existed: still relabelled, or freed of its finalizers.
    relabel = copy.deepcopy(bad)
    relabel["metadata"]["labels"] = {"team": "a"}
    answer = admit(server, review(relabel, "UPDATE", bad))
    assert answer["allowed"] is True
    assert answer["warnings"] == [
        'Pod default/u: annotation gpu-fraction is "abc", expected a number with 0 < f <= 1'
    ]


# ---------------------------------------------------------------------------- queues and groups

QUOTA = "volcano.sh/card.quota"
# The model's rule (kgpu.model.card.parse_card_quota), which the scheduler reads them with.
QUOTA_EXPECTED = (
    "expected a JSON object of card names to whole numbers of cards, "
    'such as {"NVIDIA-A100-80GB": 8}'
)
WHOLE = "expected a whole number of cards, at least 0"
DENIED_QUEUES = [
    (
        "not-json",
        queue({QUOTA: "A100=8"}),
        f'Queue team-a: annotation {QUOTA} is "A100=8", {QUOTA_EXPECTED} '
        "(invalid JSON at character 0: Expecting value)",
    ),
    (
        "a-list",
        queue({QUOTA: "[8]"}),
        f'Queue team-a: annotation {QUOTA} is "[8]", {QUOTA_EXPECTED}',
    ),
    (
        "negative",
        queue({QUOTA: '{"A100": -1}'}),
        f'Queue team-a: annotation {QUOTA}["A100"] is -1, {WHOLE}',
    ),
    (
        "fraction",
        queue({QUOTA: '{"A100": 1.5}'}),
        f'Queue team-a: annotation {QUOTA}["A100"] is 1.5, {WHOLE}',
    ),
    (
        "string",
        queue({QUOTA: '{"A100": "8"}'}),
        f'Queue team-a: annotation {QUOTA}["A100"] is "8", {WHOLE}',
    ),
    (
        "empty-name",
        queue({QUOTA: '{" ": 8}'}),
        f'Queue team-a: annotation {QUOTA} key " " is " ", expected a card name, '
        "a non-empty card name such as NVIDIA-A100-80GB",
    ),
    (
        "limit-below-deserved",
        queue(spec={"cards": {"A100": {"deserved": 8, "limit": 4}}}),
        "Queue team-a: spec.cards[A100].limit is 4, expected at least deserved (8)",
    ),
]


@pytest.mark.parametrize(
    ("obj", "message"), [c[1:] for c in DENIED_QUEUES], ids=[c[0] for c in DENIED_QUEUES]
)
def test_malformed_queues_are_denied(
    server: tuple[WebhookServer, ssl.SSLContext], obj: Obj, message: str
) -> None:
    response = admit(server, review(obj))
    assert response["allowed"] is False
    assert response["status"]["message"] == message


def test_good_queues_and_other_kinds_are_allowed(
    server: tuple[WebhookServer, ssl.SSLContext],
) -> None:
    good = queue(
        {QUOTA: '{"NVIDIA-A100-SXM4-80GB": 8, "Tesla-T4": 0}'},
        {"cards": {"A100": {"deserved": 8, "limit": 8}}},
    )
    assert admit(server, review(good))["allowed"] is True
    volcano = {**queue({QUOTA: '{"A100": 2}'}), "apiVersion": "scheduling.volcano.sh/v1beta1"}
    assert admit(server, review(volcano))["allowed"] is True
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"},
    }
    assert admit(server, review(config))["allowed"] is True


def test_podgroup_max_member_is_not_below_min_member(
    server: tuple[WebhookServer, ssl.SSLContext],
) -> None:
    group: dict[str, Any] = {
        "apiVersion": "kgpu.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "research"},
        "spec": {"minMember": 4, "maxMember": 2},
    }
    response = admit(server, review(group))
    assert response["status"]["message"] == (
        "PodGroup research/g: spec.maxMember is 2, expected a whole number, at least minMember (4)"
    )
    group["spec"]["maxMember"] = 4
    assert admit(server, review(group))["allowed"] is True


# ---------------------------------------------------------------------------- the HTTP edge


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", b"body is not JSON\n"),
        (
            b"[" * 50_000 + b"]" * 50_000,
            b"body is not JSON within kgpu's bounds (nested 50000 deep, at most 100)\n",
        ),
        (b'{"kind": "Pod"}', b"expected a JSON AdmissionReview\n"),
        (
            b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {}}',
            b'AdmissionReview apiVersion is "admission.k8s.io/v1beta1", expected admission.k8s.io/v1\n',
        ),
        (
            b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": ""}}',
            b"AdmissionReview request has no uid\n",
        ),
    ],
)
def test_what_is_not_an_admission_review_gets_400(
    server: tuple[WebhookServer, ssl.SSLContext], body: bytes, message: bytes
) -> None:
    assert post(server, body) == (400, message)


def test_health_unknown_paths_and_oversized_bodies(
    server: tuple[WebhookServer, ssl.SSLContext],
) -> None:
    conn = connect(server)
    conn.request("GET", "/healthz")
    response = conn.getresponse()
    assert (response.status, response.read()) == (200, b"ok\n")
    # The same connection serves the next request (the API server keeps connections alive).
    conn.request("GET", "/metrics")
    response = conn.getresponse()
    assert response.status == 404
    response.read()
    conn.close()
    assert post(server, b"{}", path="/convert")[0] == 404
    # /mutate is served (kgpu.kube.admission.pod_env) and refuses what is not a review.
    assert post(server, b"{}", path="/mutate") == (400, b"expected a JSON AdmissionReview\n")
    conn = connect(server)
    conn.putrequest("POST", "/validate")
    conn.putheader("Content-Length", str(MAX_BODY + 1))
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()


def test_plain_http_and_untrusted_clients_are_refused(
    server: tuple[WebhookServer, ssl.SSLContext],
) -> None:
    webhook, _ = server
    plain = http.client.HTTPConnection("127.0.0.1", webhook.port, timeout=5)
    with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
        plain.request("GET", "/healthz")
        plain.getresponse()
    plain.close()
    stranger = ssl.create_default_context(cadata=generate_tls(["localhost"]).ca_pem.decode())
    untrusting = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=stranger, timeout=5)
    with pytest.raises(ssl.SSLCertVerificationError):
        untrusting.request("GET", "/healthz")
    untrusting.close()
    # and the server still serves the clients that trust it
    assert post(server, b"{not json")[0] == 400


# ---------------------------------------------------------------------------- workspaces

DENIAL = (
    "No suitable node group found: insufficient capacity or no matching configurations "
    "after filtering."
)
NODES = "/api/v1/nodes"


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    """The KAITO design's cluster: {A100, 4, 40960}x2, {A100, 8, 81920}x1, {A10, 1, 24576}x1."""
    with KubeDouble() as d:
        for node in [
            k8s_gpu_node("a100-4-a", "A100", 4, 40960),
            k8s_gpu_node("a100-4-b", "A100", 4, 40960),
            k8s_gpu_node("a100-8-a", "A100", 8, 81920),
            k8s_gpu_node("a10-a", "A10", 1, 24576),
        ]:
            d.put(node)
        yield d


@contextlib.contextmanager
def placing(double: KubeDouble, folder: Path, *, deny: bool = False) -> Iterator[Any]:
    """A webhook that lists the double's Nodes afresh for every review (ttl 0)."""
    client = KubeClient.from_kubeconfig(
        double.kubeconfig(folder), timeouts=Timeouts(connect=1.0, request=1.0)
    )
    try:
        with serve(folder, WorkspaceNodes(ListedNodes(client, ttl=0.0), deny)) as served:
            yield served
    finally:
        client.close()


@pytest.fixture
def ws_server(double: KubeDouble, tmp_path: Path) -> Iterator[Any]:
    with placing(double, tmp_path) as served:
        yield served


def node_lists(double: KubeDouble) -> int:
    return sum(1 for r in double.requests if r.method == "GET" and r.path == NODES)


def test_a_workspace_that_fits_a_node_group_is_allowed(double: KubeDouble, ws_server: Any) -> None:
    assert admit(ws_server, review(k8s_workspace(replicas=2))) == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
    }
    assert node_lists(double) == 1


def test_a_workspace_no_group_fits_is_denied_with_every_groups_reason(
    double: KubeDouble, ws_server: Any
) -> None:
    response = admit(ws_server, review(k8s_workspace(replicas=3)))
    too_few = "NodeGroupSizeFilter: node group had too few nodes for the replicas"
    assert response == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": False,
        "status": {
            "code": 422,
            "message": f"{DENIAL} "
            f"{{A10, 1, 24576}} (1 node): {too_few} "
            "(3 replicas x 1 node each = 3 nodes needed, 1 eligible); "
            f"{{A100, 4, 40960}} (2 nodes): {too_few} "
            "(3 replicas x 1 node each = 3 nodes needed, 2 eligible); "
            f"{{A100, 8, 81920}} (1 node): {too_few} "
            "(3 replicas x 1 node each = 3 nodes needed, 1 eligible).",
        },
    }
    # A node joins: the same Workspace now fits.
    double.put(k8s_gpu_node("a100-4-c", "A100", 4, 40960))
    assert admit(ws_server, review(k8s_workspace(replicas=3)))["allowed"] is True


def test_a_selector_that_leaves_no_node_is_denied(ws_server: Any) -> None:
    response = admit(ws_server, review(k8s_workspace(match_labels={"apps": "llm"})))
    message = response["status"]["message"]
    assert message.startswith(f"{DENIAL} {{A10, 1, 24576}} (1 node): LabelFilter: ")


def test_a_malformed_workspace_is_denied_without_reading_nodes(
    double: KubeDouble, ws_server: Any
) -> None:
    response = admit(ws_server, review(k8s_workspace(replicas=0)))
    assert response["status"] == {
        "code": 422,
        "message": "Workspace default/ws: inference.replicas is 0, "
        "expected a whole number of at least 1",
    }
    response = admit(ws_server, review(k8s_workspace(preset="gpt-9")))
    assert response["status"]["message"].startswith(
        'Workspace default/ws: inference.preset.name is "gpt-9", expected a known preset ('
    )
    assert node_lists(double) == 0


def test_an_update_checks_the_shape_and_never_re_places(double: KubeDouble, ws_server: Any) -> None:
    old = k8s_workspace(replicas=2)
    # Three replicas fit no group, but the group was chosen at creation: only scaled.
    grown = k8s_workspace(replicas=3)
    assert admit(ws_server, review(grown, "UPDATE", old)) == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
    }
    broken = admit(ws_server, review(k8s_workspace(replicas=0), "UPDATE", old))
    assert broken["allowed"] is False
    assert broken["status"]["message"].startswith("Workspace default/ws: inference.replicas is 0")
    assert node_lists(double) == 0


def test_unreadable_nodes_admit_with_a_warning_or_deny_when_told(
    double: KubeDouble, ws_server: Any, tmp_path: Path
) -> None:
    double.fail("GET", f"^{NODES}$", 500)
    response = admit(ws_server, review(k8s_workspace(replicas=3)))
    assert response["allowed"] is True
    [warning] = response["warnings"]
    assert warning.startswith(
        "Workspace default/ws: not checked against the cluster's Nodes (cannot list Nodes: "
    )
    assert warning.endswith(
        "the Workspace controller will place it or say why not in its NodeGroupSelected condition"
    )
    # A malformed Workspace is denied all the same: its shape needs no Nodes.
    assert admit(ws_server, review(k8s_workspace(replicas=0)))["allowed"] is False

    strict_folder = tmp_path / "strict"
    strict_folder.mkdir()
    with placing(double, strict_folder, deny=True) as server:
        double.fail("GET", f"^{NODES}$", 500)
        response = admit(server, review(k8s_workspace(replicas=2)))
        assert response["allowed"] is False
        assert response["status"]["code"] == 503
        assert response["status"]["message"].endswith(
            "denied because the webhook admits nothing it cannot check; try again"
        )
        # The failure is not remembered: the next review lists again and is placed.
        assert admit(server, review(k8s_workspace(replicas=2)))["allowed"] is True


def test_a_burst_of_workspaces_costs_one_node_list(double: KubeDouble, tmp_path: Path) -> None:
    now = [0.0]
    client = KubeClient.from_kubeconfig(double.kubeconfig(tmp_path))
    nodes = ListedNodes(client, ttl=5.0, clock=lambda: now[0])
    try:
        assert len(nodes.nodes()) == 4
        double.put(k8s_gpu_node("a100-4-c", "A100", 4, 40960))
        now[0] = 4.9
        assert len(nodes.nodes()) == 4  # kept: a list this young places as well
        now[0] = 5.0
        assert len(nodes.nodes()) == 5
        assert nodes.lists == node_lists(double) == 2
    finally:
        client.close()


REQUEST = "volcano.sh/card.request"


@pytest.mark.parametrize(
    ("kind", "api_version"),
    [("Job", "batch.volcano.sh/v1alpha1"), ("PodGroup", "scheduling.volcano.sh/v1beta1")],
)
def test_volcano_jobs_and_podgroups_card_request_is_checked(
    server: tuple[WebhookServer, ssl.SSLContext], kind: str, api_version: str
) -> None:
    """The capacity-card seed's pre-validation, at creation: a bad card.request is denied
    with what is wrong; a good one, and none, are allowed (the rest is Volcano's)."""
    obj: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "training", "namespace": "ml",
                     "annotations": {REQUEST: '{"NVIDIA-A100-80GB": -4}'}},
        "spec": {"minAvailable": 4, "minMember": 4, "queue": "team-a"},
    }  # fmt: skip
    response = admit(server, review(obj))
    assert response["allowed"] is False
    assert response["status"]["message"] == (
        f'{kind} ml/training: annotation {REQUEST}["NVIDIA-A100-80GB"] is -4, '
        "expected a whole number of cards, at least 0"
    )
    obj["metadata"]["annotations"][REQUEST] = '{"NVIDIA-A100-80GB|NVIDIA-H100-80GB": 4}'
    assert admit(server, review(obj))["allowed"] is True
    del obj["metadata"]["annotations"]
    assert admit(server, review(obj))["allowed"] is True
    # A Kubernetes batch/v1 Job of the same kind name is not ours to judge.
    other = {**obj, "apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "j", "namespace": "ml", "annotations": {REQUEST: "{"}}}  # fmt: skip
    assert admit(server, review(other))["allowed"] is True

"""The client and the informer, over real HTTP against the API double."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgpu.kube.api.client import KubeClient, Timeouts
from kgpu.kube.api.errors import (
    Conflict,
    Expired,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    PermanentError,
    TemporaryError,
    Timeout,
    Unavailable,
)
from kgpu.kube.api.informer import Informer
from kgpu.kube.api.resource_types import NODES, PODS, QUEUES
from tests.kube_double import KubeDouble
from tests.kube_objects import bind, learn_preconditions, node_obj, pod_obj, wait_until


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    with KubeDouble() as d:
        yield d


@pytest.fixture
def client(double: KubeDouble, tmp_path: Path) -> Iterator[KubeClient]:
    c = KubeClient.from_kubeconfig(
        double.kubeconfig(tmp_path), timeouts=Timeouts(connect=1, request=0.5, watch_grace=1)
    )
    yield c
    c.close()


@pytest.mark.parametrize(
    ("status", "error", "family"),
    [
        (409, Conflict, TemporaryError),
        (429, Unavailable, TemporaryError),
        (500, Unavailable, TemporaryError),
        (503, Unavailable, TemporaryError),
        (410, Expired, KubeError),
        (404, NotFound, PermanentError),
        (403, Forbidden, PermanentError),
        (422, Invalid, PermanentError),
    ],
)
def test_answers_become_our_errors(
    double: KubeDouble, client: KubeClient, status: int, error: type, family: type
) -> None:
    double.fail("GET", "/nodes$", status)
    with pytest.raises(error) as caught:
        client.list(NODES)
    assert isinstance(caught.value, family)
    assert isinstance(caught.value, KubeError)
    assert caught.value.status == status
    assert client.list(NODES).items == []  # the fault was for one call only


def test_a_slow_answer_is_bounded_by_the_timeout(double: KubeDouble, client: KubeClient) -> None:
    double.slow("GET", "/nodes$", 3.0)
    started = time.monotonic()
    with pytest.raises(Timeout):
        client.list(NODES)
    assert time.monotonic() - started < 2.0


def test_a_refused_connection_is_temporary(tmp_path: Path) -> None:
    with KubeDouble() as gone:
        path = gone.kubeconfig(tmp_path)
    client = KubeClient.from_kubeconfig(path, timeouts=Timeouts(connect=0.5, request=0.5))
    with pytest.raises(Unavailable):
        client.list(NODES)


def test_a_wrong_token_is_refused(double: KubeDouble, tmp_path: Path) -> None:
    client = KubeClient.from_kubeconfig(double.kubeconfig(tmp_path, "{token: stale}"))
    with pytest.raises(Forbidden, match="GET /api/v1/nodes: 401 Unauthorized") as caught:
        client.list(NODES)
    assert caught.value.status == 401
    with pytest.raises(Forbidden, match="WATCH /api/v1/nodes: 401"):
        client.watch(NODES, "1")
    client.close()


def test_a_renewed_exec_plugin_token_is_used_within_a_second(
    double: KubeDouble, tmp_path: Path
) -> None:
    # An exec credential plugin (as cloud providers' kubeconfigs use) whose tokens expire
    # at once, so the client asks it again whenever it reads its credentials.
    token_file = tmp_path / "token"
    token_file.write_text("double-token")
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1beta1',"
        " 'kind': 'ExecCredential', 'status': {'token': pathlib.Path("
        f"{str(token_file)!r}).read_text(), 'expirationTimestamp': '2020-01-01T00:00:00Z'}}}}))\n"
    )
    user = (
        "{exec: {apiVersion: client.authentication.k8s.io/v1beta1, "
        f"command: {sys.executable}, args: ['{plugin}']}}}}"
    )
    client = KubeClient.from_kubeconfig(double.kubeconfig(tmp_path, user))
    client.create(NODES, node_obj("n1"))
    token_file.write_text("renewed")
    double.token = "renewed"
    time.sleep(1.1)  # the client re-reads its credentials at most once a second
    assert [n["metadata"]["name"] for n in client.list(NODES).items] == ["n1"]
    client.close()


def test_merge_patch_preconditions(double: KubeDouble, client: KubeClient) -> None:
    pod = client.create(PODS, pod_obj("p"), "default")
    uid, version = pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]
    stale = {"metadata": {"resourceVersion": "1", "annotations": {"a": "b"}}}
    with pytest.raises(Conflict):
        client.patch(PODS, "p", stale, "default")
    fresh = {"metadata": {"uid": uid, "resourceVersion": version, "annotations": {"a": "b"}}}
    assert client.patch(PODS, "p", fresh, "default")["metadata"]["annotations"]["a"] == "b"


def test_an_answer_not_read_is_not_decoded_but_its_errors_still_raise(
    double: KubeDouble, client: KubeClient
) -> None:
    assert client.create(PODS, pod_obj("p"), "default", read_answer=False) == {}
    assert client.get(PODS, "p", "default")["metadata"]["name"] == "p"
    with pytest.raises(Conflict):
        client.create(PODS, pod_obj("p"), "default", read_answer=False)


def test_a_binding_sets_node_and_annotations_in_one_write(
    double: KubeDouble, client: KubeClient
) -> None:
    pod = client.create(PODS, pod_obj("p", annotations={"team": "ml"}), "default")
    uid, version = pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]
    note = {"kgpu.io/visible-devices": "0"}
    bind(client, "default", "p", "n1", uid=uid, resource_version=version, annotations=note)
    bound = client.get(PODS, "p", "default")
    assert bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"] == {"team": "ml", "kgpu.io/visible-devices": "0"}
    assert int(bound["metadata"]["resourceVersion"]) == int(version) + 1
    with pytest.raises(Conflict, match='already assigned to node "n1"'):
        bind(client, "default", "p", "n2", uid=uid)
    assert client.get(PODS, "p", "default")["spec"]["nodeName"] == "n1"


@pytest.mark.parametrize(
    ("stale", "field"),
    [({"uid": "another-uid"}, "UID"), ({"resource_version": "1"}, "ResourceVersion")],
)
def test_a_binding_of_another_pod_version_is_refused(
    double: KubeDouble, client: KubeClient, stale: dict[str, str], field: str
) -> None:
    pod = client.create(PODS, pod_obj("p"), "default")
    current = {
        "uid": pod["metadata"]["uid"],
        "resource_version": pod["metadata"]["resourceVersion"],
    }
    with pytest.raises(Conflict, match=f"Precondition failed: {field} in precondition"):
        bind(client, "default", "p", "n1", **{**current, **stale})
    assert not client.get(PODS, "p", "default")["spec"].get("nodeName")


def test_a_dry_run_binding_binds_nothing(double: KubeDouble, client: KubeClient) -> None:
    client.create(PODS, pod_obj("p"), "default")
    bind(client, "default", "p", "n1", annotations={"a": "b"}, dry_run=True)
    pod = client.get(PODS, "p", "default")
    assert not pod["spec"].get("nodeName")
    assert "a" not in (pod["metadata"].get("annotations") or {})


@pytest.mark.parametrize("checks", [True, False])
def test_learns_once_whether_the_server_checks_binding_preconditions(
    tmp_path: Path, checks: bool
) -> None:
    with KubeDouble(binding_preconditions=checks) as server:
        client = KubeClient.from_kubeconfig(server.kubeconfig(tmp_path))
        pods = [client.create(PODS, pod_obj(name), "default") for name in ("p", "q")]
        for pod in pods:
            meta = pod["metadata"]
            learned = learn_preconditions(
                client, "default", meta["name"], meta["uid"], meta["resourceVersion"]
            )
            assert learned is checks
        client.close()
        probes = [r for r in server.requests if r.path.endswith("/binding")]
        # Two dry runs for the first pod where both are refused; one where the first passes.
        assert [r.path.split("/")[-2] for r in probes] == (["p", "p"] if checks else ["p"])
        assert [r.status for r in probes] == ([409, 409] if checks else [201])
        assert not any(p["spec"].get("nodeName") for p in server.objects("pods"))


def test_an_inconclusive_probe_is_asked_again(double: KubeDouble, client: KubeClient) -> None:
    """A pod gone before the dry runs (404) says nothing about the server: the next bind
    asks again, and learns."""
    assert not learn_preconditions(client, "default", "gone", "some-uid", "7")
    pod = client.create(PODS, pod_obj("p"), "default")
    uid, version = pod["metadata"]["uid"], pod["metadata"]["resourceVersion"]
    assert learn_preconditions(client, "default", "p", uid, version)
    probes = [
        (r.path.split("/")[-2], r.status, r.query)
        for r in double.requests
        if r.path.endswith("/binding")
    ]
    assert probes == [
        ("gone", 404, "dryRun=All"),
        ("p", 409, "dryRun=All"),
        ("p", 409, "dryRun=All"),
    ]


def test_watch_sends_changes_and_bookmarks(double: KubeDouble, client: KubeClient) -> None:
    start = client.list(NODES).resource_version
    double.put(node_obj("n1"))
    kinds = [event.type for event in client.watch(NODES, start, timeout_seconds=1)]
    assert kinds[0] == "ADDED"
    assert "BOOKMARK" in kinds


# ---------------------------------------------------------------------------- informer


def informer_of(client: KubeClient, resource: object = NODES, **kwargs: object) -> Informer:
    informer = Informer(client, resource, watch_seconds=30, **kwargs)  # type: ignore[arg-type]
    informer.start()
    assert informer.synced.wait(5)
    return informer


def test_the_cache_follows_adds_updates_and_deletes(double: KubeDouble, client: KubeClient) -> None:
    double.put(node_obj("n1"))
    informer = informer_of(client)
    try:
        double.put(node_obj("n2"))
        double.put(node_obj("n1", gpus=4))
        double.remove("nodes", "n2")
        wait_until(
            lambda: (
                [
                    (n["metadata"]["name"], n["status"]["allocatable"]["nvidia.com/gpu"])
                    for n in informer.items()
                ]
                == [("n1", "4")]
            )
        )
    finally:
        informer.stop()


def test_a_dropped_watch_relists(double: KubeDouble, client: KubeClient) -> None:
    double.put(node_obj("n1"))
    double.put(node_obj("n2"))
    informer = informer_of(client)
    try:
        double.wait_watches(1)
        # Changes made while the informer is cut off must all show after it relists.
        double.fail("GET", "/nodes$", 503, times=2)
        double.drop_watches()
        double.remove("nodes", "n1")
        double.put(node_obj("n3"))
        wait_until(lambda: sorted(n["metadata"]["name"] for n in informer.items()) == ["n2", "n3"])
        log = [(r.method, r.path, r.status) for r in double.requests]
        assert informer.lists >= 2, log
        # The relist fills the cache before the informer opens its next watch: wait for
        # that watch rather than race it (this raced, and failed about once in 20 runs).
        wait_until(lambda: informer.watches >= 2)
    finally:
        informer.stop()


@pytest.mark.parametrize("in_stream", [True, False], ids=["410-in-stream", "410-http"])
def test_410_gone_relists_from_scratch(tmp_path: Path, in_stream: bool) -> None:
    with KubeDouble(gone_in_stream=in_stream) as double:
        client = KubeClient.from_kubeconfig(double.kubeconfig(tmp_path))
        double.put(node_obj("n1"))
        informer = informer_of(client)
        try:
            double.wait_watches(1)
            # Cut the watch; the informer relists and watches again, but that watch arrives
            # late, after a node went and the history was compacted: it gets 410 Gone and
            # the informer must list afresh to see the change.
            double.slow("GET", "/nodes$", 0.5, query="watch=true")
            double.drop_watches()
            wait_until(lambda: informer.lists >= 2)
            double.remove("nodes", "n1")
            double.put(node_obj("n2"))
            double.compact()
            wait_until(lambda: [n["metadata"]["name"] for n in informer.items()] == ["n2"])
            assert informer.lists >= 3
            gone = [r for r in double.requests if r.status == 410]
            assert gone or in_stream
        finally:
            informer.stop()
            client.close()


def test_a_missing_crd_leaves_an_empty_synced_cache(double: KubeDouble, client: KubeClient) -> None:
    informer = Informer(client, QUEUES, optional=True, absent_retry=0.2).start()
    try:
        assert informer.synced.wait(5)
        assert informer.absent and informer.items() == []
        double.install_crds()
        double.put({"apiVersion": "kgpu.io/v1alpha1", "kind": "Queue", "metadata": {"name": "q"}})
        wait_until(lambda: len(informer) == 1)
        assert not informer.absent
    finally:
        informer.stop()


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("p-1.a_b~c", "/api/v1/namespaces/default/pods/p-1.a_b~c"),
        ("a/b", "/api/v1/namespaces/default/pods/a%2Fb"),
        ("50%", "/api/v1/namespaces/default/pods/50%25"),
        ("x y?", "/api/v1/namespaces/default/pods/x%20y%3F"),
    ],
)
def test_a_name_stays_inside_its_path_segment(name: str, path: str) -> None:
    assert PODS.path("default", name) == path

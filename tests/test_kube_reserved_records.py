"""kgpu's records on pods cannot be forged or moved (issue #18, failure 3).

Against the API double with ``kgpu run``'s loop: a pod created already bound with a forged
record, a CPU pod with forged visible devices, and an owner editing the record of a pod
kgpu bound, before and after a restart: the books do not move, the next pods are not
placed on top, the scheduler warns, and ``kgpu explain`` says the record is not trusted.
The webhook denies writing the records at all (its review, below)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kgpu.kube.admission.review import review as admission_review
from kgpu.kube.api.client import KubeClient, load_configuration
from kgpu.kube.api.resource_types import PODS
from kgpu.kube.explain.explanation import explain_from_objects
from kgpu.kube.objects.record_signature import RecordKey, key_of_secret
from tests.kube_double import KubeDouble
from tests.kube_objects import SCHEDULER, allocation_of, node_obj, pod_obj, wait_until
from tests.test_kube_allocation_correction import crds, device, held  # noqa: F401
from tests.test_kube_scheduler import Start, double, events, start  # noqa: F401

ALLOCATION = "kgpu.io/device-allocation"
ONE_GPU = '{"gpu":[{"minor":%d,"resources":{"kubernetes.io/gpu-core":100}}]}'


def pod(api: KubeDouble, name: str) -> dict[str, Any]:
    return api.get("pods", name, "default") or {}


def pending(api: KubeDouble, name: str) -> bool:
    return any(e.startswith(f"{name}:") for e in events(api, "FailedScheduling"))


def test_a_pod_created_bound_with_a_forged_minor_is_not_accounted_there(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    double.put(node_obj("n1", gpus=2))
    # Created with spec.nodeName and a record naming GPU 1: kgpu never wrote it.
    double.put(pod_obj("forged", gpus=1, node="n1", annotations={ALLOCATION: ONE_GPU % 1}))
    start()
    double.put(pod_obj("b", gpus=1))
    wait_until(lambda: "b" in double.bound())
    # The forged pod is counted on the lowest free GPU, not where its record says.
    assert allocation_of(pod(double, "b"))[:2] == ("n1", [1])
    double.put(pod_obj("c", gpus=1))
    wait_until(lambda: pending(double, "c"))
    assert "c" not in double.bound()
    [warning] = events(double, "UntrustedRecord")
    assert warning.startswith(
        "forged: Pod default/forged: annotations kgpu.io/device-allocation carry no "
        "kgpu.io/record-signature: kgpu did not write them"
    )
    assert warning.endswith("they are not used; accounted on GPUs 0 of n1")


def test_a_cpu_pod_s_forged_visible_devices_are_reported_and_unused(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
) -> None:
    double.put(node_obj("n1", gpus=8))
    notes = {"kgpu.io/visible-devices": "0,1,2,3,4,5,6,7"}
    double.put(pod_obj("cpu", node="n1", annotations=notes))
    start()
    double.put(pod_obj("big", gpus=8))
    wait_until(lambda: "big" in double.bound())
    [warning] = events(double, "UntrustedRecord")
    assert "annotations kgpu.io/visible-devices carry no kgpu.io/record-signature" in warning
    assert warning.endswith("not used, accounted on n1")


def _owner_moves_the_record(api: KubeDouble, tmp_path: Path, name: str, minor: int) -> None:
    """The pod's owner edits its record, over HTTP, as kubectl annotate would."""
    client = KubeClient(load_configuration(api.kubeconfig(tmp_path)))
    try:
        patch = {"metadata": {"annotations": {ALLOCATION: ONE_GPU % minor}}}
        client.patch(PODS, name, patch, "default")
    finally:
        client.close()


def test_an_owner_moving_the_record_moves_nothing_before_or_after_a_restart(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,  # noqa: F811
    tmp_path: Path,
) -> None:
    double.put(node_obj("n1", gpus=2))
    double.put(device("n1", 2))
    first = start("first")
    double.put(pod_obj("a", gpus=1))
    wait_until(lambda: double.bound() == {"a": "n1"})
    [given] = allocation_of(pod(double, "a"))[1]
    other = 1 - given
    double.put(device("n1", 2, [held("a", f"fake-gpu-{given}")]))
    _owner_moves_the_record(double, tmp_path, "a", other)
    assert allocation_of(pod(double, "a"))[1] == [other]
    double.put(pod_obj("b", gpus=1))
    wait_until(lambda: "b" in double.bound())
    wait_until(lambda: len(events(double, "UntrustedRecord")) == 1)
    assert allocation_of(pod(double, "b"))[1] == [other]  # not on top of a
    [warning] = events(double, "UntrustedRecord")
    assert "annotation kgpu.io/record-signature does not match kgpu.io/device-allocation" in (
        warning
    )
    first.stop()
    start("second")
    double.put(pod_obj("c", gpus=1))
    wait_until(lambda: pending(double, "c"))
    assert set(double.bound()) == {"a", "b"}
    secret = double.get("secrets", "kgpu-scheduler-record-key", "kgpu-system") or {}
    key = key_of_secret(secret, "kgpu-system/kgpu-scheduler-record-key")
    answer = explain_from_objects(
        pod(double, "a"),
        double.objects("nodes"),
        double.objects("pods"),
        SCHEDULER,
        record_key=key,
    )
    assert answer.summary.startswith(
        "Pod default/a runs on node n1 (GPUs not recorded: its records are not trusted"
    )
    assert answer.summary.endswith(f"kgpu counts it on GPU {given}).")


# ---------------------------------------------------------------------------- the webhook

KEY = RecordKey(bytes(range(32)))


def _review(
    obj: dict[str, Any], operation: str, old: dict[str, Any] | None = None, kind: str = "Pod"
) -> Any:
    request: dict[str, Any] = {
        "uid": "r1",
        "kind": {"group": "", "version": "v1", "kind": kind},
        "operation": operation,
        "namespace": "default",
        "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return admission_review(body, SCHEDULER, record_key=lambda: KEY)["response"]


def test_the_webhook_denies_records_on_create() -> None:
    forged = pod_obj("p", node="n1", annotations={"kgpu.io/visible-devices": "0,1,2,3"})
    answer = _review(forged, "CREATE")
    assert not answer["allowed"]
    assert answer["status"]["message"] == (
        "Pod default/p: annotation kgpu.io/visible-devices is written only by kgpu, as it "
        "binds the pod; remove it (a pod is created without kgpu's records)"
    )
    assert _review(pod_obj("p", gpus=1), "CREATE")["allowed"]


def test_the_webhook_denies_an_unsigned_change_and_allows_kgpu_s_own() -> None:
    old = pod_obj("p", gpus=1, node="n1")
    old["metadata"]["uid"] = "u1"
    old["metadata"]["annotations"] = KEY.signed("u1", "n1", {ALLOCATION: ONE_GPU % 0})
    moved = json.loads(json.dumps(old))
    moved["metadata"]["annotations"][ALLOCATION] = ONE_GPU % 1
    answer = _review(moved, "UPDATE", old)
    assert not answer["allowed"]
    assert answer["status"]["message"].startswith(
        "Pod default/p: annotation kgpu.io/device-allocation is written only by kgpu (the "
        "change is not signed by kgpu: annotation kgpu.io/record-signature does not match"
    )
    removed = json.loads(json.dumps(old))
    removed["metadata"]["annotations"] = {}
    assert not _review(removed, "UPDATE", old)["allowed"]
    corrected = json.loads(json.dumps(old))
    corrected["metadata"]["annotations"] = KEY.signed("u1", "n1", {ALLOCATION: ONE_GPU % 1})
    assert _review(corrected, "UPDATE", old)["allowed"]
    relabelled = json.loads(json.dumps(old))
    relabelled["metadata"]["labels"] = {"team": "a"}
    assert _review(relabelled, "UPDATE", old)["allowed"]


def _review_configmap(obj: dict[str, Any], operation: str) -> Any:
    return _review(obj, operation, kind="ConfigMap")


def test_a_share_s_gpu_environment_is_written_only_by_kgpu() -> None:
    """A tenant who may edit ConfigMaps in its namespace cannot point its share's
    containers at another GPU: only a write signed for its data and owner passes."""
    data = {"NVIDIA_VISIBLE_DEVICES": "GPU-1"}
    owner = [{"apiVersion": "v1", "kind": "Pod", "name": "half", "uid": "u1"}]
    signature = KEY.sign_env("default", "kgpu-gpu-env-0a", "u1", data)
    cm: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "kgpu-gpu-env-0a",
            "namespace": "default",
            "labels": {"kgpu.io/gpu-env": "true"},
            "annotations": {"kgpu.io/record-signature": signature},
            "ownerReferences": owner,
        },
        "data": data,
    }
    assert _review_configmap(cm, "CREATE")["allowed"]
    assert _review_configmap(cm, "UPDATE")["allowed"]
    widened = json.loads(json.dumps(cm))
    widened["data"]["NVIDIA_VISIBLE_DEVICES"] = "all"
    answer = _review_configmap(widened, "UPDATE")
    assert not answer["allowed"]
    assert answer["status"]["message"] == (
        "ConfigMap default/kgpu-gpu-env-0a: a share's GPU environment is written only by kgpu "
        "(annotation kgpu.io/record-signature does not match its data and owner: only kgpu "
        "writes a share's GPU environment); leave it as kgpu wrote it"
    )
    # Its label dropped, or made in advance under the name the webhook chose: the same.
    unlabelled = json.loads(json.dumps(widened))
    del unlabelled["metadata"]["labels"]
    assert not _review_configmap(unlabelled, "UPDATE")["allowed"]
    other = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"}, "data": {}}
    assert _review_configmap(other, "CREATE")["allowed"]

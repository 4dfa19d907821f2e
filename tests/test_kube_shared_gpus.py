"""``kgpu run`` against the API double with shares held by reservation pods: a reservation
made for each shared GPU, the share's GPU-env ConfigMap written once the agent reports the
reservation's GPU, the books moved when the kubelet gave the reservation another GPU, MPS
limits on an MPS node, a share the webhook did not mutate refused with a message, and a
reservation deleted once its GPU holds no share."""

from __future__ import annotations

import base64
import time
from typing import Any

import pytest

from kgpu.kube.live.loop import LoopConfig
from kgpu.kube.objects.gpu_env import configmap_env
from kgpu.kube.objects.record_signature import RecordKey
from kgpu.kube.objects.reservation_pod import ReservationConfig
from tests.kube_double import KubeDouble
from tests.kube_objects import allocation_of, node_obj, pod_obj, wait_until
from tests.test_kube_allocation_correction import crds, device, held  # noqa: F401
from tests.test_kube_scheduler import Start, double, events, start  # noqa: F401

NS = "kgpu-system"


def fast(idle: float = 30.0, warn: float = 30.0) -> LoopConfig:
    return LoopConfig(
        backoff_initial=0.2,
        backoff_max=1.0,
        unschedulable_retry=0.5,
        uncertain_grace=10.0,
        idle_wait=0.05,
        reservations=ReservationConfig(idle_grace_s=idle, warn_after_s=warn),
    )


def share(name: str, fraction: str = "0.5", configmap: str | None = None) -> dict[str, Any]:
    """A share as the mutating webhook leaves it: it names its GPU-env ConfigMap."""
    cm = configmap if configmap is not None else f"kgpu-gpu-env-{name}"
    notes = {"kgpu.io/gpu-env-configmap": cm} if cm else {}
    obj = pod_obj(name, fraction=fraction, annotations=notes)
    obj["spec"]["containers"][0]["env"] = configmap_env(cm)
    return obj


def one_node(api: KubeDouble, gpus: int, **node: Any) -> None:
    """Node n1 and the Device its agent publishes (GPU minor m is fake-gpu-m)."""
    api.put(node_obj("n1", gpus=gpus, **node))
    api.put(device("n1", gpus))


def bound(api: KubeDouble) -> dict[str, str]:
    """Bound pods but reservations."""
    return {n: node for n, node in api.bound().items() if not n.startswith("kgpu-gpu-")}


def reservations(api: KubeDouble) -> list[dict[str, Any]]:
    return [p for p in api.objects("pods") if p["metadata"].get("namespace") == NS]


def reserved(api: KubeDouble) -> dict[str, int]:
    """Reservation pod name -> the GPU minor its annotation names."""
    return {
        p["metadata"]["name"]: int(p["metadata"]["annotations"]["kgpu.io/gpu-minor"])
        for p in reservations(api)
    }


def env(api: KubeDouble, pod: str) -> dict[str, str] | None:
    cm = api.get("configmaps", f"kgpu-gpu-env-{pod}", "default")
    return None if cm is None else dict(cm["data"])


def report(api: KubeDouble, gpus: int, **holders: str) -> None:
    """The agent's Device: ``holders`` maps a reservation pod name to the GPU id it got."""
    entries = [held(name, gpu, namespace=NS) for name, gpu in holders.items()]
    api.put(device("n1", gpus, entries))


def test_a_share_s_containers_see_the_gpu_its_reservation_holds(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,  # noqa: F811
) -> None:
    one_node(double, 2)
    double.put(share("a"))
    double.put(share("b"))
    start(loop=fast())
    wait_until(lambda: bound(double) == {"a": "n1", "b": "n1"})
    [minor] = allocation_of(double.get("pods", "a", "default") or {})[1]
    assert allocation_of(double.get("pods", "b", "default") or {})[1] == [minor]
    # One reservation for the GPU both shares are on, bound to the node, asking the plugin.
    wait_until(lambda: len(reservations(double)) == 1)
    [r] = reservations(double)
    assert r["spec"]["nodeName"] == "n1"
    assert r["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert reserved(double) == {r["metadata"]["name"]: minor}
    # No container may start before the reservation's GPU is known.
    assert env(double, "a") is None
    report(double, 2, **{r["metadata"]["name"]: f"fake-gpu-{minor}"})
    wait_until(lambda: env(double, "a") is not None and env(double, "b") is not None)
    assert env(double, "a") == {"NVIDIA_VISIBLE_DEVICES": f"fake-gpu-{minor}"}
    cm = double.get("configmaps", "kgpu-gpu-env-a", "default") or {}
    [owner] = cm["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Pod", "a")
    assert owner["uid"] == (double.get("pods", "a", "default") or {})["metadata"]["uid"]
    # Signed with kgpu's key, so the webhook lets no one else rewrite it.
    secret = double.get("secrets", "kgpu-scheduler-record-key", "kgpu-system") or {}
    key = RecordKey(base64.b64decode(secret["data"]["key"]))
    assert key.env_problem(cm) == ""
    wait_until(lambda: len(events(double, "GpuEnvWritten")) == 2)
    assert f"NVIDIA_VISIBLE_DEVICES=fake-gpu-{minor}" in events(double, "GpuEnvWritten")[0]


def test_the_shares_follow_the_gpu_the_kubelet_gave_their_reservation(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,  # noqa: F811
) -> None:
    one_node(double, 2)
    double.put(share("a", "0.25"))
    start(loop=fast())
    wait_until(lambda: bound(double) == {"a": "n1"} and len(reservations(double)) == 1)
    [minor] = allocation_of(double.get("pods", "a", "default") or {})[1]
    other = 1 - minor
    [name] = reserved(double)
    report(double, 2, **{name: f"fake-gpu-{other}"})
    wait_until(lambda: allocation_of(double.get("pods", "a", "default") or {})[1] == [other])
    wait_until(lambda: reserved(double) == {name: other})
    wait_until(lambda: env(double, "a") == {"NVIDIA_VISIBLE_DEVICES": f"fake-gpu-{other}"})
    wait_until(lambda: len(events(double, "DeviceAllocationCorrected")) == 1)
    [said] = events(double, "DeviceAllocationCorrected")
    assert f"GPU reservation ({name}) GPU {other} of node n1, not GPU {minor}" in said
    # A whole GPU goes where the kubelet has one free, the GPU the share was first put on.
    double.put(pod_obj("whole", gpus=1))
    wait_until(lambda: "whole" in bound(double))
    assert allocation_of(double.get("pods", "whole", "default") or {})[1] == [minor]
    assert len(reservations(double)) == 1


def test_two_reservations_that_got_each_other_s_gpu_move_no_share(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,  # noqa: F811
) -> None:
    one_node(double, 2)
    double.put(share("a", "0.75"))
    double.put(share("b", "0.75"))
    start(loop=fast())
    wait_until(lambda: len(bound(double)) == 2 and len(reservations(double)) == 2)
    was = {p: allocation_of(double.get("pods", p, "default") or {})[1][0] for p in "ab"}
    assert sorted(was.values()) == [0, 1]
    swapped = {name: f"fake-gpu-{1 - minor}" for name, minor in reserved(double).items()}
    report(double, 2, **swapped)
    # Each GPU is held for the shares on it; only the reservations' names follow.
    for p in "ab":
        seen = {"NVIDIA_VISIBLE_DEVICES": f"fake-gpu-{was[p]}"}
        wait_until(lambda p=p, seen=seen: env(double, p) == seen)  # type: ignore[misc]
        assert allocation_of(double.get("pods", p, "default") or {})[1] == [was[p]]
    wait_until(lambda: {n: f"fake-gpu-{m}" for n, m in reserved(double).items()} == swapped)
    assert events(double, "DeviceAllocationCorrected") == []
    assert events(double, "DeviceAllocationConflict") == []


def test_an_mps_node_s_shares_get_their_limits(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,  # noqa: F811
) -> None:
    one_node(double, 1, memory_mib=40960, labels={"nvidia.com/mps.capable": "true"})
    double.put(share("a", "0.25"))
    start(loop=fast())
    wait_until(lambda: len(reservations(double)) == 1)
    [name] = reserved(double)
    report(double, 1, **{name: "fake-gpu-0"})
    wait_until(lambda: env(double, "a") is not None)
    assert env(double, "a") == {
        "NVIDIA_VISIBLE_DEVICES": "fake-gpu-0",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=10240M",
    }


def test_a_share_the_webhook_did_not_see_is_not_placed_and_says_why(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,  # noqa: F811
) -> None:
    one_node(double, 1)
    double.put(share("a", configmap=""))
    double.put(share("b", configmap="someone-elses-configmap"))
    double.put(pod_obj("whole", gpus=1))
    # Created while the webhook did not serve: its own value would beat the device plugin's.
    sees_all = pod_obj("sees-all", gpus=1)
    sees_all["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    double.put(sees_all)
    start(loop=fast())
    wait_until(lambda: bound(double) == {"whole": "n1"})
    names = {"a", "b", "sees-all"}
    wait_until(lambda: {e.split(":")[0] for e in events(double, "FailedScheduling")} >= names)
    said = "\n".join(events(double, "FailedScheduling"))
    assert (
        'sees-all: Pod default/sees-all: spec.containers[0].env is [{"name": '
        '"NVIDIA_VISIBLE_DEVICES", "value": "all"}], expected no NVIDIA_VISIBLE_DEVICES'
    ) in said
    assert "a: Pod default/a: annotation kgpu.io/gpu-env-configmap is missing" in said
    assert 'b: Pod default/b: annotation kgpu.io/gpu-env-configmap is "someone-elses' in said
    assert "create the pod again while the webhook serves" in said
    assert reservations(double) == []  # whole GPUs come from the device plugin


def test_a_configmap_the_pod_does_not_own_is_left_alone(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,  # noqa: F811
) -> None:
    one_node(double, 1)
    double.put(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kgpu-gpu-env-a", "namespace": "default"},
            "data": {"NVIDIA_VISIBLE_DEVICES": "all"},
        }
    )
    double.put(share("a"))
    start(loop=fast())
    wait_until(lambda: len(reservations(double)) == 1)
    [name] = reserved(double)
    report(double, 1, **{name: "fake-gpu-0"})
    wait_until(lambda: len(events(double, "GpuEnvConfigMapTaken")) == 1)
    assert env(double, "a") == {"NVIDIA_VISIBLE_DEVICES": "all"}
    assert "is not this pod's; kgpu does not write it" in events(double, "GpuEnvConfigMapTaken")[0]


@pytest.mark.parametrize("phase", ["", "Failed"])
def test_a_reservation_goes_when_its_gpu_holds_no_share_or_it_failed(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,  # noqa: F811
    phase: str,
) -> None:
    one_node(double, 2)
    double.put(share("a"))
    start(loop=fast(idle=0.3))
    wait_until(lambda: len(reservations(double)) == 1)
    [r] = reservations(double)
    name = r["metadata"]["name"]
    if phase:  # the kubelet refused it (no GPU free): a new one is made
        double.put({**r, "status": {"phase": phase, "reason": "UnexpectedAdmissionError"}})
        wait_until(lambda: len(reservations(double)) == 1 and name not in reserved(double))
        return
    report(double, 2, **{name: f"fake-gpu-{reserved(double)[name]}"})
    wait_until(lambda: env(double, "a") is not None)
    double.remove("pods", "a", "default")
    wait_until(lambda: reservations(double) == [])


def test_a_share_whose_reservation_is_not_reported_is_told_why_it_waits(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,  # noqa: F811
) -> None:
    one_node(double, 1)
    double.put(share("a"))
    start(loop=fast(warn=0.3))
    wait_until(lambda: len(events(double, "GpuEnvPending")) == 1)
    [said] = events(double, "GpuEnvPending")
    [name] = reserved(double)
    assert said.startswith("a: the containers wait for their GPU environment (ConfigMap ")
    assert f"has not reported which GPU reservation pod {name} (phase Pending) holds" in said
    assert "is `kgpu agent` running on node n1" in said
    report(double, 1, **{name: "fake-gpu-0"})
    wait_until(lambda: env(double, "a") is not None)
    assert len(events(double, "GpuEnvPending")) == 1


def test_a_reservation_stays_while_its_node_is_not_ready_and_goes_with_the_node(
    double: KubeDouble,  # noqa: F811
    start: Start,  # noqa: F811
    crds: None,  # noqa: F811
) -> None:
    one_node(double, 1)
    double.put(node_obj("n2", gpus=0))
    double.put(share("a"))
    start(loop=fast(idle=0.2))
    wait_until(lambda: len(reservations(double)) == 1)
    [name] = reserved(double)
    # A kubelet restarting: the node is not Ready, and its GPU must stay held meanwhile.
    double.put(node_obj("n1", gpus=1, ready=False))
    double.put(pod_obj("first", cpu="1"))
    wait_until(lambda: "first" in bound(double))
    time.sleep(0.5)  # past the idle grace: a reservation taken for idle would go next session
    double.put(pod_obj("second", cpu="1"))
    wait_until(lambda: "second" in bound(double))
    assert list(reserved(double)) == [name]
    double.remove("nodes", "n1")
    wait_until(lambda: reservations(double) == [])

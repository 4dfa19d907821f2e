"""A device conflict on a node whose checkpoint names a pod the cache does not have yet is
held back for a grace, over real HTTP against the API double: the agent's report may reach
kgpu before the pod's watch event (two reservations that got each other's GPUs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kgpu.kube.api.client import KubeClient, Timeouts
from kgpu.kube.api.event_recorder import EventRecorder
from kgpu.kube.live.allocation_correction import CONFLICT, UNSEEN_GRACE_S, AllocationCorrector
from kgpu.kube.live.metrics import SchedulerMetrics
from kgpu.kube.snapshot.cache_snapshot import CacheSnapshot
from kgpu.kube.snapshot.kubelet_claims import Difference
from kgpu.model.pod import PodKey
from kgpu.state.cluster import ClusterState
from tests.kube_double import KubeDouble
from tests.kube_objects import pod_obj, wait_until


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[KubeDouble, KubeClient]]:
    with KubeDouble() as double:
        c = KubeClient.from_kubeconfig(
            double.kubeconfig(tmp_path), timeouts=Timeouts(connect=1, request=0.5)
        )
        yield double, c
        c.close()


@pytest.fixture
def scene(api: tuple[KubeDouble, KubeClient]) -> Iterator[tuple[KubeDouble, AllocationCorrector]]:
    """The corrector as ``kgpu run`` makes it, its events sent to the double."""
    double, client = api
    recorder = EventRecorder(client, workers=1).start()
    yield (
        double,
        AllocationCorrector(client, recorder, SchedulerMetrics(), lambda f: f(), lambda: True),
    )
    recorder.stop()


def conflicts(double: KubeDouble) -> list[str]:
    return [e["message"] for e in double.objects("events") if e["reason"] == CONFLICT]


def snapshot(unseen: set[str]) -> CacheSnapshot:
    pod = pod_obj("a", node="n1")
    why = "names GPUs [1] of node n1, expected GPUs that exist there and have room"
    snap = CacheSnapshot(ClusterState([]))
    snap.differences.append(Difference(pod, PodKey("default/a"), "n1", (0,), (1,), why))
    snap.unseen_holders = unseen
    return snap


def test_a_conflict_beside_an_unseen_pod_waits_its_grace_then_is_reported(
    scene: tuple[KubeDouble, AllocationCorrector],
) -> None:
    double, corrector = scene
    corrector.act(snapshot({"n1"}), clock=100.0)
    corrector.act(snapshot({"n1"}), clock=100.0 + UNSEEN_GRACE_S / 2)
    assert not corrector.due(100.0 + UNSEEN_GRACE_S / 2)
    assert corrector.due(100.0 + UNSEEN_GRACE_S)  # a session is due to look again
    corrector.act(snapshot({"n1"}), clock=100.0 + UNSEEN_GRACE_S)
    wait_until(lambda: len(conflicts(double)) == 1)
    assert "GPU 1 of node n1, not GPU 0" in conflicts(double)[0]
    assert not corrector.due(1000.0)  # reported: nothing held any more
    corrector.act(snapshot({"n1"}), clock=200.0)  # the same conflict, still beside it
    assert not corrector.due(1000.0)  # already reported: not held again


def test_a_conflict_with_every_holder_seen_is_reported_at_once(
    scene: tuple[KubeDouble, AllocationCorrector],
) -> None:
    double, corrector = scene
    corrector.act(snapshot(set()), clock=100.0)
    wait_until(lambda: len(conflicts(double)) == 1)


def test_a_held_conflict_that_goes_is_never_reported(
    scene: tuple[KubeDouble, AllocationCorrector],
) -> None:
    double, corrector = scene
    corrector.act(snapshot({"n1"}), clock=100.0)
    resolved = CacheSnapshot(ClusterState([]))  # the pod came into the cache: a correction
    corrector.act(resolved, clock=101.0)
    assert not corrector.due(100.0 + 2 * UNSEEN_GRACE_S)
    corrector.recorder.emit(pod_obj("marker"), "Normal", "Marker", "flushed")
    wait_until(lambda: any(e["reason"] == "Marker" for e in double.objects("events")))
    assert conflicts(double) == []

"""The event recorder's backlog, over real HTTP against the API double."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgpu.kube.api.client import KubeClient, Timeouts
from kgpu.kube.api.event_recorder import NORMAL, EventRecorder
from tests.kube_double import KubeDouble
from tests.kube_objects import pod_obj, wait_until


@pytest.fixture
def client(tmp_path: Path) -> Iterator[KubeClient]:
    with KubeDouble() as double:
        c = KubeClient.from_kubeconfig(
            double.kubeconfig(tmp_path), timeouts=Timeouts(connect=1, request=0.5)
        )
        yield c
        c.close()


def test_queued_counts_the_events_not_yet_sent(client: KubeClient) -> None:
    recorder = EventRecorder(client)
    for i in range(3):
        recorder.emit(pod_obj(f"p{i}"), NORMAL, "Scheduled", f"p{i} placed")
    assert (recorder.queued, recorder.sent) == (3, 0)  # no worker started yet
    recorder.start()
    wait_until(lambda: recorder.sent == 3)
    assert recorder.queued == 0
    recorder.stop()


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    with KubeDouble() as d:
        yield d


def test_a_temporary_failure_is_sent_again_after_a_back_off(
    double: KubeDouble, tmp_path: Path
) -> None:
    client = KubeClient.from_kubeconfig(double.kubeconfig(tmp_path))
    double.fail("POST", "/events$", 500, times=1)
    recorder = EventRecorder(client).start()
    recorder.emit(pod_obj("p"), NORMAL, "Scheduled", "p placed")
    wait_until(lambda: recorder.sent == 1)
    assert [r.status for r in double.requests if r.path.endswith("/events")] == [500, 201]
    assert [e["message"] for e in double.objects("events")] == ["p placed"]
    recorder.stop()
    client.close()


def test_a_refused_event_is_counted_and_not_sent_again(double: KubeDouble, tmp_path: Path) -> None:
    client = KubeClient.from_kubeconfig(double.kubeconfig(tmp_path))
    double.fail("POST", "/events$", 422, times=1)
    recorder = EventRecorder(client, workers=1).start()
    recorder.emit(pod_obj("p"), NORMAL, "Scheduled", "p placed")
    recorder.emit(pod_obj("q"), NORMAL, "Scheduled", "q placed")
    wait_until(lambda: recorder.sent + recorder.failed == 2)
    assert (recorder.sent, recorder.failed) == (1, 1)
    assert [e["message"] for e in double.objects("events")] == ["q placed"]
    recorder.stop()
    client.close()


def test_stop_sends_what_is_queued_first(double: KubeDouble, tmp_path: Path) -> None:
    client = KubeClient.from_kubeconfig(double.kubeconfig(tmp_path))
    recorder = EventRecorder(client, workers=1).start()
    for i in range(20):
        recorder.emit(pod_obj(f"p{i}"), NORMAL, "Scheduled", f"p{i} placed")
    recorder.stop()
    assert (recorder.sent, recorder.queued) == (20, 0)
    recorder.emit(pod_obj("late"), NORMAL, "Scheduled", "late placed")
    time.sleep(0.2)
    assert recorder.sent == 20  # stopped: kept, not sent
    client.close()


def test_a_conflict_is_sent_again_at_once(double: KubeDouble, tmp_path: Path) -> None:
    client = KubeClient.from_kubeconfig(double.kubeconfig(tmp_path))
    double.fail("POST", "/events$", 409, times=1)
    recorder = EventRecorder(client).start()
    recorder.emit(pod_obj("p"), NORMAL, "Scheduled", "p placed")
    wait_until(lambda: recorder.sent == 1)
    sent = [r for r in double.requests if r.path.endswith("/events")]
    assert [r.status for r in sent] == [409, 201]
    assert [e["message"] for e in double.objects("events")] == ["p placed"]
    recorder.stop()
    client.close()

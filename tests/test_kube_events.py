"""The event recorder's backlog, over real HTTP against the API double."""

from __future__ import annotations

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

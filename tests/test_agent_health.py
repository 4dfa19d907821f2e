"""The agent's probes and metrics, over HTTP as the kubelet and Prometheus read them."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgpu.agent.agent_loop import Agent, AgentOptions, Observer
from kgpu.agent.health import AgentMetrics
from kgpu.agent.probe import Xid
from kgpu.agent.publish import DevicePublisher
from kgpu.kube.api.client import KubeClient, Timeouts
from kgpu.kube.api.errors import Unavailable
from kgpu.kube.live.health_server import HealthServer
from tests.gpu_probes import hgx_h100
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj

NODE = "gpu-node-1"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[KubeDouble, KubeClient]]:
    with KubeDouble(crds=True) as double:
        double.put(node_obj(NODE, gpus=2))
        c = KubeClient.from_kubeconfig(
            double.kubeconfig(tmp_path), timeouts=Timeouts(connect=1, request=2)
        )
        yield double, c
        c.close()


def test_healthz_turns_503_when_rounds_stop_ending_and_readyz_waits_for_a_write(
    client: tuple[KubeDouble, KubeClient],
) -> None:
    double, kube = client
    clock = Clock()
    metrics = AgentMetrics(stall_after=300.0, clock=clock, wall=lambda: 1_800_000_000.0)
    probe = hgx_h100(2)
    options = AgentOptions(NODE, interval=10.0, resync=600.0)
    agent = Agent(
        Observer(probe, None, metrics=metrics),
        DevicePublisher(kube, NODE),
        options,
        clock=clock,
        metrics=metrics,
    )
    server = HealthServer(metrics.render, metrics.ready, live=metrics.live, port=0).start()
    try:
        assert _get(server.port, "/healthz") == (200, "ok")
        assert _get(server.port, "/readyz") == (
            503,
            "not ready: the Device has not been written yet",
        )
        double.fail("GET", "/devices/", 500)
        with pytest.raises(Unavailable):
            agent.round()
        assert _get(server.port, "/readyz")[0] == 503  # a failed round writes nothing
        probe.set_problem(1, "row remapping failed: GPU memory has uncorrectable errors")
        agent.round()
        clock.now += 10
        agent.round()  # nothing new
        assert _get(server.port, "/readyz") == (200, "ok")
        clock.now += 301  # a round that never ends: an NVML call hung
        assert _get(server.port, "/healthz") == (
            503,
            "not live: no round finished for 301s (a GPU or the API server does not answer)",
        )
        agent.round()  # still nothing new, but a round has ended
        assert _get(server.port, "/healthz") == (200, "ok")
        probe.watchable = True
        probe.events += [Xid(0, 13), Xid(0, 48)]
        agent.observer.watch(0.1)
        status, text = _get(server.port, "/metrics")
    finally:
        server.stop()
    assert status == 200
    lines = set(text.splitlines())
    for line in (
        'kgpu_agent_gpus{health="healthy"} 1.0',
        'kgpu_agent_gpus{health="unhealthy"} 1.0',
        'kgpu_agent_rounds_total{result="failed"} 1.0',
        'kgpu_agent_rounds_total{result="written"} 1.0',
        'kgpu_agent_rounds_total{result="unchanged"} 2.0',
        'kgpu_agent_xid_events_total{code="13",fatal="false"} 1.0',
        'kgpu_agent_xid_events_total{code="48",fatal="true"} 1.0',
        "kgpu_agent_last_round_timestamp_seconds 1.8e+09",
    ):
        assert line in lines, line

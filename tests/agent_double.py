"""The API double, a node and an agent for the node agent's tests (fixtures and helpers)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kgpu.agent.agent_loop import Agent, AgentOptions, Observer
from kgpu.agent.publish import DevicePublisher
from kgpu.kube.api.client import KubeClient, Timeouts
from tests.gpu_probes import TableProbe
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, wait_until

NODE = "gpu-node-1"
DEVICE_PATH = f"/apis/kgpu.io/v1alpha1/devices/{NODE}"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def double() -> Iterator[KubeDouble]:
    with KubeDouble(crds=True) as d:
        d.put(node_obj(NODE, gpus=4))
        yield d


@pytest.fixture
def client(double: KubeDouble, tmp_path: Path) -> Iterator[KubeClient]:
    c = KubeClient.from_kubeconfig(
        double.kubeconfig(tmp_path), timeouts=Timeouts(connect=1, request=2, watch_grace=1)
    )
    yield c
    c.close()


def make_agent(
    client: KubeClient,
    probe: TableProbe,
    checkpoint: Path | None = None,
    clock: Clock | None = None,
) -> Agent:
    options = AgentOptions(NODE, interval=0.1, resync=60.0)
    publisher = DevicePublisher(client, NODE, now=lambda: "2026-11-22T10:00:00Z")
    return Agent(Observer(probe, checkpoint), publisher, options, clock or Clock())


def device_of(double: KubeDouble) -> dict[str, Any]:
    found = double.get("devices", NODE)
    assert found is not None
    return found


def writes(double: KubeDouble) -> list[str]:
    return [f"{r.method} {r.path}" for r in double.requests if r.method != "GET"]


@contextlib.contextmanager
def running(agent: Agent) -> Iterator[None]:
    """``agent.run`` on a thread for the ``with`` block; stopped, and seen to stop, after."""
    stop = threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,))
    loop.start()
    try:
        yield
    finally:
        stop.set()
        loop.join(5)
    assert not loop.is_alive()


def health_becomes(double: KubeDouble, health: list[bool]) -> None:
    def reported() -> bool:
        obj = double.get("devices", NODE)
        return obj is not None and [d["health"] for d in obj["spec"]["devices"]] == health

    wait_until(reported, timeout=10, every=0.02)

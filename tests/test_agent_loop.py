"""The agent's loop over the API double: riding out a failing server, critical XIDs,
rounds without XID reports, what it logs, and the Events it tells on the Node."""

from __future__ import annotations

import logging

import pytest

from kgpu.agent.agent_loop import Agent, AgentOptions, Observer
from kgpu.agent.probe import Xid
from kgpu.agent.publish import DevicePublisher
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.event_recorder import EventRecorder
from tests.agent_double import (
    DEVICE_PATH,
    NODE,
    client,
    device_of,
    double,
    health_becomes,
    make_agent,
    running,
)
from tests.gpu_probes import hgx_h100
from tests.kube_double import KubeDouble
from tests.kube_objects import wait_until

__all__ = ["client", "double"]  # the fixtures this module uses, from tests.agent_double


def test_the_loop_rides_out_a_failing_server_and_stops_when_told(
    double: KubeDouble, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    probe = hgx_h100(2)
    agent = make_agent(client, probe)
    double.fail("GET", DEVICE_PATH + "$", 503, times=2)
    with running(agent):
        health_becomes(double, [True, True])
        probe.set_problem(1, "row remapping failed: GPU memory has uncorrectable errors")
        health_becomes(double, [True, False])
    assert f"Device {NODE} not written" in caplog.text and "again in" in caplog.text


def test_a_critical_xid_makes_its_gpu_unhealthy_at_once_and_for_good(
    double: KubeDouble, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kgpu.agent.agent_loop")
    probe = hgx_h100(4)
    probe.watchable = True
    observer = Observer(probe, None, ignored_xids=frozenset({94}), now=lambda: "T")
    # A long interval: only the XID can bring the next write this soon.
    options = AgentOptions(NODE, interval=60.0, resync=600.0)
    agent = Agent(observer, DevicePublisher(client, NODE), options)
    with running(agent):
        health_becomes(double, [True] * 4)
        # An application's own error, one the operator chose to ignore, then the GPU's.
        probe.events += [Xid(2, 13), Xid(2, 94), Xid(2, 79)]
        health_becomes(double, [True, True, False, True])
    (condition,) = device_of(double)["status"]["conditions"]
    assert condition["message"] == (
        "GPU 2 (GPU-00000002-0000-0000-0000-000000000000): XID 79 (GPU has fallen off the bus) "
        "at T; healthy again once the GPU is reset and the agent restarted"
    )
    gpu2 = "GPU 2 (GPU-00000002-0000-0000-0000-000000000000)"
    assert f"{gpu2}: XID 13 (see NVIDIA's XID catalogue), not the GPU's fault" in caplog.text
    assert f"{gpu2}: XID 94 (contained ECC error), not the GPU's fault" in caplog.text
    assert f"{gpu2}: XID 79 (GPU has fallen off the bus)" in caplog.text
    # It stays unhealthy though the GPU answers again.
    assert agent.observer.observe()[0].gpus[2].problem.startswith("XID 79")


def test_without_xid_reports_the_loop_still_rounds_every_interval(
    double: KubeDouble, client: KubeClient
) -> None:
    probe = hgx_h100(2)  # xids() says it cannot watch: the pause is a plain wait
    observer = Observer(probe, None)
    assert observer.watch(5.0) is None
    agent = Agent(observer, DevicePublisher(client, NODE), AgentOptions(NODE, 0.05, 600.0))
    with running(agent):
        health_becomes(double, [True, True])
        probe.set_problem(0, "row remapping failed: GPU memory has uncorrectable errors")
        health_becomes(double, [False, True])


def test_an_unhealthy_gpu_is_logged_once_not_every_round(caplog: pytest.LogCaptureFixture) -> None:
    probe = hgx_h100(2)
    observer = Observer(probe, None)
    probe.set_problem(1, "row remapping failed: GPU memory has uncorrectable errors")
    for _ in range(3):
        observer.observe()
    probe.lost[1] = "GPU is lost"
    for _ in range(2):
        observer.observe()
    warnings = [r.getMessage() for r in caplog.records if "is unhealthy" in r.getMessage()]
    assert [w.split(": ", 1)[1] for w in warnings] == [
        "row remapping failed: GPU memory has uncorrectable errors",
        "NVML cannot read GPU 1: GPU is lost",
    ]


def test_a_gpu_turning_unhealthy_and_back_is_told_on_the_node(
    double: KubeDouble, client: KubeClient
) -> None:
    events = EventRecorder(client, component="kgpu-agent", instance=NODE, workers=1).start()
    probe = hgx_h100(2)
    options = AgentOptions(NODE, interval=0.1, resync=60.0)
    agent = Agent(Observer(probe, None), DevicePublisher(client, NODE), options, events=events)
    try:
        agent.round()  # all healthy: nothing to tell
        probe.set_problem(1, "row remapping failed: GPU memory has uncorrectable errors")
        agent.round()
        agent.round()  # the same problem: told once
        probe.set_problem(1, "")
        agent.round()
    finally:
        events.stop()
    node = double.get("nodes", NODE)
    assert node is not None
    told = [
        (e["type"], e["reason"], e["message"], e["involvedObject"])
        for e in double.objects("events")
    ]
    gpu = "GPU 1 (GPU-00000001-0000-0000-0000-000000000000)"
    involved = {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node["metadata"]["uid"]}
    assert told == [
        (
            "Warning",
            "GPUUnhealthy",
            f"{gpu}: row remapping failed: GPU memory has uncorrectable errors",
            involved,
        ),
        ("Normal", "GPUHealthy", f"{gpu} is healthy again", involved),
    ]
    assert {e["source"]["component"] for e in double.objects("events")} == {"kgpu-agent"}


def test_a_gpu_lost_in_the_middle_of_a_round_costs_the_round_not_the_loop(
    double: KubeDouble, client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    probe = hgx_h100(2)
    probe.fail_links = {1}
    agent = make_agent(client, probe)
    with running(agent):
        wait_until(lambda: "NVML cannot open GPU 1: GPU is lost" in caplog.text, timeout=10)
        probe.fail_links = set()
        health_becomes(double, [True, True])

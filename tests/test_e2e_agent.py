"""End to end: the node agent's Device in a real kube-apiserver, and ``kgpu run`` keeping
pods off the GPU it reports unhealthy.

The agent runs in-process over a table probe (CI has no GPU; the NVML probe itself is
checked against nvidia-smi in test_agent_nvml.py on a GPU machine), with the real client:
the server's structural schema, its status subresource and its resourceVersions are the
ones a cluster has.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from kgpu.agent.agent_loop import Agent, AgentOptions, Observer
from kgpu.agent.publish import DevicePublisher
from kgpu.kube.api.client import KubeClient
from kgpu.kube.api.errors import KubeError
from kgpu.kube.api.event_recorder import EventRecorder
from kgpu.kube.api.resource_types import DEVICES, EVENTS
from kgpu.kube.objects.device_cr import devices_from_k8s
from tests.gpu_probes import hgx_h100
from tests.kube_objects import allocation_of, node_obj, wait_until
from tests.test_e2e_kube import Cluster, _stop, client, cluster, kubeconfig  # noqa: F401
from tests.test_e2e_webhook import api, crds  # noqa: F401

pytestmark = pytest.mark.e2e


def _table_row(kube: Any, path: str) -> list[Any]:
    """The object as ``kubectl get`` shows it: the server's Table, its one row's cells."""
    url = kube.configuration.host + path
    headers = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
    kube.update_params_for_auth(headers, None, ["BearerToken"], url, "GET", None)
    response = kube.call_api("GET", url, header_params=headers, _request_timeout=30)
    response.read()
    assert response.status == 200, response.data
    table = json.loads(response.data)
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names[:3] == ["Name", "Healthy", "Why"]
    cells: list[Any] = table["rows"][0]["cells"]
    return cells


def test_the_agents_device_keeps_kgpu_run_off_a_failed_gpu(
    cluster: Cluster,  # noqa: F811
    client: KubeClient,  # noqa: F811
    crds: None,  # noqa: F811
    api: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    node = f"{cluster.scheduler}-n0"
    cluster.add_nodes([node_obj(node, gpus=2, product="NVIDIA-H100-80GB-HBM3")])
    probe = hgx_h100(2)
    probe.set_problem(0, "row remapping failed: GPU memory has uncorrectable errors")
    options = AgentOptions(node)
    events = EventRecorder(client, component="kgpu-agent", instance=node, workers=1).start()
    agent = Agent(Observer(probe, None), DevicePublisher(client, node), options, events=events)
    try:
        assert agent.round() is True
        events.stop()
        # What `kubectl describe node` lists: events in "default" about the Node.
        told = [
            e
            for e in client.list(EVENTS, namespace="default").items
            if e["involvedObject"].get("name") == node
        ]
        assert [(e["type"], e["reason"], e["involvedObject"]["kind"]) for e in told] == [
            ("Warning", "GPUUnhealthy", "Node")
        ]
        assert told[0]["message"].endswith(
            ": row remapping failed: GPU memory has uncorrectable errors"
        )
        stored = client.get(DEVICES, node)
        assert stored["metadata"]["ownerReferences"][0]["name"] == node
        (condition,) = stored["status"]["conditions"]
        assert (condition["status"], condition["reason"]) == ("False", "GpusUnhealthy")
        assert condition["message"].startswith("GPU 0 (GPU-00000000-")
        assert [d.healthy for d in devices_from_k8s(stored).gpus] == [False, True]
        # `kubectl get devices` shows the node's GPU health (the CRD's printer columns).
        assert _table_row(api, DEVICES.path(name=node))[1:3] == ["False", "GpusUnhealthy"]
        # What the server stored is what the agent wants: a resync writes nothing.
        assert agent.publisher.publish(*agent.observer.observe()) is False

        # Two GPUs: the node has them, but one is unhealthy, and the pending reason says so.
        cluster.add_pods([cluster.pod("two", gpus=2)])
        log = tmp_path / "kgpu-run.log"
        process = cluster.run(log)
        try:
            wait_until(lambda: len(cluster.events("FailedScheduling")) >= 1, timeout=60)
            [failed] = cluster.events("FailedScheduling")[:1]
            assert failed["involvedObject"]["name"] == "two"
            assert "1 node(s) had unhealthy GPUs the pod would need" in failed["message"]
            cluster.add_pods([cluster.pod("one", gpus=1)])
            wait_until(lambda: "one" in cluster.bound(), timeout=60)
            pods = cluster.pods()
            assert allocation_of(pods["one"])[:2] == (node, [1])
            assert pods["one"]["metadata"]["annotations"]["kgpu.io/visible-devices"] == "1"
            assert "nodeName" not in pods["two"]["spec"]
        finally:
            _stop(process)
        assert process.returncode == 0, log.read_text()[-3000:]
    finally:
        with contextlib.suppress(KubeError):
            client.delete(DEVICES, node)

"""The NVML probe on this machine's own GPUs, checked against ``nvidia-smi``.

Where there is no NVIDIA driver (CI, laptops) the GPU tests are skipped and say so, even
under CI=true, and the first one checks what the agent says instead. Run on a GPU machine
with ``pytest tests/test_agent_nvml.py``.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kgpu.agent.device_object import CHECKPOINT_ANNOTATION, desired, health_status
from kgpu.agent.inventory import discover
from kgpu.agent.nvml import NvmlProbe, sysfs_bus_id
from kgpu.agent.probe import ProbeError
from kgpu.cli import main
from kgpu.kube.objects.device_cr import devices_from_k8s
from tests.crd_schemas import errors
from tests.kube_double import KubeDouble
from tests.kube_objects import node_obj, wait_until
from tests.kubelet_double import KubeletDouble

# Whether each test runs or skips depends on this machine's NVIDIA driver: the one skip CI
# allows (tests/inputs.py), as CI has no GPU.
pytestmark = pytest.mark.nvidia

_QUERY = "index,uuid,name,memory.total,pci.bus_id,driver_version"


def _probe() -> NvmlProbe | ProbeError:
    try:
        return NvmlProbe()
    except ProbeError as exc:
        return exc


def test_without_a_driver_the_agent_says_so_and_reports_the_kubelets_gpus(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    found = _probe()
    if isinstance(found, NvmlProbe):
        found.close()
        pytest.skip("this machine has an NVIDIA driver: the probe is checked against it instead")
    assert str(found).startswith("NVML cannot be used (")
    assert "run the agent on a node with the NVIDIA driver" in str(found)
    socket = tmp_path / "kubelet.sock"
    with KubeletDouble(socket) as kubelet:
        kubelet.register("nvidia.com/gpu", "fake-gpu-1", "fake-gpu-0")
        kubelet.give("default", "p", "main", "nvidia.com/gpu", "fake-gpu-1")
        args = ["agent", "--dry-run", "--pod-resources-socket", str(socket)]
        result = CliRunner().invoke(main, [*args, "--kubelet-checkpoint", str(tmp_path / "no")])
    assert result.exit_code == 0, result.output
    obj = yaml.safe_load(result.output)
    assert [(d["minor"], d["uuid"]) for d in obj["spec"]["devices"]] == [
        (0, "fake-gpu-0"),
        (1, "fake-gpu-1"),
    ]
    assert json.loads(obj["metadata"]["annotations"][CHECKPOINT_ANNOTATION]) == [
        {"podNamespace": "default", "podName": "p", "resourceName": "nvidia.com/gpu",
         "deviceIDs": ["fake-gpu-1"]}
    ]  # fmt: skip
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned[0].startswith("NVML cannot be used (")
    assert warned[0].endswith("; the GPUs reported are those the kubelet lists, memory not known")


def _smi(*args: str) -> str:
    return subprocess.run(
        ["nvidia-smi", *args], check=True, capture_output=True, text=True, timeout=60
    ).stdout


def _smi_topology(count: int) -> tuple[list[list[str]], list[str]]:
    """The GPU-to-GPU block of ``nvidia-smi topo -m`` and each GPU's "NUMA Affinity", in
    nvidia-smi's index order."""
    rows, numa = [], []
    for line in _smi("topo", "-m").splitlines():
        cells = line.split()
        if cells and re.fullmatch(r"GPU\d+", cells[0]) and len(cells) > count:
            rows.append(cells[1 : count + 1])
            numa.append(cells[count + 2] if len(cells) > count + 2 else "")
    return rows, numa


def test_the_probe_agrees_with_nvidia_smi() -> None:
    found = _probe()
    if isinstance(found, ProbeError):
        pytest.skip(f"no NVIDIA driver on this machine ({found}); run this on a GPU node")
    if shutil.which("nvidia-smi") is None:
        found.close()
        pytest.skip("NVML is here but nvidia-smi is not: nothing to check the probe against")
    probe = found
    try:
        inventory = discover(probe)
        rows = [
            r.split(", ")
            for r in _smi("--query-gpu=" + _QUERY, "--format=csv,noheader,nounits").splitlines()
        ]
        assert probe.count() == len(rows) == len(inventory.gpus) > 0
        by_index = {g.index: g for g in inventory.gpus}
        for index, uuid, name, memory, bus_id, driver in rows:
            gpu = by_index[int(index)]
            assert (gpu.uuid, gpu.product, gpu.memory_mib) == (uuid, name, int(memory))
            assert gpu.bus_id == sysfs_bus_id(bus_id)
            assert Path(f"/dev/nvidia{gpu.minor}").exists()
            assert inventory.driver == driver
            assert gpu.problem == ""
        # The link matrix, nvidia-smi's index order turned into the inventory's minor order.
        links, numa = _smi_topology(len(rows))
        slot_of_index = {g.index: s for s, g in enumerate(inventory.gpus)}
        for a, row in enumerate(links):
            for b, kind in enumerate(row):
                assert inventory.links[slot_of_index[a]][slot_of_index[b]] == kind
            if numa[a].isdigit():  # "N/A", or a range on machines where it spans nodes
                assert by_index[a].numa == int(numa[a])
        # The Device written from it is valid for the CRD and reads back as the same GPUs.
        obj = desired("this-node", inventory, None, None)
        obj["status"] = health_status(inventory, None, "2026-11-22T10:00:00Z")
        assert errors("Device", obj) == []
        devices = devices_from_k8s(obj)
        assert [d.uuid for d in devices.gpus] == [g.uuid for g in inventory.gpus]
        assert all(d.healthy for d in devices.gpus)
    finally:
        probe.close()


def test_kgpu_agent_once_writes_this_machines_gpus(tmp_path: Path) -> None:
    found = _probe()
    if isinstance(found, ProbeError):
        pytest.skip(f"no NVIDIA driver on this machine ({found}); run this on a GPU node")
    with found:
        inventory = discover(found)
    with KubeDouble(crds=True) as double:
        double.put(node_obj("this-node", gpus=len(inventory.gpus)))
        command = [sys.executable, "-P", "-m", "kgpu.cli", "agent", "--once", "--node", "this-node"]
        command += ["--kubeconfig", double.kubeconfig(tmp_path), "--no-kubelet-checkpoint"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"Device this-node: {len(inventory.gpus)} GPUs reported\n"
        obj = double.get("devices", "this-node")
    assert obj is not None
    assert errors("Device", obj) == []
    assert [d["uuid"] for d in obj["spec"]["devices"]] == [g.uuid for g in inventory.gpus]
    (condition,) = obj["status"]["conditions"]
    assert condition["status"] == "True"
    assert condition["message"].endswith(f"driver {inventory.driver}")


def test_the_probe_watches_for_xids_and_an_idle_gpu_raises_none() -> None:
    found = _probe()
    if isinstance(found, ProbeError):
        pytest.skip(f"no NVIDIA driver on this machine ({found}); run this on a GPU node")
    with found:
        events = found.xids(0.3)
        again = found.xids(0.0)
    if events is None:
        pytest.skip("NVML here cannot report XID events (no GPU registered for them)")
    assert events == [] and again == []


def test_kgpu_agent_serves_its_probes_and_stops_on_sigterm(tmp_path: Path) -> None:
    found = _probe()
    if isinstance(found, ProbeError):
        pytest.skip(f"no NVIDIA driver on this machine ({found}); run this on a GPU node")
    found.close()
    log = tmp_path / "agent.log"
    with KubeDouble(crds=True) as double:
        double.put(node_obj("this-node", gpus=1))
        command = [sys.executable, "-P", "-m", "kgpu.cli", "agent", "--node", "this-node"]
        command += ["--kubeconfig", double.kubeconfig(tmp_path), "--no-kubelet-checkpoint"]
        command += ["--metrics-port", "0", "--interval", "0.5"]
        with log.open("wb") as out:
            process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            ports: list[int] = []

            def serving() -> bool:
                match = re.search(r"metrics on port (\d+)", log.read_text())
                ports.extend([int(match.group(1))] if match else [])
                return bool(ports) and double.get("devices", "this-node") is not None

            wait_until(serving, timeout=60)
            base = f"http://127.0.0.1:{ports[0]}"
            wait_until(lambda: _fetch(base + "/readyz") == "ok", timeout=30)
            assert _fetch(base + "/healthz") == "ok"
            metrics = _fetch(base + "/metrics")
            assert 'kgpu_agent_gpus{health="unhealthy"} 0.0' in metrics
            assert 'kgpu_agent_rounds_total{result="written"} 1.0' in metrics
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
    assert process.returncode == 0, log.read_text()


def _fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return str(answer.read().decode())
    except OSError:
        return ""
